//! Stored or deflated: the zip method of each file of a download.
//!
//! Deflating data that does not shrink costs the whole download its speed (deflate at
//! the fastest level runs at a fraction of the link's rate) and saves nothing. So, as
//! many archivers do, a file is stored when its name says it is already compressed, or
//! when a sample of its first bytes does not shrink meaningfully under the fastest
//! deflate level; everything else is deflated.

use flate2::{Compress, Compression, FlushCompress, Status};
use zip::CompressionMethod;

/// Bytes of a file's beginning tried with deflate.
pub(super) const SAMPLE_BYTES: usize = 32 * 1024;

/// Files shorter than this are deflated untested: they cost little either way.
const MIN_SAMPLE_BYTES: usize = 4 * 1024;

/// Formats that are compressed already.
const COMPRESSED: &[&str] = &[
    "gz", "tgz", "xz", "zst", "bz2", "zip", "jar", "whl", "7z", "png", "jpg", "jpeg", "gif", "webp", "mp3",
    "mp4", "mkv", "webm", "pdf", "woff2",
];

/// Picks each file's method; holds one deflate state for all the samples of a download.
#[derive(Default)]
pub(super) struct MethodPicker {
    deflate: Option<Compress>,
    out: Vec<u8>,
}

impl MethodPicker {
    /// The method for the file `name` whose content begins with `head` (the whole file
    /// if it is shorter than [`SAMPLE_BYTES`]).
    pub(super) fn pick(&mut self, name: &str, head: &[u8]) -> CompressionMethod {
        if has_compressed_extension(name) {
            return CompressionMethod::Stored;
        }
        if head.len() < MIN_SAMPLE_BYTES || self.shrinks(&head[..head.len().min(SAMPLE_BYTES)]) {
            CompressionMethod::Deflated
        } else {
            CompressionMethod::Stored
        }
    }

    /// True when deflate at the fastest level brings `sample` under 90% of its size.
    fn shrinks(&mut self, sample: &[u8]) -> bool {
        let deflate = self.deflate.get_or_insert_with(|| Compress::new(Compression::fast(), false));
        deflate.reset();
        self.out.clear();
        // Room for the worst case (deflate's bound is the input plus a few bytes per
        // block): zlib-rs's fastest level panics when the output fills up before the end.
        self.out.reserve(sample.len() + sample.len() / 8 + 1024);
        let done = matches!(
            deflate.compress_vec(sample, &mut self.out, FlushCompress::Finish),
            Ok(Status::StreamEnd)
        );
        done && self.out.len() <= sample.len() / 10 * 9
    }
}

fn has_compressed_extension(name: &str) -> bool {
    let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    ext.is_some_and(|e| COMPRESSED.contains(&e.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(len: usize) -> Vec<u8> {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()[0]
            })
            .collect()
    }

    #[test]
    fn compressed_formats_are_stored() {
        let mut p = MethodPicker::default();
        let text = b"fn main() {}\n".repeat(1000);
        assert_eq!(p.pick("dist/app.tar.GZ", &text), CompressionMethod::Stored);
        assert_eq!(p.pick("a/b.whl", &text), CompressionMethod::Stored);
        assert_eq!(p.pick("src/main.rs", &text), CompressionMethod::Deflated);
        assert_eq!(p.pick("Makefile", &text), CompressionMethod::Deflated);
    }

    #[test]
    fn content_that_does_not_shrink_is_stored() {
        let mut p = MethodPicker::default();
        assert_eq!(p.pick("model.bin", &noise(SAMPLE_BYTES)), CompressionMethod::Stored);
        // Only the sample is tried: a longer head is cut, not refused.
        assert_eq!(p.pick("model.bin", &noise(3 * SAMPLE_BYTES)), CompressionMethod::Stored);
        // The deflate state is reused: text after noise is still deflated.
        assert_eq!(p.pick("log.txt", &b"GET /index.html 200\n".repeat(2000)), CompressionMethod::Deflated);
        // Half noise, half zeros shrinks enough.
        let mut half = noise(SAMPLE_BYTES / 2);
        half.resize(SAMPLE_BYTES, 0);
        assert_eq!(p.pick("data.bin", &half), CompressionMethod::Deflated);
    }

    #[test]
    fn small_files_are_deflated_untested() {
        let mut p = MethodPicker::default();
        assert_eq!(p.pick("tiny.bin", &noise(100)), CompressionMethod::Deflated);
        assert_eq!(p.pick("empty", &[]), CompressionMethod::Deflated);
    }
}
