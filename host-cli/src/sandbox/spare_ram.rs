//! Guest RAM for a restore: a private copy of the snapshot's `ram.bin`, which QEMU 7.2
//! opens read-write (docs/security.md, section 2), so no restored QEMU can change the
//! snapshot for later restores. Copying it (tens of MiB of data) was the largest part
//! of the jail's cost on a restore (BENCHMARKS.md), so a snapshot restored again and
//! again (a template's, the one `atoll create` starts from) keeps one spare copy
//! beside it, `ram.spare`: a restore takes it by renaming it into its sandbox's `vm/`
//! (the same file system, no data moved), and makes the next one while its guest
//! starts. A restore that finds none (the first, or two at once) copies as before.
//!
//! The spare is atoll's own file in atoll's own snapshot directory (neither QEMU nor the
//! network helper sees it): made from `ram.bin` without following a link, into an
//! unnamed file that gets its name only once whole ([`safe_fs::copy_new`]), and checked
//! again when taken (a regular file with one name and `ram.bin`'s length, else it is
//! removed and a copy made). A snapshot holds at most one spare; it goes with the
//! snapshot's directory when the snapshot is replaced or removed.

use std::path::Path;

use crate::vmm::safe_fs;
use crate::vmm::snapfile::Snapshot;

use super::SandboxError;

/// The spare copy's name in the snapshot's directory.
pub(super) const SPARE: &str = "ram.spare";

/// Whether a restore keeps a spare copy of its snapshot's guest RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Spare {
    /// The snapshot is restored again and again (a template's): take the spare, make
    /// the next.
    Keep,
    /// The snapshot is restored once (a park) or seldom (a named one, whose disk the
    /// snapshot quota counts): copy, keep nothing.
    None,
}

/// Puts a private copy of `snap`'s guest RAM at `to`: the spare, when `spare` keeps
/// one and a sound one is there, else a copy.
pub(super) fn take(snap: &Snapshot, to: &Path, spare: Spare) -> Result<(), SandboxError> {
    if spare == Spare::Keep && std::fs::rename(snap.dir.join(SPARE), to).is_ok() {
        if sound(snap, to) {
            tracing::debug!("guest RAM: the spare copy taken");
            return Ok(());
        }
        tracing::warn!("the spare guest RAM of {} was not sound; copying", snap.dir.display());
        let _ = std::fs::remove_file(to);
    }
    super::machine::copy_file(&snap.ram(), to)
}

/// Makes the next spare of `snap` if `spare` keeps one and none is there. It is a
/// saving only: a failure (a full disk, a snapshot removed meanwhile) is logged.
pub(super) fn refill(snap: &Snapshot, spare: Spare) {
    if spare == Spare::None || std::fs::symlink_metadata(snap.dir.join(SPARE)).is_ok() {
        return;
    }
    if let Err(e) = safe_fs::copy_new(&snap.dir, crate::vmm::snapfile::RAM_FILE, SPARE) {
        tracing::debug!("no spare guest RAM made for {}: {e}", snap.dir.display());
    }
}

/// Whether `taken` is a regular file with one name and the length of `snap`'s RAM.
fn sound(snap: &Snapshot, taken: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(t), Ok(r)) = (std::fs::symlink_metadata(taken), std::fs::symlink_metadata(snap.ram())) else {
        return false;
    };
    t.is_file() && t.nlink() == 1 && t.len() == r.len()
}
