//! Resetting, in a restored guest, the TCP connections it had open when it was saved.
//!
//! A guest restored from a snapshot (or brought back from parking) still believes in the
//! connections it had open then, but the stack that carried them is gone. One the guest
//! writes to is reset at once (the new stack has no socket for it and answers RST); one
//! it only reads from would hang. So on a new NIC connection the stack sends the guest,
//! for each such connection, a bare ACK with a sequence number outside its window (two,
//! 2^31 apart, so one surely is): Linux answers an out-of-window segment with an ACK
//! carrying its exact `rcv_nxt` (RFC 793 p. 69; RFC 5961), which reaches the stack for
//! a connection it does not know, and smoltcp answers that with a RST whose sequence
//! number is that `rcv_nxt`, which Linux accepts: the program sees "connection reset".
//! A probe for a connection the guest no longer has gets a RST back, which is dropped.

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpProtocol, Ipv4Packet, Ipv4Repr,
    TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

use super::{GATEWAY_MAC, GUEST_MAC};

/// A guest connection: its guest end, then its remote end.
pub type FlowKey = (SocketAddrV4, SocketAddrV4);

/// When probes go out after a NIC connection starts: at once (they wait in QEMU's queue
/// while the restored VM is still stopped), then again in case the guest was not yet
/// taking frames.
const ROUNDS: [Duration; 3] = [Duration::ZERO, Duration::from_secs(1), Duration::from_secs(4)];

/// The probes still to send on one NIC connection.
pub(crate) struct StaleFlows {
    flows: Vec<FlowKey>,
    start: Instant,
    round: usize,
}

impl StaleFlows {
    pub(crate) fn new(flows: Vec<FlowKey>) -> StaleFlows {
        let round = if flows.is_empty() { ROUNDS.len() } else { 0 };
        StaleFlows { flows, start: Instant::now(), round }
    }

    /// How long until the next round, if one is left.
    pub(crate) fn next_in(&self) -> Option<Duration> {
        let at = self.start + *ROUNDS.get(self.round)?;
        Some(at.saturating_duration_since(Instant::now()))
    }

    /// The framed probes of every round due now, skipping connections the stack carries
    /// again (`live`: the guest reused the ports).
    pub(crate) fn due(&mut self, live: impl Fn(&FlowKey) -> bool) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while self.next_in().is_some_and(|d| d.is_zero()) {
            self.round += 1;
            for key in self.flows.iter().filter(|k| !live(k)) {
                out.extend(probes(*key));
            }
        }
        if !out.is_empty() {
            tracing::debug!("reset probes sent for {} connection(s) of the restored guest", self.flows.len());
        }
        out
    }
}

/// The two probe frames for `key`, each an ethernet frame from the gateway to the guest.
pub(crate) fn probes((guest, remote): FlowKey) -> [Vec<u8>; 2] {
    [0x1234_5678_u32, 0x9234_5678].map(|seq| frame(guest, remote, seq))
}

fn frame(guest: SocketAddrV4, remote: SocketAddrV4, seq: u32) -> Vec<u8> {
    let tcp = TcpRepr {
        src_port: remote.port(),
        dst_port: guest.port(),
        control: TcpControl::None,
        seq_number: TcpSeqNumber(i32::from_ne_bytes(seq.to_ne_bytes())),
        ack_number: Some(TcpSeqNumber(0)),
        window_len: 0,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload: &[],
    };
    let ip = Ipv4Repr {
        src_addr: *remote.ip(),
        dst_addr: *guest.ip(),
        next_header: IpProtocol::Tcp,
        payload_len: tcp.buffer_len(),
        hop_limit: 64,
    };
    let eth = EthernetRepr {
        src_addr: EthernetAddress(GATEWAY_MAC),
        dst_addr: EthernetAddress(GUEST_MAC),
        ethertype: EthernetProtocol::Ipv4,
    };
    let mut buf = vec![0u8; eth.buffer_len() + ip.buffer_len() + tcp.buffer_len()];
    let caps = ChecksumCapabilities::default();
    let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut frame);
    let mut packet = Ipv4Packet::new_unchecked(frame.payload_mut());
    ip.emit(&mut packet, &caps);
    let mut segment = TcpPacket::new_unchecked(packet.payload_mut());
    tcp.emit(&mut segment, &(*remote.ip()).into(), &(*guest.ip()).into(), &caps);
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_are_valid_acks_from_the_remote_end_2_31_apart() {
        let guest: SocketAddrV4 = "10.0.2.15:40000".parse().unwrap();
        let remote: SocketAddrV4 = "203.0.113.10:80".parse().unwrap();
        let [a, b] = probes((guest, remote));
        let mut seqs = Vec::new();
        for f in [&a, &b] {
            let eth = EthernetFrame::new_checked(&f[..]).unwrap();
            assert_eq!(eth.dst_addr(), EthernetAddress(GUEST_MAC));
            let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
            assert!(ip.verify_checksum());
            assert_eq!((ip.src_addr(), ip.dst_addr()), (*remote.ip(), *guest.ip()));
            let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
            assert!(tcp.verify_checksum(&(*remote.ip()).into(), &(*guest.ip()).into()));
            assert!(tcp.ack() && !tcp.syn() && !tcp.rst() && !tcp.fin());
            assert_eq!((tcp.src_port(), tcp.dst_port()), (80, 40000));
            seqs.push(tcp.seq_number());
        }
        assert_eq!(seqs[1].0.wrapping_sub(seqs[0].0), i32::MIN, "2^31 apart");
    }

    #[test]
    fn rounds_are_due_once_and_skip_live_connections() {
        let key: FlowKey = ("10.0.2.15:1".parse().unwrap(), "192.0.2.9:2".parse().unwrap());
        let mut stale = StaleFlows::new(vec![key]);
        assert_eq!(stale.due(|_| false).len(), 2, "the first round is due at once");
        assert!(stale.due(|_| false).is_empty(), "and only once");
        assert!(stale.next_in().is_some());
        assert!(StaleFlows::new(Vec::new()).next_in().is_none());
        let mut live = StaleFlows::new(vec![key]);
        assert!(live.due(|_| true).is_empty());
    }
}
