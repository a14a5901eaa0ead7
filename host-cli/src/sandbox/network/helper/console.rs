//! The serial console's bound: QEMU appends everything the guest writes to `/dev/ttyS0`
//! to `vm/console.log` (`-chardev file,append=on`), so a guest writing forever would
//! fill the host's disk. The helper, which lives as long as the sandbox, checks the file
//! every [`EVERY`] and, once it is over [`MAX_BYTES`], cuts it to its last
//! [`KEEP_BYTES`] (rounded to whole file-system blocks): `FALLOC_FL_COLLAPSE_RANGE`
//! drops the head in place (ext4, xfs), so QEMU's appends go on after the kept tail;
//! where the file system cannot, the tail is written back over a truncated file (the
//! few bytes QEMU appends meanwhile may be overwritten). The file is thus never larger
//! than [`MAX_BYTES`] plus what a guest writes in [`EVERY`] (about 0.2 MB/s was measured
//! under emulation). QEMU's own `qemu.log` (its stderr, opened to append) is bounded the
//! same way.

use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The size past which the console is cut.
pub const MAX_BYTES: u64 = 1 << 20;
/// What is kept of it (the end): what `atoll` shows when a boot fails.
pub const KEEP_BYTES: u64 = 256 << 10;
/// How often the size is checked.
pub const EVERY: Duration = Duration::from_secs(1);

/// Keeps the console at `path` bounded, forever (the helper's lifetime).
pub async fn bound(path: PathBuf) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let p = path.clone();
        match tokio::task::spawn_blocking(move || trim(&p, MAX_BYTES, KEEP_BYTES)).await {
            Ok(Ok(_)) => {}
            // Not there yet (QEMU starts after the helper), or refused: said once a tick
            // at debug level only, so that a guest cannot flood the helper's log.
            Ok(Err(e)) => tracing::debug!("console {}: {e}", path.display()),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

/// Cuts the file at `path` to about its last `keep` bytes if it is over `max`.
/// Returns whether it cut. A link, or a file with other names (QEMU may plant either in
/// `vm/`), is refused.
pub fn trim(path: &Path, max: u64, keep: u64) -> io::Result<bool> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits().cast_signed())
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() || meta.nlink() != 1 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a plain file with one name"));
    }
    let len = meta.len();
    if len <= max {
        return Ok(false);
    }
    let block = meta.blksize().max(512);
    let cut = (len - keep.min(len)) / block * block;
    if cut == 0 {
        return Ok(false);
    }
    match rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::COLLAPSE_RANGE, 0, cut) {
        Ok(()) => Ok(true),
        Err(_) => {
            let mut tail = vec![0u8; usize::try_from(len - cut).unwrap_or(usize::MAX)];
            f.read_exact_at(&mut tail, cut)?;
            f.set_len(0)?;
            f.write_all_at(&tail, 0)?;
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_console_over_its_bound_keeps_its_end() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("console.log");
        let text: Vec<u8> = (0..3 * MAX_BYTES).map(|i| b'a' + (i % 26) as u8).collect();
        std::fs::write(&path, &text).unwrap();
        assert!(trim(&path, MAX_BYTES, KEEP_BYTES).unwrap());
        let kept = std::fs::read(&path).unwrap();
        assert!(
            kept.len() as u64 >= KEEP_BYTES && kept.len() as u64 <= KEEP_BYTES + 64 * 1024,
            "{}",
            kept.len()
        );
        assert!(text.ends_with(&kept), "the end is kept, in order");
        assert!(!trim(&path, MAX_BYTES, KEEP_BYTES).unwrap(), "under the bound: untouched");
        // Appends go on after the kept tail.
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        io::Write::write_all(&mut f, b"NEXT").unwrap();
        assert!(std::fs::read(&path).unwrap().ends_with(b"NEXT"));

        let link = d.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(trim(&link, 0, 0).is_err(), "a link is refused");
        std::fs::hard_link(&path, d.path().join("other")).unwrap();
        assert!(trim(&path, 0, 0).is_err(), "a file with another name is refused");
    }
}
