//! The userspace TCP/IP stack facing the guest (smoltcp), on one tokio task.
//!
//! - `device`: the NIC socket's framing as a smoltcp device.
//! - `guest`: one accepted guest connection as channels of byte chunks.
//! - `flows`: the per-connection table: held SYNs, sockets, byte pumping.
//! - `stale`: resetting, in a restored guest, the connections it had open when saved.
//!
//! The stack is the gateway 10.0.2.2 (MAC [`GATEWAY_MAC`]) and answers ARP only for it.
//! Every IPv4 destination is accepted (smoltcp's AnyIP): a guest SYN to any IP:port is
//! held and reported as a `NewFlow`; the egress side answers with
//! `StackCmd::Accept` (a listening socket for exactly that endpoint is made and the
//! SYN replayed into it) or `StackCmd::Refuse` (the SYN is replayed with no socket, so
//! smoltcp answers RST: "connection refused"). UDP to port 53 on any address goes to the
//! DNS server; other UDP gets ICMP port unreachable and a log line; ICMP and IPv6 are
//! dropped.

pub(crate) mod device;
pub(crate) mod flows;
pub(crate) mod guest;
pub(crate) mod stale;

pub use stale::FlowKey;

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::socket::udp;
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::{
    ArpPacket, EthernetAddress, EthernetFrame, EthernetProtocol, HardwareAddress, IpCidr, IpProtocol,
    Ipv4Packet, TcpPacket, UdpPacket,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{Notify, mpsc};

use self::device::{FrameDevice, FrameError};
use self::flows::Flows;
use crate::log::{Kind, Record};
use crate::policy::Verdict;
use crate::shared::Shared;

/// The gateway's (and DNS server's) address, as the guest is configured.
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
/// The guest's address (the only one on its network).
pub const GUEST_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 15);
/// The guest NIC's MAC address (QEMU's `-device virtio-net-pci,mac=...`).
pub const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
/// The MTU the guest should give eth0: frames up to 64 KiB, as passt uses, make bulk
/// transfers several times faster than 1500 (the stack takes any MTU up to 65535).
pub const GUEST_MTU: u16 = 65520;
/// The guest network's prefix length.
pub const PREFIX_LEN: u8 = 24;
/// The gateway's MAC address (slirp's).
pub const GATEWAY_MAC: [u8; 6] = [0x52, 0x55, 0x0a, 0x00, 0x02, 0x02];
/// The most guest TCP connections at once; SYNs beyond it are refused.
pub const MAX_FLOWS: usize = 1024;
/// The most DNS queries waiting for an answer; more are dropped (the guest retries).
const MAX_DNS_QUEUE: usize = 64;

/// A guest TCP connection's id, unique for the engine's life.
pub(crate) type FlowId = u64;

/// A guest SYN to a new destination, waiting for the egress side's verdict.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewFlow {
    pub(crate) id: FlowId,
    pub(crate) guest: SocketAddrV4,
    pub(crate) dst: SocketAddrV4,
}

/// A DNS query from the guest.
#[derive(Debug)]
pub(crate) struct DnsQuery {
    /// Who asked (the guest's address and port).
    pub(crate) from: SocketAddrV4,
    /// Whom it asked (10.0.2.2:53, or any address: all DNS is answered here).
    pub(crate) to: SocketAddrV4,
    pub(crate) payload: Vec<u8>,
}

/// What the egress and DNS side tell the stack.
pub(crate) enum StackCmd {
    /// Complete the guest's handshake and hand over the connection.
    Accept { id: FlowId, reply: tokio::sync::oneshot::Sender<guest::GuestStream> },
    /// Answer the guest's SYN with RST.
    Refuse { id: FlowId },
    /// Reset an accepted connection.
    Abort { id: FlowId },
    /// Send a DNS answer.
    DnsReply { to: SocketAddrV4, from: SocketAddrV4, payload: Vec<u8> },
}

/// How the egress side reaches the stack.
#[derive(Clone)]
pub(crate) struct StackControl {
    pub(crate) cmd: mpsc::UnboundedSender<StackCmd>,
    pub(crate) wake: Arc<Notify>,
}

/// The stack stopped.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// The NIC socket failed.
    #[error("the NIC socket failed")]
    Io(#[source] std::io::Error),
    /// The NIC socket carried something that is not framed ethernet.
    #[error(transparent)]
    Frame(#[from] FrameError),
}

/// Where new flows and DNS queries go.
pub(crate) struct StackEvents {
    pub(crate) flows: mpsc::Sender<NewFlow>,
    pub(crate) dns: mpsc::Sender<DnsQuery>,
}

/// The channel for [`StackEvents::dns`], sized so a burst of queries is kept.
pub(crate) fn dns_channel() -> (mpsc::Sender<DnsQuery>, mpsc::Receiver<DnsQuery>) {
    mpsc::channel(MAX_DNS_QUEUE)
}

/// Runs the stack on one NIC connection until the peer (QEMU) closes it.
pub(crate) async fn run(
    stream: UnixStream,
    events: StackEvents,
    cmds: &mut mpsc::UnboundedReceiver<StackCmd>,
    control: StackControl,
    shared: Arc<Shared>,
    next_id: &mut FlowId,
) -> Result<(), StackError> {
    let (mut reader, mut writer) = stream.into_split();
    let clock = std::time::Instant::now();
    let now = || SmolInstant::from_micros(i64::try_from(clock.elapsed().as_micros()).unwrap_or(i64::MAX));
    let mut dev = FrameDevice::new();
    let mut config = Config::new(HardwareAddress::Ethernet(EthernetAddress(GATEWAY_MAC)));
    // Seeds smoltcp's initial sequence numbers: different per process and per start.
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    config.random_seed = u64::from(std::process::id()) << 32 | u64::from(nanos);
    let mut iface = Interface::new(config, &mut dev, now());
    iface.update_ip_addrs(|addrs| {
        let _ = addrs.push(IpCidr::new(GATEWAY.into(), PREFIX_LEN));
    });
    iface.set_any_ip(true);
    let mut sockets = SocketSet::new(Vec::new());
    let dns_socket = sockets.add(dns_socket());
    let mut flows = Flows::new(control.clone(), shared.clone(), *next_id);
    let mut stale = stale::StaleFlows::new(shared.take_stale_flows());
    let mut udp_logged = HashSet::new();
    let mut dns_buf = vec![0u8; 4096];

    loop {
        while let Ok(cmd) = cmds.try_recv() {
            command(cmd, &mut flows, &mut dev, &mut sockets, dns_socket);
        }
        flows.start_deferred(&mut dev, &mut sockets);
        iface.poll(now(), &mut dev, &mut sockets);
        flows.after_ingress(&mut sockets);
        flows.pump(&mut sockets);
        pump_dns(&mut sockets, dns_socket, &events.dns, &mut dns_buf);
        iface.poll(now(), &mut dev, &mut sockets);
        flows.reap(&mut sockets);
        for probe in stale.due(|key| flows.has(key)) {
            dev.send_frame(&probe);
        }
        if !dev.output().is_empty() {
            writer.write_all(dev.output()).await.map_err(StackError::Io)?;
            dev.sent();
        }
        *next_id = flows.next_id();
        let delay = iface.poll_delay(now(), &sockets).unwrap_or(Duration::from_secs(3600).into());
        let delay = stale.next_in().map_or(delay.into(), |d| d.min(delay.into()));
        tokio::select! {
            read = reader.read(dev.read_space()) => {
                let n = read.map_err(StackError::Io)?;
                if n == 0 {
                    return Ok(());
                }
                dev.filled(n);
                ingest(&mut dev, &mut flows, &events, &shared, &mut udp_logged)?;
            }
            Some(cmd) = cmds.recv() => command(cmd, &mut flows, &mut dev, &mut sockets, dns_socket),
            () = control.wake.notified() => {}
            () = tokio::time::sleep(delay) => {}
        }
    }
}

fn dns_socket() -> udp::Socket<'static> {
    let meta = || vec![udp::PacketMetadata::EMPTY; 32];
    let mut socket = udp::Socket::new(
        udp::PacketBuffer::new(meta(), vec![0; 32 * 1024]),
        udp::PacketBuffer::new(meta(), vec![0; 64 * 1024]),
    );
    socket.bind(53).expect("port 53 is a valid port");
    socket
}

fn command(
    cmd: StackCmd,
    flows: &mut Flows,
    dev: &mut FrameDevice,
    sockets: &mut SocketSet<'static>,
    dns: SocketHandle,
) {
    match cmd {
        StackCmd::Accept { id, reply } => flows.accept(id, reply, dev, sockets),
        StackCmd::Refuse { id } => flows.refuse(id, dev),
        StackCmd::Abort { id } => flows.abort(id, sockets),
        StackCmd::DnsReply { to, from, payload } => {
            let socket = sockets.get_mut::<udp::Socket>(dns);
            let meta = udp::UdpMetadata {
                endpoint: to.into(),
                local_address: Some((*from.ip()).into()),
                ..to.into()
            };
            if let Err(e) = socket.send_slice(&payload, meta) {
                tracing::debug!("DNS answer to {to} dropped: {e}");
            }
        }
    }
}

fn pump_dns(
    sockets: &mut SocketSet<'_>,
    handle: SocketHandle,
    queue: &mpsc::Sender<DnsQuery>,
    buf: &mut [u8],
) {
    let socket = sockets.get_mut::<udp::Socket>(handle);
    while let Ok((len, meta)) = socket.recv_slice(buf) {
        let (smoltcp::wire::IpAddress::Ipv4(from_ip), Some(smoltcp::wire::IpAddress::Ipv4(to_ip))) =
            (meta.endpoint.addr, meta.local_address)
        else {
            continue;
        };
        let query = DnsQuery {
            from: SocketAddrV4::new(from_ip, meta.endpoint.port),
            to: SocketAddrV4::new(to_ip, 53),
            payload: buf[..len].to_vec(),
        };
        if queue.try_send(query).is_err() {
            tracing::debug!("DNS query dropped: too many waiting");
        }
    }
}

/// Sorts the frames just read: ARP for the gateway, TCP and DNS go to smoltcp; a new
/// SYN is held for the egress side's verdict; other UDP is logged; the rest is dropped.
fn ingest(
    dev: &mut FrameDevice,
    flows: &mut Flows,
    events: &StackEvents,
    shared: &Shared,
    udp_logged: &mut HashSet<SocketAddrV4>,
) -> Result<(), FrameError> {
    while let Some(range) = dev.next_frame()? {
        match classify(dev.frame(range)) {
            Class::Pass => dev.push_rx(range),
            Class::Drop => {}
            Class::Tcp { guest, dst, syn } => {
                if flows.is_held(guest, dst) {
                    // The guest retransmits its SYN while the connect out is under way;
                    // smoltcp, with no socket for it yet, would answer RST.
                } else if flows.contains(guest, dst) || !syn {
                    dev.push_rx(range);
                } else if flows.len() >= MAX_FLOWS {
                    tracing::warn!("{MAX_FLOWS} connections open; refusing {dst}");
                    dev.push_rx(range);
                } else {
                    let flow = flows.hold(guest, dst, dev.frame(range).to_vec());
                    if events.flows.try_send(flow).is_err() {
                        flows.refuse(flow.id, dev);
                    }
                }
            }
            Class::Udp { dst } => {
                if udp_logged.len() > 256 {
                    udp_logged.clear();
                }
                if udp_logged.insert(dst) {
                    let mut record = Record::new(
                        std::time::SystemTime::now(),
                        Kind::Udp,
                        Verdict::Deny,
                        "udp-blocked".into(),
                    );
                    record.ip = Some((*dst.ip()).into());
                    record.port = dst.port();
                    shared.log.write(&record);
                }
                dev.push_rx(range);
            }
        }
    }
    Ok(())
}

enum Class {
    Pass,
    Drop,
    Tcp { guest: SocketAddrV4, dst: SocketAddrV4, syn: bool },
    Udp { dst: SocketAddrV4 },
}

fn classify(frame: &[u8]) -> Class {
    let Ok(eth) = EthernetFrame::new_checked(frame) else { return Class::Drop };
    match eth.ethertype() {
        EthernetProtocol::Arp => match ArpPacket::new_checked(eth.payload()) {
            Ok(arp) if arp.target_protocol_addr() == GATEWAY.octets() => Class::Pass,
            _ => Class::Drop,
        },
        EthernetProtocol::Ipv4 => {
            let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else { return Class::Drop };
            match ip.next_header() {
                IpProtocol::Tcp => match TcpPacket::new_checked(ip.payload()) {
                    Ok(tcp) => Class::Tcp {
                        guest: SocketAddrV4::new(ip.src_addr(), tcp.src_port()),
                        dst: SocketAddrV4::new(ip.dst_addr(), tcp.dst_port()),
                        syn: tcp.syn() && !tcp.ack(),
                    },
                    Err(_) => Class::Drop,
                },
                IpProtocol::Udp => match UdpPacket::new_checked(ip.payload()) {
                    Ok(udp) if udp.dst_port() == 53 => Class::Pass,
                    Ok(udp) => Class::Udp { dst: SocketAddrV4::new(ip.dst_addr(), udp.dst_port()) },
                    Err(_) => Class::Drop,
                },
                _ => Class::Drop,
            }
        }
        _ => Class::Drop,
    }
}
