//! Zip archives on the host side of `atoll cp` for directories: packing a host directory
//! for `UploadDir`, and unpacking a `DownloadDir` archive safely.
//!
//! Unpacking checks every entry before writing anything: a name that would land outside
//! the target (`..`, an absolute path) or a symlink refuses the whole archive.
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

/// Unpacks the zip in `archive` into `into`, which must exist and should be empty.
/// Every entry is checked first; a bad one refuses the whole archive.
pub fn unzip_into(archive: File, into: &Path) -> Result<ArchiveStats, ArchiveError> {
    let mut zip = ZipArchive::new(archive).map_err(ArchiveError::Zip)?;
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
        let mut entry = zip.by_index(i).map_err(ArchiveError::Zip)?;
        let mut f = File::create(&path).map_err(io_err("create", &path))?;
        stats.file_bytes += io::copy(&mut entry, &mut f).map_err(io_err("write", &path))?;
        stats.files += 1;
        if let Some(mode) = mode {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode & 0o777))
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
        let got = unzip_into(zip, dst.path()).unwrap();
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
        let err = unzip_into(file, &inner).unwrap_err();
        assert!(matches!(&err, ArchiveError::Escapes(n) if n == "../evil.txt"), "{err}");
        assert!(!inner.join("ok.txt").exists());
        assert!(!dst.path().join("evil.txt").exists());
    }
}
