//! What sandboxes, snapshots and templates take on the host's disk.
//!
//! A sandbox's disk is counted at its full size (the qcow2 overlay's virtual size, what
//! its guest can fill; an overlay cannot grow past it, so the guest's writes end in
//! ENOSPC in the guest), not at what it holds today: a quota checked at create time then
//! still holds when every guest fills its disk. Everything else in a sandbox's
//! directory (a parked sandbox's memory, logs) is counted as stored. Snapshots and
//! templates are counted as stored, each file once (templates share hard links).

use std::collections::HashSet;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::vmm::state::Record;

/// Bytes sandbox `record` may take: its disk at full size (at least what was reserved
/// for it before the disk was made) plus the rest of its directory, as stored.
pub fn sandbox_bytes(record: &Record) -> u64 {
    let overlay = record.paths.overlay.as_deref();
    let mut seen = HashSet::new();
    let rest = stored_bytes(&record.paths.dir, overlay, &mut seen);
    let disk = overlay.map_or(0, |o| {
        let stored = allocated(o);
        qcow2_virtual_size(o).unwrap_or(0).max(stored)
    });
    rest + disk.max(record.disk_reserved)
}

/// The bytes `path` has allocated (0 if it is not there; a link is not followed).
pub fn allocated(path: &Path) -> u64 {
    std::fs::symlink_metadata(path).map_or(0, |m| m.blocks() * 512)
}

/// Bytes stored under each of `dirs` together, each file once.
pub fn stored_bytes_of(dirs: &[&Path]) -> u64 {
    let mut seen = HashSet::new();
    dirs.iter().map(|d| stored_bytes(d, None, &mut seen)).sum()
}

/// Allocated bytes of the files under `dir` (links not followed), leaving out `skip`
/// and files already `seen`.
fn stored_bytes(dir: &Path, skip: Option<&Path>, seen: &mut HashSet<(u64, u64)>) -> u64 {
    walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| Some(e.path()) != skip)
        .filter_map(|e| e.metadata().ok())
        .filter(|m| !m.is_dir() && seen.insert((m.dev(), m.ino())))
        .map(|m| m.blocks() * 512)
        .sum()
}

/// The virtual size in a qcow2 header (bytes 24..32, big-endian), the disk its guest
/// sees. Read without following links.
pub fn qcow2_virtual_size(path: &Path) -> Option<u64> {
    let mut f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path).ok()?;
    let mut head = [0u8; 32];
    f.read_exact(&mut head).ok()?;
    (head[..4] == *b"QFI\xfb").then(|| u64::from_be_bytes(head[24..32].try_into().expect("8 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_files_once_and_reads_the_virtual_size() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), vec![1u8; 8192]).unwrap();
        std::fs::hard_link(d.path().join("a"), d.path().join("b")).unwrap();
        let n = stored_bytes_of(&[d.path(), d.path()]);
        assert!((8192..16384).contains(&n), "{n}");
        let img = d.path().join("x.qcow2");
        let out = std::process::Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2"])
            .arg(&img)
            .arg("300M")
            .output()
            .expect("qemu-img");
        assert!(out.status.success());
        assert_eq!(qcow2_virtual_size(&img), Some(300 << 20));
        assert_eq!(qcow2_virtual_size(&d.path().join("a")), None, "not a qcow2");
    }
}
