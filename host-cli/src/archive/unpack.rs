//! [`unzip_into`]: a zip from a guest, checked whole, then unpacked beneath a directory
//! handle under [`UnpackLimits`].

use std::fs::File;
use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use zip::ZipArchive;

use super::beneath::Beneath;
use super::{ArchiveError, ArchiveStats, MAX_DEPTH, UnpackLimits, central, current_umask};

/// An entry to write.
struct Planned {
    rel: PathBuf,
    is_dir: bool,
    mode: Option<u32>,
}

/// `name` escaped for a terminal (a guest chose it).
fn shown(name: &str) -> String {
    name.escape_debug().to_string()
}

/// The relative path an entry name stands for; `..`, absolute names, empty or `.`
/// components, and names over [`MAX_DEPTH`] levels are refused.
fn plain_rel(name: &str) -> Result<PathBuf, ArchiveError> {
    let shown = || shown(name);
    let trimmed = name.strip_suffix('/').unwrap_or(name);
    if name.starts_with('/') {
        return Err(ArchiveError::Escapes(shown()));
    }
    let depth = trimmed.split('/').count();
    if depth > MAX_DEPTH {
        let start: String = shown().chars().take(64).collect();
        return Err(ArchiveError::TooDeep { shown: start, depth, max: MAX_DEPTH });
    }
    let mut rel = PathBuf::new();
    for part in trimmed.split('/') {
        match part {
            ".." => return Err(ArchiveError::Escapes(shown())),
            "" | "." => return Err(ArchiveError::BadName(shown())),
            p if p.contains('\0') => return Err(ArchiveError::BadName(shown())),
            p => rel.push(p),
        }
    }
    Ok(rel)
}

/// Checks every entry of `zip`: nothing is written unless all pass.
fn plan(zip: &mut ZipArchive<File>) -> Result<Vec<Planned>, ArchiveError> {
    if zip.has_duplicate_names() {
        return Err(ArchiveError::ListedTwice);
    }
    let mut plan = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let entry = zip.by_index_raw(i).map_err(ArchiveError::Zip)?;
        let name = entry.name().map_err(ArchiveError::Zip)?;
        if entry.is_symlink() {
            return Err(ArchiveError::Symlink(shown(&name)));
        }
        // Only what is written is held (its name shown only when a message needs it):
        // the plan costs about the index's bytes once more.
        let rel = plain_rel(&name)?;
        plan.push(Planned { rel, is_dir: entry.is_dir(), mode: entry.unix_mode() });
    }
    clashes(&plan)?;
    // Entries that share their bytes (the classic small bomb), local headers that
    // disagree with the index, data the index does not list.
    zip.validate_header_consistency().map_err(|e| ArchiveError::Malformed(e.to_string()))?;
    Ok(plan)
}

/// Refuses a path given twice (a folder implied by deeper entries may also be listed
/// once) and a file with entries below it. In paths sorted by component, whatever lies
/// below a path follows it at once, so neighbours are all that is compared: memory and
/// work grow with the names' bytes, never with their depth times their length (every
/// folder above every entry, held as its own path, cost that: megabytes an entry).
fn clashes(plan: &[Planned]) -> Result<(), ArchiveError> {
    let mut sorted: Vec<&Planned> = plan.iter().collect();
    sorted.sort_by(|a, b| a.rel.cmp(&b.rel).then(b.is_dir.cmp(&a.is_dir)));
    for pair in sorted.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.rel == b.rel {
            return Err(if a.is_dir == b.is_dir {
                ArchiveError::Duplicate(shown(&b.rel.to_string_lossy()))
            } else {
                ArchiveError::FileAndDir(shown(&a.rel.to_string_lossy()))
            });
        }
        if !a.is_dir && b.rel.starts_with(&a.rel) {
            return Err(ArchiveError::FileAndDir(shown(&a.rel.to_string_lossy())));
        }
    }
    Ok(())
}

/// Unpacks the zip in `archive` beneath the directory `into` (a handle), which should
/// be empty. The end records, then every entry, are checked first; a bad one, or more
/// entries than `limits` allow, refuses the whole archive; writing stops once the
/// inflated bytes pass the limit (the caller removes the partial result). Modes lose
/// what the umask masks.
pub fn unzip_into(
    archive: File,
    into: BorrowedFd<'_>,
    limits: UnpackLimits,
) -> Result<ArchiveStats, ArchiveError> {
    central::check(&archive, limits)?;
    let mut zip = ZipArchive::new(archive).map_err(ArchiveError::Zip)?;
    let count = zip.len() as u64;
    if count > limits.max_entries {
        return Err(ArchiveError::TooManyEntries { count, max: limits.max_entries });
    }
    let plan = plan(&mut zip)?;
    let umask = current_umask();
    let beneath = Beneath::new(into);
    let mut stats = ArchiveStats::default();
    for (i, entry) in plan.into_iter().enumerate() {
        let shown = &shown(&entry.rel.to_string_lossy());
        if entry.is_dir {
            beneath.create_dir_all(&entry.rel, shown)?;
            stats.dirs += 1;
            continue;
        }
        if let Some(parent) = entry.rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            beneath.create_dir_all(parent, shown)?;
        }
        let data = zip.by_index(i).map_err(ArchiveError::Zip)?;
        let mut f = beneath.create_file(&entry.rel, shown)?;
        // One byte past what is left tells an entry that fits from one that does not.
        let left = limits.max_bytes - stats.file_bytes;
        let n = copy_entry(io::Read::take(data, left.saturating_add(1)), &mut f, shown)?;
        if n > left {
            return Err(ArchiveError::TooBig { max: limits.max_bytes });
        }
        stats.file_bytes += n;
        stats.files += 1;
        let mode = entry.mode.unwrap_or(0o666) & 0o777 & !umask;
        rustix::fs::fchmod(&f, rustix::fs::Mode::from_raw_mode(mode)).map_err(|e| ArchiveError::Io {
            what: "set permissions on",
            path: entry.rel,
            source: e.into(),
        })?;
    }
    Ok(stats)
}

/// Copies an entry's inflated bytes to `to`: a read that fails is the archive's fault
/// (bad data, a CRC or a size that does not match), a write that fails the host's.
fn copy_entry(mut from: impl io::Read, to: &mut File, shown: &str) -> Result<u64, ArchiveError> {
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ArchiveError::Malformed(format!("entry `{shown}`: {e}"))),
        };
        io::Write::write_all(to, &buf[..n]).map_err(|source| ArchiveError::Io {
            what: "write",
            path: Path::new(shown).to_path_buf(),
            source,
        })?;
        total += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Seek, Write};
    use std::os::fd::{AsFd, OwnedFd};
    use std::os::unix::fs::PermissionsExt;

    use zip::write::SimpleFileOptions;
    use zip::{CompressionMethod, ZipWriter};

    use super::super::zip_dir;
    use super::*;

    fn dir_fd(path: &Path) -> OwnedFd {
        rustix::fs::open(
            path,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap()
    }

    fn unzip(file: File, dst: &Path, limits: UnpackLimits) -> Result<ArchiveStats, ArchiveError> {
        unzip_into(file, dir_fd(dst).as_fd(), limits)
    }

    #[test]
    fn packs_and_unpacks_a_tree() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("a/b")).unwrap();
        std::fs::write(src.path().join("a/b/f.txt"), b"hello").unwrap();
        std::fs::write(src.path().join("top"), vec![7u8; 100_000]).unwrap();
        std::fs::set_permissions(src.path().join("top"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.path().join("link")).unwrap();
        let (zip, stats) = zip_dir(src.path(), tempfile::tempfile().unwrap()).unwrap();
        assert_eq!((stats.files, stats.dirs, stats.file_bytes), (2, 2, 100_005));
        assert_eq!(stats.skipped, vec!["link".to_string()]);
        let dst = tempfile::tempdir().unwrap();
        let got = unzip(zip, dst.path(), UnpackLimits::default()).unwrap();
        assert_eq!((got.files, got.file_bytes), (2, 100_005));
        assert_eq!(std::fs::read(dst.path().join("a/b/f.txt")).unwrap(), b"hello");
        let mode = std::fs::metadata(dst.path().join("top")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755 & !current_umask());
        assert!(!dst.path().join("link").exists());
    }

    fn zip_of(entries: &[(&str, &[u8])]) -> File {
        let mut zip = ZipWriter::new(tempfile::tempfile().unwrap());
        for (name, data) in entries {
            if name.ends_with('/') {
                zip.add_directory(*name, SimpleFileOptions::default()).unwrap();
            } else {
                zip.start_file(*name, SimpleFileOptions::default()).unwrap();
                zip.write_all(data).unwrap();
            }
        }
        let mut file = zip.finish().unwrap();
        file.rewind().unwrap();
        file
    }

    #[test]
    fn refuses_bad_names_before_writing_anything() {
        type Entries<'a> = &'a [(&'a str, &'a [u8])];
        let cases: &[(Entries<'_>, &str)] = &[
            (&[("ok.txt", b"fine"), ("../evil.txt", b"evil")], "outside the target"),
            (&[("ok.txt", b"fine"), ("a/../../evil.txt", b"evil")], "outside the target"),
            (&[("ok.txt", b"fine"), ("/tmp/evil.txt", b"evil")], "outside the target"),
            (&[("ok.txt", b"fine"), ("a//b", b"x")], "not a plain relative path"),
            (&[("ok.txt", b"fine"), ("a/./b", b"x")], "not a plain relative path"),
            (&[("ok.txt", b"fine"), ("a", b"x"), ("a/b", b"y")], "both a file and a folder"),
            (&[("ok.txt", b"fine"), ("a/", b""), ("a", b"y")], "both a file and a folder"),
        ];
        for (entries, says) in cases {
            let dst = tempfile::tempdir().unwrap();
            let inner = dst.path().join("in");
            std::fs::create_dir(&inner).unwrap();
            let err = unzip(zip_of(entries), &inner, UnpackLimits::default()).unwrap_err();
            assert!(err.to_string().contains(says), "{entries:?}: {err}");
            assert_eq!(std::fs::read_dir(&inner).unwrap().count(), 0, "{entries:?} wrote something");
            assert_eq!(std::fs::read_dir(dst.path()).unwrap().count(), 1, "{entries:?} wrote outside");
        }
    }

    /// A zip as a hostile guest could send it: `entries` files named f0.., each `size`
    /// zero bytes (deflated to almost nothing) with mode `mode`.
    fn bomb(entries: usize, size: usize, mode: u32) -> File {
        let mut zip = ZipWriter::new(tempfile::tempfile().unwrap());
        let opts = SimpleFileOptions::default()
            .compression_method(CompressionMethod::Deflated)
            .unix_permissions(mode)
            .large_file(size > u32::MAX as usize);
        let zeros = vec![0u8; 1 << 20];
        for i in 0..entries {
            zip.start_file(format!("f{i}"), opts).unwrap();
            let mut left = size;
            while left > 0 {
                let n = left.min(zeros.len());
                zip.write_all(&zeros[..n]).unwrap();
                left -= n;
            }
        }
        let mut file = zip.finish().unwrap();
        file.rewind().unwrap();
        file
    }

    #[test]
    fn a_zip_bomb_stops_at_the_byte_cap() {
        let file = bomb(1, 16 << 20, 0o644);
        assert!(file.metadata().unwrap().len() < 256 << 10, "the bomb is small on the wire");
        let dst = tempfile::tempdir().unwrap();
        let limits = UnpackLimits { max_bytes: 1 << 20, ..UnpackLimits::default() };
        let err = unzip(file, dst.path(), limits).unwrap_err();
        assert!(matches!(err, ArchiveError::TooBig { max } if max == 1 << 20), "{err}");
        assert!(err.to_string().contains("--max-unpacked-bytes"), "{err}");
        let written = std::fs::metadata(dst.path().join("f0")).unwrap().len();
        assert!(written <= (1 << 20) + 1, "wrote {written} bytes past the cap");
    }

    #[test]
    fn too_many_entries_refuse_the_archive_before_writing() {
        let limits = UnpackLimits { max_entries: 10, ..UnpackLimits::default() };
        let dst = tempfile::tempdir().unwrap();
        let err = unzip(bomb(11, 1, 0o644), dst.path(), limits).unwrap_err();
        assert!(matches!(err, ArchiveError::TooManyEntries { count: 11, max: 10 }), "{err}");
        assert_eq!(std::fs::read_dir(dst.path()).unwrap().count(), 0, "nothing written");
        assert!(unzip(bomb(10, 1, 0o644), dst.path(), limits).is_ok(), "the cap itself fits");
    }

    /// A name at [`MAX_DEPTH`] levels unpacks; one level more refuses the archive
    /// before anything is written.
    #[test]
    fn names_deeper_than_the_cap_are_refused_before_writing() {
        let at_cap = vec!["d"; MAX_DEPTH].join("/");
        let dst = tempfile::tempdir().unwrap();
        unzip(zip_of(&[(&at_cap, b"deep")]), dst.path(), UnpackLimits::default()).unwrap();
        assert_eq!(std::fs::read(dst.path().join(&at_cap)).unwrap(), b"deep");
        let past = format!("{at_cap}/d/");
        let dst = tempfile::tempdir().unwrap();
        let err =
            unzip(zip_of(&[("ok", b"fine"), (&past, b"")]), dst.path(), UnpackLimits::default()).unwrap_err();
        assert!(
            matches!(err, ArchiveError::TooDeep { depth, max: MAX_DEPTH, .. } if depth == MAX_DEPTH + 1),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(dst.path()).unwrap().count(), 0, "nothing written");
    }

    #[test]
    fn guest_modes_pass_through_the_umask() {
        let dst = tempfile::tempdir().unwrap();
        unzip(bomb(1, 1, 0o6777), dst.path(), UnpackLimits::default()).unwrap();
        let mode = std::fs::metadata(dst.path().join("f0")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o777 & !current_umask(), "setuid bits dropped, umask applied");
        assert_eq!(mode & 0o002, 0, "world-writable under the usual umask");
    }
}
