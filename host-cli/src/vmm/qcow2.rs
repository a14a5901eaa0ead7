//! The one thing atoll reads from a qcow2 header it did not just write: which files it
//! makes QEMU open. A snapshot's `disk.qcow2` is copied into a new sandbox and handed to
//! QEMU, which opens whatever backing file (and external data file) the header names,
//! so a header edited on disk could make a guest's disk read `/etc/shadow` or write
//! another user's file. Before such a disk is used its backing file must be exactly the
//! template image it was made over, and it may name no external data file.

use std::io::Read;
use std::path::{Path, PathBuf};

/// The qcow2 magic, `QFI\xfb`.
const MAGIC: [u8; 4] = *b"QFI\xfb";
/// QEMU's own limit on a backing file name.
const MAX_BACKING_NAME: u32 = 1023;
/// qcow2 v3 incompatible feature bit: the guest data lives in an external file.
const EXTERNAL_DATA_FILE: u64 = 1 << 2;

/// Why a disk image was refused.
#[derive(Debug, thiserror::Error)]
pub enum Qcow2Error {
    /// The file could not be read.
    #[error("could not read the disk image {}", path.display())]
    Read {
        /// The image.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// Not a qcow2 image we understand, or a header out of range.
    #[error("the disk image {} is not a valid qcow2 image ({why}); the snapshot is damaged, make it again", path.display())]
    Bad {
        /// The image.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// It names another backing file than the template's image.
    #[error(
        "the disk image {} is backed by `{found}`, not by its template's image `{}`; the snapshot was altered or its template moved, refusing to use it",
        path.display(), expected.display()
    )]
    Backing {
        /// The image.
        path: PathBuf,
        /// The name in its header (lossy).
        found: String,
        /// The template's image.
        expected: PathBuf,
    },
}

/// Checks that the qcow2 image `disk` is backed by exactly `base` and names no external
/// data file.
pub fn check_backing(disk: &Path, base: &Path) -> Result<(), Qcow2Error> {
    let bad = |why: &str| Qcow2Error::Bad { path: disk.into(), why: why.into() };
    let read = |source| Qcow2Error::Read { path: disk.into(), source };
    let mut file = std::fs::File::open(disk).map_err(read)?;
    // Header (104 bytes for v3) plus the longest backing name at its usual place; the
    // name may sit anywhere in the first cluster, so read that much (64 KiB default).
    let mut head = Vec::new();
    file.by_ref().take(64 << 10).read_to_end(&mut head).map_err(read)?;
    let be32 = |at: usize| head.get(at..at + 4).map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")));
    let be64 = |at: usize| head.get(at..at + 8).map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")));
    if head.get(..4) != Some(&MAGIC[..]) {
        return Err(bad("no qcow2 magic"));
    }
    let version = be32(4).ok_or_else(|| bad("short header"))?;
    if version == 3 && be64(72).ok_or_else(|| bad("short header"))? & EXTERNAL_DATA_FILE != 0 {
        return Err(bad("it names an external data file"));
    }
    if !(2..=3).contains(&version) {
        return Err(bad("unknown version"));
    }
    let offset = be64(8).ok_or_else(|| bad("short header"))?;
    let len = be32(16).ok_or_else(|| bad("short header"))?;
    if len > MAX_BACKING_NAME {
        return Err(bad("backing file name too long"));
    }
    let found = usize::try_from(offset)
        .ok()
        .and_then(|o| head.get(o..o.checked_add(len as usize)?))
        .ok_or_else(|| bad("backing file name out of range"))?;
    if offset == 0 || found != base.as_os_str().as_encoded_bytes() {
        return Err(Qcow2Error::Backing {
            path: disk.into(),
            found: String::from_utf8_lossy(found).into(),
            expected: base.into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qemu_img(args: &[&str]) {
        let out = std::process::Command::new("qemu-img").args(args).output().expect("qemu-img");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    #[test]
    fn only_the_expected_backing_file_passes() {
        let d = tempfile::tempdir().unwrap();
        let p = |n: &str| d.path().join(n).display().to_string();
        std::fs::write(p("base.img"), vec![0u8; 1 << 20]).unwrap();
        std::fs::write(p("other.img"), vec![0u8; 1 << 20]).unwrap();
        qemu_img(&["create", "-q", "-f", "qcow2", "-F", "raw", "-b", &p("base.img"), &p("good.qcow2")]);
        qemu_img(&["create", "-q", "-f", "qcow2", "-F", "raw", "-b", &p("other.img"), &p("evil.qcow2")]);
        qemu_img(&["create", "-q", "-f", "qcow2", &p("flat.qcow2"), "1M"]);
        qemu_img(&[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            &format!("data_file={}", p("other.img")),
            &p("data.qcow2"),
            "1M",
        ]);
        let base = d.path().join("base.img");
        check_backing(&d.path().join("good.qcow2"), &base).unwrap();
        let e = check_backing(&d.path().join("evil.qcow2"), &base).unwrap_err().to_string();
        assert!(e.contains("other.img") && e.contains("altered"), "{e}");
        let e = check_backing(&d.path().join("flat.qcow2"), &base).unwrap_err().to_string();
        assert!(e.contains("backed by ``"), "{e}");
        let e = check_backing(&d.path().join("data.qcow2"), &base).unwrap_err().to_string();
        assert!(e.contains("external data file"), "{e}");
        let e = check_backing(&base, &base).unwrap_err().to_string();
        assert!(e.contains("no qcow2 magic"), "{e}");
    }
}
