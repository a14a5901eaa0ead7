//! Capping one output stream: keep the head and the tail, count everything.
//!
//! The end of a build log is where the error is, so when a stream is over its limit
//! both ends are kept with a marker saying how much was left out. Memory stays at
//! twice the limit however much the command writes: a head buffer that stops growing
//! at the limit and a ring buffer holding the latest bytes.

use std::collections::VecDeque;

use super::Captured;

/// One stream being captured.
#[derive(Debug)]
pub struct Capture {
    limit: usize,
    head: Vec<u8>,
    /// The latest bytes after the head, at most `limit` of them.
    tail: VecDeque<u8>,
    total: u64,
}

impl Capture {
    /// A capture that returns at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Capture { limit, head: Vec::new(), tail: VecDeque::new(), total: 0 }
    }

    /// Records `data`, the next bytes of the stream.
    pub fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let room = self.limit - self.head.len();
        if room > 0 {
            let take = room.min(data.len());
            self.head.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
        if data.len() >= self.limit {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.limit..]);
        } else {
            let overflow = (self.tail.len() + data.len()).saturating_sub(self.limit);
            self.tail.drain(..overflow);
            self.tail.extend(data);
        }
    }

    /// Bytes written so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// What to return: everything if it fits, else head + marker + tail within the limit.
    pub fn finish(self) -> Captured {
        let total = self.total;
        if total <= self.limit as u64 {
            let mut data = self.head;
            data.extend(self.tail);
            return Captured { data, truncated: false, total_bytes: total };
        }
        // The marker can only shrink once the real omitted count replaces `total`.
        let marker_room = marker(total).len();
        if self.limit < marker_room + 2 {
            let data = self.last(self.limit);
            return Captured { data, truncated: true, total_bytes: total };
        }
        let keep = self.limit - marker_room;
        let head_len = keep / 2;
        let tail_len = keep - head_len;
        let omitted = total - (head_len + tail_len) as u64;
        let mut data = Vec::with_capacity(self.limit);
        data.extend_from_slice(&self.head[..head_len]);
        data.extend_from_slice(marker(omitted).as_bytes());
        data.extend(self.last(tail_len));
        Captured { data, truncated: true, total_bytes: total }
    }

    /// The last `n` bytes of the stream (`n` <= limit, stream longer than the limit).
    fn last(&self, n: usize) -> Vec<u8> {
        let from_tail = n.min(self.tail.len());
        // Only when nothing was skipped between them do head and tail join up, and only
        // then can the tail be shorter than `n`.
        let from_head = n - from_tail;
        let mut out = Vec::with_capacity(n);
        out.extend_from_slice(&self.head[self.head.len() - from_head..]);
        out.extend(self.tail.range(self.tail.len() - from_tail..));
        out
    }
}

fn marker(omitted: u64) -> String {
    format!("\n... [{omitted} bytes omitted] ...\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(limit: usize, chunks: &[&[u8]]) -> Captured {
        let mut c = Capture::new(limit);
        chunks.iter().for_each(|d| c.push(d));
        c.finish()
    }

    #[test]
    fn short_output_is_kept_whole() {
        let out = capture(10, &[b"hello", b" you"]);
        assert_eq!((out.data.as_ref(), out.truncated, out.total_bytes), (&b"hello you"[..], false, 9));
        let exact = capture(4, &[b"ab", b"cd"]);
        assert_eq!((exact.data.as_ref(), exact.truncated), (&b"abcd"[..], false));
    }

    #[test]
    fn long_output_keeps_head_and_tail_within_limit() {
        let stream: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        for chunk in [1, 7, 4096, 100_000] {
            let chunks: Vec<&[u8]> = stream.chunks(chunk).collect();
            let out = capture(1000, &chunks);
            assert!(out.truncated);
            assert_eq!(out.total_bytes, 100_000);
            // The marker was sized for "100000"; the real count has one digit less.
            assert_eq!(out.data.len(), 999);
            let m = marker(100_000 - (1000 - marker(100_000).len()) as u64);
            let at = out.data.windows(m.len()).position(|w| w == m.as_bytes()).expect("marker");
            assert_eq!(&out.data[..at], &stream[..at]);
            let tail = &out.data[at + m.len()..];
            assert_eq!(tail, &stream[stream.len() - tail.len()..]);
        }
    }

    #[test]
    fn barely_over_limit_takes_tail_from_head_buffer() {
        let stream: Vec<u8> = (0..=255u8).cycle().take(1001).collect();
        let out = capture(1000, &[&stream]);
        let m = marker(1001 - (1000 - marker(1001).len()) as u64);
        let at = out.data.windows(m.len()).position(|w| w == m.as_bytes()).expect("marker");
        let tail = &out.data[at + m.len()..];
        assert_eq!(tail, &stream[stream.len() - tail.len()..]);
        assert!(out.data.len() <= 1000);
    }

    #[test]
    fn tiny_limit_keeps_the_end() {
        let out = capture(5, &[b"0123456789"]);
        assert_eq!((out.data.as_ref(), out.truncated, out.total_bytes), (&b"56789"[..], true, 10));
    }
}
