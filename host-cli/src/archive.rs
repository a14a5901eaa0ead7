//! Zip archives on the host side of `atoll cp` for directories: packing a host directory
//! for `UploadDir`, and unpacking a `DownloadDir` archive safely.
//!
//! Unpacking checks every entry before writing anything: a name that would land outside
//! the target (`..`, an absolute path) or a symlink refuses the whole archive. A zip
//! comes from the guest, so what it may write is capped ([`UnpackLimits`]: entries, and
//! bytes actually inflated, never the sizes the archive claims), and the modes it asks
//! for pass through the umask (a guest cannot make a host file world-writable).
//! Both functions are blocking; async callers run them on `spawn_blocking`.

use std::fs::{self, File};
use std::io::{self, Seek};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

/// Why packing or unpacking an archive failed.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// Walking the host directory failed.
    #[error("could not read the host directory {}", path.display())]
    Walk {
        /// The directory being packed.
        path: PathBuf,
        /// What walkdir said.
        #[source]
        source: walkdir::Error,
    },
    /// A host file could not be read or written.
    #[error("could not {what} {}", path.display())]
    Io {
        /// What we tried: "read", "create", "write".
        what: &'static str,
        /// The host path.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// The zip could not be written or read.
    #[error("the zip archive is broken or could not be written")]
    Zip(#[source] zip::result::ZipError),
    /// An entry would land outside the target directory.
    #[error("the archive entry `{0}` would land outside the target directory; nothing was extracted")]
    Escapes(String),
    /// An entry is a symlink, which we do not recreate.
    #[error("the archive entry `{0}` is a symlink; nothing was extracted")]
    Symlink(String),
    /// More entries than [`UnpackLimits::max_entries`].
    #[error(
        "the archive from the guest holds {count} entries, over the limit of {max}; nothing was extracted (raise it with --max-entries if you expect that many)"
    )]
    TooManyEntries {
        /// Entries in the archive.
        count: u64,
        /// The limit.
        max: u64,
    },
    /// More bytes than [`UnpackLimits::max_bytes`].
    #[error(
        "the archive from the guest unpacks to more than {max} bytes; extraction stopped (raise the limit with --max-unpacked-bytes if you expect that much)"
    )]
    TooBig {
        /// The limit.
        max: u64,
    },
}

/// Caps on what unpacking one archive from a guest may write on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnpackLimits {
    /// Most entries (files and folders).
    pub max_entries: u64,
    /// Most bytes written, counted as they are inflated.
    pub max_bytes: u64,
}

impl UnpackLimits {
    /// Default entry cap: a large source tree, far from what fills a disk's inodes.
    pub const DEFAULT_ENTRIES: u64 = 200_000;
    /// Default byte cap: 4 GiB.
    pub const DEFAULT_BYTES: u64 = 4 << 30;
}

impl Default for UnpackLimits {
    fn default() -> Self {
        UnpackLimits { max_entries: Self::DEFAULT_ENTRIES, max_bytes: Self::DEFAULT_BYTES }
    }
}

/// What a pack or unpack covered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ArchiveStats {
    /// Regular files.
    pub files: u64,
    /// Directories (not counting the root).
    pub dirs: u64,
    /// Bytes of the files.
    pub file_bytes: u64,
    /// Host paths left out of a pack (symlinks, sockets, devices), relative to the root.
    pub skipped: Vec<String>,
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ArchiveError + 'a {
    move |source| ArchiveError::Io { what, path: path.to_path_buf(), source }
}

/// Packs the host directory `dir` into a zip written to `out` (entries relative to
/// `dir`). Symlinks and special files are left out and listed in the stats.
pub fn zip_dir(dir: &Path, out: File) -> Result<(File, ArchiveStats), ArchiveError> {
    let mut zip = ZipWriter::new(out);
    let mut stats = ArchiveStats::default();
    for entry in walkdir::WalkDir::new(dir).follow_links(false).sort_by_file_name().min_depth(1) {
        let entry = entry.map_err(|source| ArchiveError::Walk { path: dir.to_path_buf(), source })?;
        let rel = entry.path().strip_prefix(dir).unwrap_or(entry.path());
        let name = rel.to_string_lossy().into_owned();
        let meta =
            entry.metadata().map_err(|source| ArchiveError::Walk { path: dir.to_path_buf(), source })?;
        let mode = meta.permissions().mode() & 0o7777;
        let ft = entry.file_type();
        if ft.is_dir() {
            let opts = SimpleFileOptions::default().unix_permissions(mode);
            zip.add_directory(format!("{name}/"), opts).map_err(ArchiveError::Zip)?;
            stats.dirs += 1;
        } else if ft.is_file() {
            let opts = SimpleFileOptions::default()
                .compression_method(CompressionMethod::Deflated)
                .unix_permissions(mode)
                .large_file(meta.len() >= u64::from(u32::MAX));
            zip.start_file(name, opts).map_err(ArchiveError::Zip)?;
            let mut f = File::open(entry.path()).map_err(io_err("read", entry.path()))?;
            let n = io::copy(&mut f, &mut zip).map_err(io_err("read", entry.path()))?;
            stats.files += 1;
            stats.file_bytes += n;
        } else {
            stats.skipped.push(name);
        }
    }
    let mut out = zip.finish().map_err(ArchiveError::Zip)?;
    out.rewind().map_err(io_err("rewind", dir))?;
    Ok((out, stats))
}

/// The process's umask, read without changing it (`umask(2)` would set it, racing other
/// threads); 022 where /proc does not say.
pub fn current_umask() -> u32 {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        .unwrap_or(0o022)
}

/// Unpacks the zip in `archive` into `into`, which must exist and should be empty.
/// Every entry is checked first; a bad one, or more entries than `limits` allow,
/// refuses the whole archive; writing stops once the inflated bytes pass the limit
/// (the caller removes the partial result). Modes lose what the umask masks.
pub fn unzip_into(archive: File, into: &Path, limits: UnpackLimits) -> Result<ArchiveStats, ArchiveError> {
    let mut zip = ZipArchive::new(archive).map_err(ArchiveError::Zip)?;
    let count = zip.len() as u64;
    if count > limits.max_entries {
        return Err(ArchiveError::TooManyEntries { count, max: limits.max_entries });
    }
    let umask = current_umask();
    let mut plan = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let entry = zip.by_index_raw(i).map_err(ArchiveError::Zip)?;
        let name = entry.name().map_err(ArchiveError::Zip)?.into_owned();
        if entry.is_symlink() {
            return Err(ArchiveError::Symlink(name));
        }
        let rel = entry.enclosed_name().ok_or_else(|| ArchiveError::Escapes(name.clone()))?;
        plan.push((rel, entry.is_dir(), entry.unix_mode()));
    }
    let mut stats = ArchiveStats::default();
    for (i, (rel, is_dir, mode)) in plan.into_iter().enumerate() {
        let path = into.join(&rel);
        if is_dir {
            fs::create_dir_all(&path).map_err(io_err("create", &path))?;
            stats.dirs += 1;
            continue;
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io_err("create", parent))?;
        }
        let entry = zip.by_index(i).map_err(ArchiveError::Zip)?;
        let mut f = File::create(&path).map_err(io_err("create", &path))?;
        // One byte past what is left tells an entry that fits from one that does not.
        let left = limits.max_bytes - stats.file_bytes;
        let n = io::copy(&mut io::Read::take(entry, left.saturating_add(1)), &mut f)
            .map_err(io_err("write", &path))?;
        if n > left {
            return Err(ArchiveError::TooBig { max: limits.max_bytes });
        }
        stats.file_bytes += n;
        stats.files += 1;
        if let Some(mode) = mode {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode & 0o777 & !umask))
                .map_err(io_err("set permissions on", &path))?;
        }
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn packs_and_unpacks_a_tree() {
        let src = tempfile::tempdir().unwrap();
        fs::create_dir_all(src.path().join("a/b")).unwrap();
        fs::write(src.path().join("a/b/f.txt"), b"hello").unwrap();
        fs::write(src.path().join("top"), vec![7u8; 100_000]).unwrap();
        fs::set_permissions(src.path().join("top"), fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.path().join("link")).unwrap();
        let (zip, stats) = zip_dir(src.path(), tempfile::tempfile().unwrap()).unwrap();
        assert_eq!((stats.files, stats.dirs, stats.file_bytes), (2, 2, 100_005));
        assert_eq!(stats.skipped, vec!["link".to_string()]);
        let dst = tempfile::tempdir().unwrap();
        let got = unzip_into(zip, dst.path(), UnpackLimits::default()).unwrap();
        assert_eq!((got.files, got.file_bytes), (2, 100_005));
        assert_eq!(fs::read(dst.path().join("a/b/f.txt")).unwrap(), b"hello");
        assert_eq!(fs::metadata(dst.path().join("top")).unwrap().permissions().mode() & 0o777, 0o755);
        assert!(!dst.path().join("link").exists());
    }

    #[test]
    fn refuses_escaping_entries_before_writing_anything() {
        let mut zip = ZipWriter::new(tempfile::tempfile().unwrap());
        zip.start_file("ok.txt", SimpleFileOptions::default()).unwrap();
        zip.write_all(b"fine").unwrap();
        zip.start_file("../evil.txt", SimpleFileOptions::default()).unwrap();
        zip.write_all(b"evil").unwrap();
        let mut file = zip.finish().unwrap();
        file.rewind().unwrap();
        let dst = tempfile::tempdir().unwrap();
        let inner = dst.path().join("in");
        fs::create_dir(&inner).unwrap();
        let err = unzip_into(file, &inner, UnpackLimits::default()).unwrap_err();
        assert!(matches!(&err, ArchiveError::Escapes(n) if n == "../evil.txt"), "{err}");
        assert!(!inner.join("ok.txt").exists());
        assert!(!dst.path().join("evil.txt").exists());
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
        let err = unzip_into(file, dst.path(), limits).unwrap_err();
        assert!(matches!(err, ArchiveError::TooBig { max } if max == 1 << 20), "{err}");
        assert!(err.to_string().contains("--max-unpacked-bytes"), "{err}");
        let written = fs::metadata(dst.path().join("f0")).unwrap().len();
        assert!(written <= (1 << 20) + 1, "wrote {written} bytes past the cap");
    }

    #[test]
    fn too_many_entries_refuse_the_archive_before_writing() {
        let limits = UnpackLimits { max_entries: 10, ..UnpackLimits::default() };
        let dst = tempfile::tempdir().unwrap();
        let err = unzip_into(bomb(11, 1, 0o644), dst.path(), limits).unwrap_err();
        assert!(matches!(err, ArchiveError::TooManyEntries { count: 11, max: 10 }), "{err}");
        assert_eq!(fs::read_dir(dst.path()).unwrap().count(), 0, "nothing written");
        assert!(unzip_into(bomb(10, 1, 0o644), dst.path(), limits).is_ok(), "the cap itself fits");
    }

    #[test]
    fn guest_modes_pass_through_the_umask() {
        let dst = tempfile::tempdir().unwrap();
        unzip_into(bomb(1, 1, 0o6777), dst.path(), UnpackLimits::default()).unwrap();
        let mode = fs::metadata(dst.path().join("f0")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o777 & !current_umask(), "setuid bits dropped, umask applied");
        assert_eq!(mode & 0o002, 0, "world-writable under the usual umask");
    }
}
