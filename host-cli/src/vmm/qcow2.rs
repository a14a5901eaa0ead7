//! The one thing atoll reads from a qcow2 header it did not just write: which files it
//! makes QEMU open. A snapshot's `disk.qcow2` is copied into a new sandbox and handed to
//! QEMU, which opens whatever backing file (and external data file) the header names,
//! so a header edited on disk could make a guest's disk read `/etc/shadow` or write
//! another user's file. Before such a disk is used its backing file must be exactly the
//! template image it was made over, read as `raw`, and it may name no external data file.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The qcow2 magic, `QFI\xfb`.
const MAGIC: [u8; 4] = *b"QFI\xfb";
/// QEMU's own limit on a backing file name.
const MAX_BACKING_NAME: u32 = 1023;
/// qcow2 v3 incompatible feature bit: the guest data lives in an external file.
const EXTERNAL_DATA_FILE: u64 = 1 << 2;
/// Header extension: the end of the list.
const EXT_END: u32 = 0;
/// Header extension: the backing file's format.
const EXT_BACKING_FORMAT: u32 = 0xe279_2aca;
/// The format of every template image atoll backs a disk with.
const BACKING_FORMAT: &[u8] = b"raw";
/// How much of the file is read: the header, its extensions and the backing file name
/// lie in the first cluster (64 KiB by default); a name or extension past this is
/// refused (fail closed), not looked for further.
const HEAD: u64 = 64 << 10;

/// Why a disk image was refused. The messages say what is wrong with the image; the
/// caller says what it was for and what to do.
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
    #[error("the disk image {} is not a qcow2 image as atoll makes them ({why})", path.display())]
    Bad {
        /// The image.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// It names another backing file than the template's image.
    #[error(
        "the disk image {} is backed by `{found}`, not by its template's image `{}`",
        path.display(), expected.display()
    )]
    Backing {
        /// The image.
        path: PathBuf,
        /// The name in its header (lossy, control characters escaped).
        found: String,
        /// The template's image.
        expected: PathBuf,
    },
}

/// Checks that the qcow2 image `disk` is backed by exactly `base`, read as `raw`, and
/// names no external data file: the only other file QEMU would open for it.
///
/// The header is read as QEMU 7.2 reads it (`qcow2_do_open`): the backing file name at
/// its offset and length, the header extensions from the header's end up to that
/// offset (the last backing-format extension wins there; without one QEMU guesses the
/// format from the file's content, which a guest wrote).
pub fn check_backing(disk: &Path, base: &Path) -> Result<(), Qcow2Error> {
    let bad = |why: &str| Qcow2Error::Bad { path: disk.into(), why: why.into() };
    let read = |source| Qcow2Error::Read { path: disk.into(), source };
    // Neither a link (followed to where?) nor a FIFO (an open that never returns).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(disk)
        .map_err(read)?;
    if !file.metadata().map_err(read)?.is_file() {
        return Err(bad("not a regular file"));
    }
    let mut head = Vec::new();
    file.take(HEAD).read_to_end(&mut head).map_err(read)?;
    let be32 = |at: u64| {
        let at = usize::try_from(at).ok()?;
        head.get(at..at.checked_add(4)?).map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")))
    };
    let be64 = |at: u64| {
        let at = usize::try_from(at).ok()?;
        head.get(at..at.checked_add(8)?).map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
    };
    let short = || bad("short header");
    if head.get(..4) != Some(&MAGIC[..]) {
        return Err(bad("no qcow2 magic"));
    }
    let version = be32(4).ok_or_else(short)?;
    let header_len = match version {
        2 => 72,
        3 => {
            if be64(72).ok_or_else(short)? & EXTERNAL_DATA_FILE != 0 {
                return Err(bad("it names an external data file"));
            }
            u64::from(be32(100).ok_or_else(short)?)
        }
        _ => return Err(bad("unknown version")),
    };
    let offset = be64(8).ok_or_else(short)?;
    let len = be32(16).ok_or_else(short)?;
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
            found: printable(found),
            expected: base.into(),
        });
    }
    // The extensions QEMU reads: from the header's end up to the backing file name.
    let mut format = None;
    let mut at = header_len;
    while at < offset {
        let (kind, size) = (be32(at).ok_or_else(short)?, be32(at + 4).ok_or_else(short)?);
        at += 8;
        if at > offset || u64::from(size) > offset - at {
            return Err(bad("a header extension runs into the backing file name"));
        }
        if kind == EXT_END {
            break;
        }
        if kind == EXT_BACKING_FORMAT {
            format = usize::try_from(at).ok().and_then(|a| head.get(a..a + size as usize));
        }
        at += (u64::from(size) + 7) & !7;
    }
    match format {
        Some(BACKING_FORMAT) => Ok(()),
        Some(other) => Err(bad(&format!("its backing file is read as `{}`, not `raw`", printable(other)))),
        None => {
            Err(bad("it names no backing file format, so QEMU would guess it from the template's content"))
        }
    }
}

/// Bytes from a header a guest's QEMU may have written, fit for a terminal: lossy UTF-8
/// with control characters escaped.
fn printable(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).escape_debug().to_string()
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
        assert!(e.contains("other.img") && e.contains("not by its template"), "{e}");
        let e = check_backing(&d.path().join("flat.qcow2"), &base).unwrap_err().to_string();
        assert!(e.contains("backed by ``"), "{e}");
        let e = check_backing(&d.path().join("data.qcow2"), &base).unwrap_err().to_string();
        assert!(e.contains("external data file"), "{e}");
        let e = check_backing(&base, &base).unwrap_err().to_string();
        assert!(e.contains("no qcow2 magic"), "{e}");
        // The template's image, read as another format than raw, or with none (QEMU
        // would guess the format from the guest-written content).
        std::fs::copy(p("good.qcow2"), p("as-qcow2.qcow2")).unwrap();
        qemu_img(&["rebase", "-u", "-F", "qcow2", "-b", &p("base.img"), &p("as-qcow2.qcow2")]);
        let e = check_backing(&d.path().join("as-qcow2.qcow2"), &base).unwrap_err().to_string();
        assert!(e.contains("read as `qcow2`"), "{e}");
        let mut bytes = std::fs::read(p("good.qcow2")).unwrap();
        let ext = bytes.windows(4).position(|w| w == EXT_BACKING_FORMAT.to_be_bytes()).unwrap();
        bytes[ext..ext + 4].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        std::fs::write(p("no-format.qcow2"), &bytes).unwrap();
        let e = check_backing(&d.path().join("no-format.qcow2"), &base).unwrap_err().to_string();
        assert!(e.contains("no backing file format"), "{e}");
        // An extension that claims to run past the backing file name.
        let mut bytes = std::fs::read(p("good.qcow2")).unwrap();
        bytes[ext + 4..ext + 8].copy_from_slice(&4096u32.to_be_bytes());
        std::fs::write(p("long-ext.qcow2"), &bytes).unwrap();
        let e = check_backing(&d.path().join("long-ext.qcow2"), &base).unwrap_err().to_string();
        assert!(e.contains("runs into the backing file name"), "{e}");
        // Not followed nor waited on: a link to the good image, a FIFO.
        std::os::unix::fs::symlink(p("good.qcow2"), p("link.qcow2")).unwrap();
        let e = check_backing(&d.path().join("link.qcow2"), &base).unwrap_err();
        assert!(
            matches!(&e, Qcow2Error::Read { source, .. } if source.raw_os_error() == Some(libc::ELOOP)),
            "{e}"
        );
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.path().join("fifo.qcow2"),
            rustix::fs::FileType::Fifo,
            0o600.into(),
            0,
        )
        .unwrap();
        let e = check_backing(&d.path().join("fifo.qcow2"), &base).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        // A name with terminal control characters is shown escaped.
        std::fs::copy(p("good.qcow2"), p("escape.qcow2")).unwrap();
        qemu_img(&["rebase", "-u", "-F", "raw", "-b", "/tmp/\x1b[2Jx", &p("escape.qcow2")]);
        let e = check_backing(&d.path().join("escape.qcow2"), &base).unwrap_err().to_string();
        assert!(e.contains("backed by `/tmp/\\u{1b}[2Jx`") && !e.contains('\x1b'), "{e}");
        // A v2 image passes as v3 does.
        qemu_img(&[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "compat=0.10",
            "-F",
            "raw",
            "-b",
            &p("base.img"),
            &p("v2.qcow2"),
        ]);
        check_backing(&d.path().join("v2.qcow2"), &base).unwrap();
    }
}
