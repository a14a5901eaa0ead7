//! The guest's NIC as a smoltcp device: ethernet frames carried over QEMU's `-netdev
//! stream` socket, each preceded by its length as a 4-byte big-endian integer. Frames
//! read are parsed in place in one buffer (no allocation per frame); frames written are
//! appended, framed, to one output buffer that the stack flushes with one write.

use std::collections::VecDeque;

use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

/// The largest frame carried: a 65535-byte IP packet plus the ethernet header, so the
/// guest may use an MTU up to 65535 (65520 is advised, as passt does).
pub(crate) const MAX_FRAME: usize = 65_535 + 14;
/// The input buffer: room for many frames per read, and always for a whole frame.
const IN_BUF: usize = 256 * 1024 + 2 * (MAX_FRAME + 4);

/// The framing was broken: the peer is not speaking QEMU's stream protocol.
#[derive(Debug, thiserror::Error)]
#[error(
    "frame of {len} bytes on the NIC socket is outside 14..={MAX_FRAME}; is this QEMU's `-netdev stream`?"
)]
pub struct FrameError {
    /// The length read.
    pub len: usize,
}

/// Frames in, frames out.
pub(crate) struct FrameDevice {
    inbuf: Box<[u8]>,
    /// Bytes of `inbuf` holding data read from the socket.
    filled: usize,
    /// Bytes of `inbuf` already cut into frames.
    parsed: usize,
    rx: VecDeque<(usize, usize)>,
    injected: VecDeque<Vec<u8>>,
    out: Vec<u8>,
}

impl FrameDevice {
    pub(crate) fn new() -> FrameDevice {
        FrameDevice {
            inbuf: vec![0; IN_BUF].into_boxed_slice(),
            filled: 0,
            parsed: 0,
            rx: VecDeque::new(),
            injected: VecDeque::new(),
            out: Vec::new(),
        }
    }

    /// Where the next read from the socket goes. Call only once `rx` is drained.
    pub(crate) fn read_space(&mut self) -> &mut [u8] {
        if self.rx.is_empty() && self.parsed > 0 {
            self.inbuf.copy_within(self.parsed..self.filled, 0);
            self.filled -= self.parsed;
            self.parsed = 0;
        }
        &mut self.inbuf[self.filled..]
    }

    /// Records that `n` bytes were read into [`FrameDevice::read_space`].
    pub(crate) fn filled(&mut self, n: usize) {
        self.filled += n;
    }

    /// The next complete frame read, as a range of the input buffer.
    pub(crate) fn next_frame(&mut self) -> Result<Option<(usize, usize)>, FrameError> {
        let avail = &self.inbuf[self.parsed..self.filled];
        let Some(header) = avail.get(..4) else { return Ok(None) };
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        if !(14..=MAX_FRAME).contains(&len) {
            return Err(FrameError { len });
        }
        if avail.len() < 4 + len {
            return Ok(None);
        }
        let start = self.parsed + 4;
        self.parsed = start + len;
        Ok(Some((start, start + len)))
    }

    /// The bytes of a frame returned by [`FrameDevice::next_frame`].
    pub(crate) fn frame(&self, range: (usize, usize)) -> &[u8] {
        &self.inbuf[range.0..range.1]
    }

    /// Hands a frame read to smoltcp at the next poll.
    pub(crate) fn push_rx(&mut self, range: (usize, usize)) {
        self.rx.push_back(range);
    }

    /// Hands a frame kept aside (a held SYN) to smoltcp at the next poll, before the
    /// frames read.
    pub(crate) fn inject(&mut self, frame: Vec<u8>) {
        self.injected.push_back(frame);
    }

    /// Queues a frame made outside smoltcp for the guest.
    pub(crate) fn send_frame(&mut self, frame: &[u8]) {
        self.out.extend_from_slice(&u32::try_from(frame.len()).unwrap_or(u32::MAX).to_be_bytes());
        self.out.extend_from_slice(frame);
    }

    /// The framed bytes smoltcp produced for the guest since the last [`FrameDevice::sent`].
    pub(crate) fn output(&self) -> &[u8] {
        &self.out
    }

    /// Records that [`FrameDevice::output`] was written to the socket.
    pub(crate) fn sent(&mut self) {
        self.out.clear();
        if self.out.capacity() > 4 * IN_BUF {
            self.out.shrink_to(IN_BUF);
        }
    }
}

/// One received frame, borrowed from the input buffer or owned (injected).
pub(crate) enum RxToken<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        match self {
            RxToken::Borrowed(b) => f(b),
            RxToken::Owned(v) => f(&v),
        }
    }
}

/// Room for one frame at the end of the output buffer.
pub(crate) struct TxToken<'a>(&'a mut Vec<u8>);

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let start = self.0.len();
        let header = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
        self.0.extend_from_slice(&header);
        self.0.resize(start + 4 + len, 0);
        f(&mut self.0[start + 4..])
    }
}

impl Device for FrameDevice {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        if let Some(frame) = self.injected.pop_front() {
            return Some((RxToken::Owned(frame), TxToken(&mut self.out)));
        }
        let (start, end) = self.rx.pop_front()?;
        Some((RxToken::Borrowed(&self.inbuf[start..end]), TxToken(&mut self.out)))
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken<'_>> {
        Some(TxToken(&mut self.out))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = MAX_FRAME;
        caps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(frames: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for f in frames {
            out.extend_from_slice(&u32::try_from(f.len()).unwrap().to_be_bytes());
            out.extend_from_slice(f);
        }
        out
    }

    #[test]
    fn frames_are_cut_at_their_length_prefix_across_reads() {
        let mut dev = FrameDevice::new();
        let a = [1u8; 60];
        let b = [2u8; 1514];
        let bytes = framed(&[&a, &b]);
        let (first, second) = bytes.split_at(70);
        dev.read_space()[..first.len()].copy_from_slice(first);
        dev.filled(first.len());
        let r = dev.next_frame().expect("ok").expect("a");
        assert_eq!(dev.frame(r), a);
        assert!(dev.next_frame().expect("ok").is_none(), "b is partial");
        let space = dev.read_space();
        space[..second.len()].copy_from_slice(second);
        dev.filled(second.len());
        let r = dev.next_frame().expect("ok").expect("b");
        assert_eq!(dev.frame(r), b);
    }

    #[test]
    fn a_bad_length_is_an_error() {
        let mut dev = FrameDevice::new();
        dev.read_space()[..4].copy_from_slice(&(u32::try_from(MAX_FRAME).unwrap() + 1).to_be_bytes());
        dev.filled(4);
        assert!(dev.next_frame().is_err());
    }
}
