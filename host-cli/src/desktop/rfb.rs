//! A view-only filter of what a VNC client sends (RFB, RFC 6143): the handshake passes,
//! then each client message is read whole and key, pointer and clipboard messages are
//! dropped, so a watcher cannot type, click or paste into the guest. Anything it cannot
//! parse ends the connection rather than pass unread bytes to QEMU.

/// Where the client is in its side of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Its 12-byte ProtocolVersion.
    Version,
    /// Its one-byte security type choice (3.7 and 3.8 only).
    SecurityChoice,
    /// Its one-byte ClientInit.
    ClientInit,
    /// Normal messages.
    Messages,
}

/// The client's side of one RFB connection, filtered.
#[derive(Debug)]
pub struct ViewOnly {
    stage: Stage,
    buf: Vec<u8>,
}

/// Why a client's bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the VNC client sent {0}; the view-only connection was closed")]
pub struct Refused(pub String);

/// Most bytes a ClientCutText may carry before the connection is refused.
const MAX_CUT_TEXT: usize = 1 << 20;

impl Default for ViewOnly {
    fn default() -> Self {
        ViewOnly { stage: Stage::Version, buf: Vec::new() }
    }
}

impl ViewOnly {
    /// Takes bytes from the client; returns those to pass on to the server.
    pub fn feed(&mut self, data: &[u8]) -> Result<Vec<u8>, Refused> {
        self.buf.extend_from_slice(data);
        let mut out = Vec::new();
        loop {
            let need = match self.stage {
                Stage::Version => 12,
                Stage::SecurityChoice | Stage::ClientInit => 1,
                Stage::Messages => match self.message_len()? {
                    Some(n) => n,
                    None => return Ok(out),
                },
            };
            if self.buf.len() < need {
                return Ok(out);
            }
            let msg: Vec<u8> = self.buf.drain(..need).collect();
            match self.stage {
                Stage::Version => {
                    if !msg.starts_with(b"RFB 003.") {
                        return Err(Refused("no RFB protocol version".into()));
                    }
                    // 3.3: the server picks the security type; the client sends no choice.
                    self.stage =
                        if &msg[8..11] == b"003" { Stage::ClientInit } else { Stage::SecurityChoice };
                    out.extend(msg);
                }
                Stage::SecurityChoice => {
                    self.stage = Stage::ClientInit;
                    out.extend(msg);
                }
                Stage::ClientInit => {
                    self.stage = Stage::Messages;
                    out.extend(msg);
                }
                Stage::Messages => {
                    // KeyEvent (4), PointerEvent (5), ClientCutText (6) are dropped.
                    if !matches!(msg[0], 4..=6) {
                        out.extend(msg);
                    }
                }
            }
        }
    }

    /// The whole length of the message at the head of the buffer, when enough of it is
    /// there to tell.
    fn message_len(&self) -> Result<Option<usize>, Refused> {
        let b = &self.buf;
        let Some(&kind) = b.first() else { return Ok(None) };
        let u16_at = |i: usize| b.get(i..i + 2).map(|s| u16::from_be_bytes([s[0], s[1]]) as usize);
        Ok(match kind {
            0 => Some(20),
            2 => u16_at(2).map(|n| 4 + 4 * n),
            3 => Some(10),
            4 => Some(8),
            5 => Some(6),
            // ClientCutText: its length is signed. Negative, it is the Extended
            // Clipboard pseudo-encoding's form (flags, then |length| - 4 bytes), which
            // noVNC sends right after the handshake to answer QEMU's clipboard
            // capabilities, view-only or not: read its size from the absolute value.
            6 => match b.get(4..8) {
                Some(s) => {
                    let n = i32::from_be_bytes([s[0], s[1], s[2], s[3]]).unsigned_abs() as usize;
                    if n > MAX_CUT_TEXT {
                        return Err(Refused(format!("{n} bytes of clipboard data")));
                    }
                    Some(8 + n)
                }
                None => None,
            },
            // QEMU's extensions: 150 ContinuousUpdates (10 bytes), 255 QEMU (sub-typed;
            // audio and extended key events): only ContinuousUpdates is let through.
            150 => Some(10),
            other => return Err(Refused(format!("a message of unknown type {other}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_is_dropped_and_the_rest_passes_even_split() {
        let mut f = ViewOnly::default();
        let mut stream = b"RFB 003.008\n".to_vec();
        stream.push(1); // security: none
        stream.push(1); // ClientInit: shared
        let set_enc = [2u8, 0, 0, 1, 0, 0, 0, 7];
        let update = [3u8, 0, 0, 0, 0, 0, 5, 0, 3, 32];
        let key = [4u8, 1, 0, 0, 0, 0, 0, 0x61];
        let pointer = [5u8, 1, 0, 10, 0, 20];
        let mut cut = vec![6u8, 0, 0, 0, 0, 0, 0, 3];
        cut.extend(b"abc");
        // noVNC's Extended Clipboard capabilities, as it sends them to QEMU (length -8:
        // flags 0x1f000001, then the text format's 4-byte size limit), then a provide
        // (length -9) with 5 bytes of payload after the flags.
        let caps = [6u8, 0, 0, 0, 0xff, 0xff, 0xff, 0xf8, 0x1f, 0, 0, 1, 0, 0, 0, 0];
        let provide = [6u8, 0, 0, 0, 0xff, 0xff, 0xff, 0xf7, 0x10, 0, 0, 1, 1, 2, 3, 4, 5];
        for m in [&set_enc[..], &key, &caps, &update, &pointer, &provide, &cut] {
            stream.extend_from_slice(m);
        }
        let mut passed = Vec::new();
        for chunk in stream.chunks(3) {
            passed.extend(f.feed(chunk).unwrap());
        }
        let mut want = b"RFB 003.008\n\x01\x01".to_vec();
        want.extend(set_enc);
        want.extend(update);
        assert_eq!(passed, want);
        assert!(f.feed(&[255, 0, 0, 0]).is_err(), "QEMU's extended key events are refused");
        let mut f = ViewOnly::default();
        assert!(f.feed(b"GET / HTTP/1.1\r\n").is_err());
        let mut f = ViewOnly::default();
        f.feed(b"RFB 003.003\n\x01").unwrap();
        assert!(f.feed(&[6, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff]).is_err(), "huge clipboard refused");
        let mut f = ViewOnly::default();
        f.feed(b"RFB 003.003\n\x01").unwrap();
        assert!(f.feed(&[6, 0, 0, 0, 0x80, 0, 0, 0]).is_err(), "huge extended clipboard refused");
    }
}
