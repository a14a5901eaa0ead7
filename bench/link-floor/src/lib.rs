//! The wire format between `atoll-bench` and `atoll-link-floor` on the bare VM's
//! virtio-serial port: shared by both ends, so the host side uses this library and the
//! guest side is the binary.
//!
//! ```text
//! guest, once:  READY <version>\n          (as soon as the port is open)
//! host:         REQUEST_MAGIC nonce:u64 command:u8 arg:u64     (a request, 25 bytes)
//! guest:        REPLY_MAGIC nonce:u64, then what the command sends
//!
//! ECHO    arg = bytes   echo exactly `arg` bytes back as they come
//! SINK    arg = bytes   read `arg` bytes into SINK_FILE, fsync; send the u64 count
//! SOURCE  -             send SINK_FILE's u64 size, then its bytes
//! WARM    arg = MiB     write `arg` MiB of zeros to a tmpfs file, remove it; send u64 arg
//! ```
//!
//! Numbers are little-endian. A port is one byte stream with no session boundaries, so
//! the floor scans for [`REQUEST_MAGIC`] (dropping anything else) and the host drops
//! everything before the reply carrying its own nonce.

/// Opens every request.
pub const REQUEST_MAGIC: [u8; 8] = *b"ATOLFLRQ";
/// Opens every reply.
pub const REPLY_MAGIC: [u8; 8] = *b"ATOLFLRA";
/// Bytes in a request: magic, nonce, command, argument.
pub const REQUEST_LEN: usize = 8 + 8 + 1 + 8;
/// Bytes in a reply header: magic and nonce.
pub const REPLY_LEN: usize = 8 + 8;

/// Echo `arg` bytes back.
pub const ECHO: u8 = b'e';
/// Read `arg` bytes into [`SINK_FILE`], fsync, answer with the count.
pub const SINK: u8 = b's';
/// Send [`SINK_FILE`]'s size, then its bytes.
pub const SOURCE: u8 = b'o';
/// Write `arg` MiB of zeros into guest memory (a tmpfs file) and free them again.
pub const WARM: u8 = b'w';

/// The guest file SINK writes and SOURCE reads: on the tmpfs the floor mounts at /tmp,
/// as the agent does.
pub const SINK_FILE: &str = "/tmp/raw-copy.bin";

/// The bytes of one request.
pub fn request(nonce: u64, command: u8, arg: u64) -> [u8; REQUEST_LEN] {
    let mut r = [0u8; REQUEST_LEN];
    r[..8].copy_from_slice(&REQUEST_MAGIC);
    r[8..16].copy_from_slice(&nonce.to_le_bytes());
    r[16] = command;
    r[17..].copy_from_slice(&arg.to_le_bytes());
    r
}

/// The bytes of the reply header to `nonce`.
pub fn reply(nonce: u64) -> [u8; REPLY_LEN] {
    let mut r = [0u8; REPLY_LEN];
    r[..8].copy_from_slice(&REPLY_MAGIC);
    r[8..].copy_from_slice(&nonce.to_le_bytes());
    r
}

/// Finds the first whole frame of `len` bytes opening with `magic` in `buf`: drops
/// what precedes it and returns it (the rest of `buf` stays). With none, `buf` keeps
/// only a tail that could still begin one.
pub fn take_frame(buf: &mut Vec<u8>, magic: &[u8; 8], len: usize) -> Option<Vec<u8>> {
    match buf.windows(magic.len()).position(|w| w == magic) {
        Some(at) => {
            buf.drain(..at);
            (buf.len() >= len).then(|| buf.drain(..len).collect())
        }
        None => {
            let keep = (1..magic.len().min(buf.len() + 1))
                .rev()
                .find(|&n| buf[buf.len() - n..] == magic[..n])
                .unwrap_or(0);
            buf.drain(..buf.len() - keep);
            None
        }
    }
}

/// The u64 at `at` in `frame`.
pub fn u64_at(frame: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&frame[at..at + 8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_after_stale_bytes_is_found_and_the_rest_kept() {
        let mut buf = b"stale".to_vec();
        buf.extend_from_slice(&request(7, ECHO, 64));
        buf.extend_from_slice(b"data");
        let frame = take_frame(&mut buf, &REQUEST_MAGIC, REQUEST_LEN).unwrap();
        assert_eq!((u64_at(&frame, 8), frame[16], u64_at(&frame, 17)), (7, ECHO, 64));
        assert_eq!(buf, b"data");
    }

    #[test]
    fn without_a_frame_only_a_possible_start_is_kept() {
        let mut buf = b"xxxxATOLF".to_vec();
        assert!(take_frame(&mut buf, &REPLY_MAGIC, REPLY_LEN).is_none());
        assert_eq!(buf, b"ATOLF");
        let mut buf = reply(3)[..12].to_vec();
        assert!(take_frame(&mut buf, &REPLY_MAGIC, REPLY_LEN).is_none(), "not whole yet");
        assert_eq!(buf.len(), 12);
    }
}
