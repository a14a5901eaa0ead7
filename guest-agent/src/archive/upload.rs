//! UploadDir: a zip streamed in and extracted into a directory.
//!
//! The bytes are spooled to an anonymous temp file (near the target when possible, so
//! a large upload lands on disk rather than in a tmpfs), keeping memory bounded. Then
//! every entry is checked before anything is written: names with `..`, absolute names,
//! symlink entries, encrypted entries, unsupported compression, and entries that would
//! pass through an existing symlink or collide with an existing entry of the other
//! kind are refused, naming the entry, and nothing is extracted. Each file is then
//! written to a temp file beside its destination and renamed into place. With `sync`,
//! one `syncfs(2)` of the target's filesystem at the end flushes every file and
//! directory extracted, instead of an fsync per file.

use std::collections::HashSet;
use std::fs::{File, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use atoll_proto::limits::CHUNK_SIZE;
use bytes::Bytes;
use futures::Stream;
use zip::{CompressionMethod, ZipArchive};

use super::ArchiveError;
use crate::files::write::write_stream;
use crate::files::{FsError, blocking, check_path};

/// Mode of extracted files whose entry carries none.
const DEFAULT_FILE_MODE: u32 = 0o644;

/// Where to extract an upload; the zip follows as a stream.
#[derive(Debug, Clone, Default)]
pub struct UploadHeader {
    /// The directory to extract into; created if missing.
    pub path: String,
    /// Flush everything extracted to disk before answering.
    pub sync: bool,
}

/// What an extraction wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Extracted {
    /// Regular files.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Bytes of file content.
    pub file_bytes: u64,
}

/// Receives the zip in `data` and extracts it into `header.path`.
pub async fn upload<S>(header: UploadHeader, data: S) -> Result<Extracted, ArchiveError>
where
    S: Stream<Item = Result<Bytes, FsError>>,
{
    let target = check_path(&header.path)?;
    let near = target.clone();
    let spool = blocking(move || spool_file(&near)).await?;
    let (spool, _) = write_stream(spool, data, "spool the upload for", &target).await?;
    let sync = header.sync;
    let result = tokio::task::spawn_blocking(move || {
        let done = extract(spool, &target)?;
        if sync {
            sync_filesystem(&target)?;
        }
        Ok(done)
    })
    .await;
    result.map_err(|_| FsError::WorkerGone)?
}

/// An unnamed temp file in the nearest existing ancestor of `target`, or in the
/// system temp dir if that cannot hold one.
fn spool_file(target: &Path) -> Result<File, FsError> {
    let near = target.ancestors().find(|a| a.is_dir()).unwrap_or(Path::new("/"));
    tempfile::tempfile_in(near)
        .or_else(|_| tempfile::tempfile())
        .map_err(|e| FsError::io("create a spool file for", target, e))
}

fn extract(spool: File, target: &Path) -> Result<Extracted, ArchiveError> {
    let mut archive = ZipArchive::new(spool).map_err(ArchiveError::NotZip)?;
    match std::fs::metadata(target) {
        Ok(meta) if !meta.is_dir() => {
            return Err(FsError::NotADirectory {
                path: target.to_path_buf(),
                hint: "extract into a directory (it is created if missing)",
            }
            .into());
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(FsError::io("extract into", target, e).into()),
    }
    let entries =
        (0..archive.len()).map(|i| check_entry(&mut archive, i, target)).collect::<Result<Vec<_>, _>>()?;
    check_inner_conflicts(&entries)?;

    std::fs::create_dir_all(target).map_err(|e| FsError::io("create directory", target, e))?;
    let mut done = Extracted::default();
    for (index, entry) in entries.iter().enumerate() {
        let dest = target.join(&entry.rel);
        if entry.is_dir {
            std::fs::create_dir_all(&dest).map_err(|e| FsError::io("create directory", &dest, e))?;
            if let Some(mode) = entry.mode {
                std::fs::set_permissions(&dest, Permissions::from_mode(mode))
                    .map_err(|e| FsError::io("set the mode of", &dest, e))?;
            }
            done.dirs += 1;
        } else {
            let mut file = archive.by_index(index).map_err(|e| ArchiveError::Corrupt {
                name: entry.name.clone(),
                source: io::Error::other(e),
            })?;
            done.file_bytes += write_entry(&mut file, &entry.name, &dest, entry.mode)?;
            done.files += 1;
        }
    }
    Ok(done)
}

/// Flushes the filesystem holding `dir` to disk.
fn sync_filesystem(dir: &Path) -> Result<(), FsError> {
    File::open(dir)
        .and_then(|d| rustix::fs::syncfs(&d).map_err(io::Error::from))
        .map_err(|e| FsError::io("sync", dir, e))
}

/// A checked entry, ready to extract.
struct Entry {
    name: String,
    rel: PathBuf,
    is_dir: bool,
    mode: Option<u32>,
}

fn check_entry(archive: &mut ZipArchive<File>, index: usize, target: &Path) -> Result<Entry, ArchiveError> {
    let file = archive.by_index_raw(index).map_err(ArchiveError::NotZip)?;
    let name = String::from_utf8_lossy(file.name_raw()).into_owned();
    let bad = |reason: &str| ArchiveError::BadEntry { name: name.clone(), reason: reason.to_owned() };
    entry_path(file.name_raw()).map_err(bad)?;
    if file.is_symlink() {
        return Err(bad("is a symlink; symlinks are not extracted"));
    }
    let Some(rel) = file.enclosed_name() else {
        return Err(bad("would land outside the target directory"));
    };
    if file.encrypted() {
        return Err(bad("is encrypted; send an unencrypted archive"));
    }
    let method = file.compression();
    if !matches!(method, CompressionMethod::Stored | CompressionMethod::Deflated) {
        return Err(bad(&format!("uses compression {method}; only stored and deflate are supported")));
    }
    let is_dir = file.is_dir();
    if !is_dir && rel.file_name().is_none() {
        return Err(bad("names no file; every file entry needs a file name"));
    }
    if let Some(reason) = collision(target, &rel, is_dir) {
        return Err(bad(&reason));
    }
    let mode = file.unix_mode().map(|m| m & 0o7777).filter(|m| *m != 0);
    Ok(Entry { name, rel, is_dir, mode })
}

/// Checks an entry's raw name before anything else: it must be relative and must not
/// climb with `..` or carry a NUL byte. Returns the relative path it names (possibly
/// empty, for `./`), built only from plain components, or why it is refused.
pub fn entry_path(raw: &[u8]) -> Result<PathBuf, &'static str> {
    let name = String::from_utf8_lossy(raw);
    if name.starts_with('/') {
        return Err("is an absolute path; entries must be relative to the target");
    }
    if name.contains('\0') {
        return Err("contains a NUL byte, which no file name can hold");
    }
    let mut rel = PathBuf::new();
    for part in Path::new(&*name).components() {
        match part {
            Component::Normal(p) => rel.push(p),
            Component::CurDir => {}
            Component::ParentDir => return Err("contains `..`; entries must stay inside the target"),
            Component::RootDir | Component::Prefix(_) => {
                return Err("is an absolute path; entries must be relative to the target");
            }
        }
    }
    Ok(rel)
}

/// Refuses an archive in which a file entry is also the parent of another entry.
fn check_inner_conflicts(entries: &[Entry]) -> Result<(), ArchiveError> {
    let files: HashSet<&Path> = entries.iter().filter(|e| !e.is_dir).map(|e| e.rel.as_path()).collect();
    for entry in entries {
        if let Some(file) = entry.rel.ancestors().skip(1).find(|a| files.contains(a)) {
            return Err(ArchiveError::BadEntry {
                name: entry.name.clone(),
                reason: format!("is inside {}, which the archive also holds as a file", file.display()),
            });
        }
    }
    Ok(())
}

/// Would extracting `rel` under `target` go through a symlink, or replace a directory
/// with a file (or the reverse)? Says why, if so.
fn collision(target: &Path, rel: &Path, is_dir: bool) -> Option<String> {
    let mut here = target.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    for (i, part) in parts.iter().enumerate() {
        here.push(part);
        let Ok(meta) = std::fs::symlink_metadata(&here) else { return None };
        let last = i + 1 == parts.len();
        if meta.file_type().is_symlink() {
            return Some(format!("would be written through the existing symlink {}", here.display()));
        }
        if !last && !meta.is_dir() {
            return Some(format!("needs {} to be a directory, but it is a file", here.display()));
        }
        if last && meta.is_dir() != is_dir {
            let what = if meta.is_dir() { "a directory" } else { "a file" };
            return Some(format!("would replace {} ({what}); remove it first", here.display()));
        }
    }
    None
}

/// Writes one entry to a temp file beside `dest` and renames it into place.
fn write_entry(
    data: &mut impl Read,
    name: &str,
    dest: &Path,
    mode: Option<u32>,
) -> Result<u64, ArchiveError> {
    let parent = dest.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(parent).map_err(|e| FsError::io("create directory", parent, e))?;
    let mut temp = tempfile::Builder::new()
        .prefix(".atoll-upload-")
        .tempfile_in(parent)
        .map_err(|e| FsError::io("create a file in", parent, e))?;
    let mut buf = vec![0u8; CHUNK_SIZE];
    let mut total = 0;
    loop {
        let n = match data.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(source) => return Err(ArchiveError::Corrupt { name: name.to_owned(), source }),
        };
        temp.write_all(&buf[..n]).map_err(|e| FsError::io("write", dest, e))?;
        total += n as u64;
    }
    let file = temp.as_file();
    file.set_permissions(Permissions::from_mode(mode.unwrap_or(DEFAULT_FILE_MODE)))
        .map_err(|e| FsError::io("set the mode of", dest, e))?;
    temp.persist(dest).map_err(|e| FsError::io("replace", dest, e.error))?;
    Ok(total)
}
