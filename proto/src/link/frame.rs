//! The handshake's frames and the bounded scanner that finds them in stale bytes.

use std::time::Duration;

/// Opens a host's SYNC frame.
pub const SYNC_MAGIC: [u8; 8] = *b"ATOLSYNC";
/// Opens a guest's ACK frame.
pub const ACK_MAGIC: [u8; 8] = *b"ATOLACK1";
/// Bytes in a SYNC or ACK frame: the magic and the nonce.
pub const FRAME_LEN: usize = 8 + 16;
/// How often the host re-sends its SYNC until the guest answers.
pub const SYNC_INTERVAL: Duration = Duration::from_millis(500);
/// What every HTTP/2 connection opens with (RFC 9113 section 3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Bytes asked of one read while scanning; with one frame of carry, the most a scan holds.
pub(crate) const READ_CHUNK: usize = 8192;

/// The random value that ties an ACK to the host connection whose SYNC it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nonce(pub [u8; 16]);

impl Nonce {
    /// A fresh nonce from the kernel's random source.
    pub fn random() -> std::io::Result<Self> {
        use std::io::Read;
        let mut bytes = [0u8; 16];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        Ok(Self(bytes))
    }

    /// The frame `magic` + this nonce.
    pub fn frame(&self, magic: &[u8; 8]) -> [u8; FRAME_LEN] {
        let mut f = [0u8; FRAME_LEN];
        f[..8].copy_from_slice(magic);
        f[8..].copy_from_slice(&self.0);
        f
    }
}

/// Takes the first whole `magic` frame out of `buf` and returns its nonce. Everything
/// before it is dropped; with no whole frame, `buf` keeps only what could still begin
/// one (a frame's start, or a suffix that is a prefix of `magic`).
pub(crate) fn take_frame(buf: &mut Vec<u8>, magic: &[u8; 8]) -> Option<Nonce> {
    match buf.windows(magic.len()).position(|w| w == magic) {
        Some(at) => {
            buf.drain(..at);
            if buf.len() < FRAME_LEN {
                return None;
            }
            let mut nonce = [0u8; 16];
            nonce.copy_from_slice(&buf[8..FRAME_LEN]);
            buf.drain(..FRAME_LEN);
            Some(Nonce(nonce))
        }
        None => {
            let keep = partial_magic(buf, magic);
            buf.drain(..buf.len() - keep);
            None
        }
    }
}

/// Length of the longest suffix of `buf` that is a proper prefix of `magic`.
fn partial_magic(buf: &[u8], magic: &[u8; 8]) -> usize {
    (1..magic.len().min(buf.len() + 1)).rev().find(|&n| buf[buf.len() - n..] == magic[..n]).unwrap_or(0)
}

/// True if `a` and `b` agree on their common length.
pub(crate) fn agrees(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_after_stale_bytes_is_found_and_the_rest_kept() {
        let n = Nonce([7; 16]);
        let mut buf = b"stale HTTP/2 bytes".to_vec();
        buf.extend_from_slice(&n.frame(&SYNC_MAGIC));
        buf.extend_from_slice(b"PRI");
        assert_eq!(take_frame(&mut buf, &SYNC_MAGIC), Some(n));
        assert_eq!(buf, b"PRI");
    }

    #[test]
    fn without_a_frame_only_a_possible_start_is_kept() {
        let mut buf = b"xxxxxxxxxxATOLS".to_vec();
        assert_eq!(take_frame(&mut buf, &SYNC_MAGIC), None);
        assert_eq!(buf, b"ATOLS");
        let mut buf = b"nothing to see".to_vec();
        assert_eq!(take_frame(&mut buf, &SYNC_MAGIC), None);
        assert!(buf.is_empty());
        let mut buf = b"xxATOLSYNCabc".to_vec();
        assert_eq!(take_frame(&mut buf, &SYNC_MAGIC), None, "nonce not whole yet");
        assert_eq!(buf, b"ATOLSYNCabc");
    }

    #[test]
    fn the_other_magic_is_not_taken() {
        let mut buf = Nonce([1; 16]).frame(&ACK_MAGIC).to_vec();
        assert_eq!(take_frame(&mut buf, &SYNC_MAGIC), None);
        assert!(buf.len() < 8);
    }
}
