//! ListDir: a directory's entries, optionally recursive, capped and sorted.
//!
//! - Paths are relative to the listed directory and sorted by path, component by
//!   component (a directory's contents follow it directly). Because the walk itself
//!   visits entries in that order, the cap keeps the first `max_entries` of the full
//!   sorted listing and the agent never holds more than that.
//! - Symlinks are reported, never followed (a symlink loop is harmless), except that a
//!   symlink naming the listed directory itself is followed.
//! - The reply also stops (with `truncated`) before it would outgrow a gRPC message.
//! - Listing something that is not a directory is refused with a hint to use Stat.
//! - Subdirectories that cannot be read are listed themselves, without their contents.
//! - `names_only` skips the stat of each entry: the type comes from the directory itself
//!   (`d_type`), which is most of a listing's cost saved for callers that want names.

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use atoll_proto::limits::{DEFAULT_MAX_ENTRIES, MAX_MESSAGE_BYTES};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::{Entry, FsError, check_path, entry, file_type, wire_path};
use crate::placement::quick_if;

/// Room a listing may take in its reply; past it the listing is cut short as if by
/// `max_entries`, so a huge `max_entries` cannot produce a reply too large to send.
const MESSAGE_BUDGET: usize = MAX_MESSAGE_BYTES - 64 * 1024;

/// Field tag and length prefix of each repeated entry.
const ENTRY_OVERHEAD: usize = 6;

/// Directories up to this `st_size` are listed in place when not recursive: a couple of
/// thousand entries on ext4 or tmpfs. Larger or recursive listings go to the blocking
/// pool, however local the filesystem.
const SMALL_DIR_BYTES: u64 = 64 * 1024;

/// What to list.
#[derive(Debug, Clone, Default)]
pub struct ListDir {
    /// The directory.
    pub path: String,
    /// Into subdirectories too.
    pub recursive: bool,
    /// With `recursive`: how deep (1: the directory's own entries); 0: no limit.
    pub max_depth: u32,
    /// Most entries; 0: the default.
    pub max_entries: u32,
    /// Only paths and types, with no stat per entry.
    pub names_only: bool,
}

/// A listing.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// The entries, sorted, depth first.
    pub entries: Vec<Entry>,
    /// True when `max_entries` cut it short.
    pub truncated: bool,
}

/// Lists `req.path`.
pub async fn list(req: ListDir) -> Result<Listing, FsError> {
    let root = check_path(&req.path)?;
    let (probe, recursive) = (root.clone(), req.recursive);
    let small = move || !recursive && std::fs::metadata(&probe).is_ok_and(|m| m.len() <= SMALL_DIR_BYTES);
    quick_if(small, move || list_sync(root, &req)).await
}

fn list_sync(root: PathBuf, req: &ListDir) -> Result<Listing, FsError> {
    let meta = std::fs::metadata(&root).map_err(|e| FsError::io("list", &root, e))?;
    if !meta.is_dir() {
        return Err(FsError::NotADirectory { path: root, hint: "only a directory can be listed" });
    }
    let max_depth = match (req.recursive, req.max_depth) {
        (false, _) => 1,
        (true, 0) => usize::MAX,
        (true, d) => d as usize,
    };
    let cap = if req.max_entries == 0 { DEFAULT_MAX_ENTRIES } else { req.max_entries } as usize;
    let top = Level::open(rustix::fs::CWD, &root, PathBuf::new(), OFlags::empty())
        .map_err(|e| FsError::io("list", &root, e.into()))?;

    // Depth first, each directory's entries sorted by name: the walk visits entries in
    // the order of the reply. Each entry is `lstat`ed relative to its open directory
    // (`fstatat`), not by its full path, which the kernel would walk again every time
    // (std's `DirEntry::metadata` does that on musl).
    let mut open = vec![top];
    let mut entries = Vec::new();
    let mut truncated = false;
    let mut bytes = 0;
    loop {
        let depth = open.len();
        let Some(level) = open.last_mut() else { break };
        let Some((name, kind)) = level.names.next() else {
            open.pop();
            continue;
        };
        if entries.len() == cap {
            truncated = true;
            break;
        }
        let Ok(dirfd) = level.dir.fd() else { continue };
        let rel = level.rel.join(OsStr::from_bytes(name.as_bytes()));
        // Only a directory to descend into keeps its relative path; every other entry's
        // path moves into its reply (one allocation per entry, not three).
        let (entry, kind, rel) = if req.names_only && kind != FileType::Unknown {
            let sub = descend(kind, depth, max_depth, &rel);
            (name_entry(rel, kind), kind, sub)
        } else {
            // The entry may have gone since the directory was read: skip it.
            let Ok(st) = rustix::fs::statat(dirfd, &name, AtFlags::SYMLINK_NOFOLLOW) else { continue };
            let kind = FileType::from_raw_mode(st.st_mode);
            let sub = descend(kind, depth, max_depth, &rel);
            if req.names_only {
                (name_entry(rel, kind), kind, sub)
            } else {
                let target = || rustix::fs::readlinkat(dirfd, &name, Vec::new()).ok().map(cstring_path);
                (entry(rel, &st, target), kind, sub)
            }
        };
        bytes += wire_len(&entry) + ENTRY_OVERHEAD;
        if bytes > MESSAGE_BUDGET {
            truncated = true;
            break;
        }
        entries.push(entry);
        debug_assert!(rel.is_none() || kind == FileType::Directory);
        if let Some(rel) = rel {
            // A subdirectory that cannot be read is listed itself, its contents are not.
            if let Ok(sub) = Level::open(dirfd, &name, rel, OFlags::NOFOLLOW) {
                open.push(sub);
            }
        }
    }
    Ok(Listing { entries, truncated })
}

/// The size of `entry` as a protobuf `FileEntry` (agent.proto): each field that is
/// not zero or empty costs a one-byte tag, then a varint or a length and its bytes.
pub(crate) fn wire_len(entry: &Entry) -> usize {
    fn varint(v: u64) -> usize {
        // 7 bits per byte; at least one byte.
        (64 - (v | 1).leading_zeros()).div_ceil(7) as usize
    }
    let bytes = |b: &[u8]| if b.is_empty() { 0 } else { 1 + varint(b.len() as u64) + b.len() };
    let number = |v: u64| if v == 0 { 0 } else { 1 + varint(v) };
    // The type is never FILE_TYPE_UNSPECIFIED (0): every kind is a small varint.
    let kind = 2;
    bytes(entry.path.as_bytes())
        + kind
        + number(entry.size)
        + number(entry.mode.into())
        // Negative int64 values are sent as their two's-complement u64, ten bytes.
        + number(u64::from_ne_bytes(entry.mtime_unix_ms.to_ne_bytes()))
        + bytes(entry.symlink_target.as_bytes())
        + bytes(&entry.raw_path)
}

/// The relative path of a directory the walk goes into next, if `kind` is one and the
/// depth allows.
fn descend(kind: FileType, depth: usize, max_depth: usize, rel: &Path) -> Option<PathBuf> {
    (kind == FileType::Directory && depth < max_depth).then(|| rel.to_path_buf())
}

/// A `names_only` entry: its path and a type known without a stat.
fn name_entry(rel: PathBuf, kind: FileType) -> Entry {
    let (path, raw_path) = wire_path(rel);
    Entry { path, kind: file_type(kind), raw_path, ..Default::default() }
}

/// A directory being listed: its open descriptor, its path relative to the root, and its
/// entries still to visit, sorted by name, each with the type its directory entry gives
/// (`FileType::Unknown` on file systems that do not fill `d_type`).
struct Level {
    /// Read to its end; kept for its descriptor, which `fstatat` and `openat` use.
    dir: rustix::fs::Dir,
    rel: PathBuf,
    names: std::vec::IntoIter<(CString, FileType)>,
}

impl Level {
    /// Opens `path` (relative to `at`) and reads all its names.
    fn open(
        at: impl AsFd,
        path: impl rustix::path::Arg,
        rel: PathBuf,
        extra: OFlags,
    ) -> rustix::io::Result<Level> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | extra;
        let fd = rustix::fs::openat(at, path, flags, Mode::empty())?;
        let mut dir = rustix::fs::Dir::new(fd)?;
        let mut names = Vec::new();
        while let Some(item) = dir.read() {
            let item = item?;
            if !is_dot(item.file_name()) {
                names.push((item.file_name().to_owned(), item.file_type()));
            }
        }
        names.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(Level { dir, rel, names: names.into_iter() })
    }
}

fn is_dot(name: &CStr) -> bool {
    matches!(name.to_bytes(), b"." | b"..")
}

fn cstring_path(c: CString) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(c.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::FileKind;

    fn request(root: &Path, recursive: bool, max_depth: u32, max_entries: u32) -> ListDir {
        ListDir { path: root.display().to_string(), recursive, max_depth, max_entries, names_only: false }
    }

    fn names(root: &Path, recursive: bool, max_depth: u32, max_entries: u32) -> (Vec<String>, bool) {
        let r = list_sync(root.to_path_buf(), &request(root, recursive, max_depth, max_entries)).unwrap();
        (r.entries.into_iter().map(|e| e.path).collect(), r.truncated)
    }

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for p in ["b/y", "b/x/deep", "a", "c"] {
            let p = d.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"").unwrap();
        }
        std::os::unix::fs::symlink("b", d.path().join("l")).unwrap();
        d
    }

    #[test]
    fn walk_is_sorted_depth_first_and_capped() {
        let d = tree();
        let all = ["a", "b", "b/x", "b/x/deep", "b/y", "c", "l"];
        assert_eq!(names(d.path(), true, 0, 0), (all.map(String::from).to_vec(), false));
        assert_eq!(names(d.path(), false, 0, 0).0, ["a", "b", "c", "l"]);
        assert_eq!(names(d.path(), true, 2, 0).0, ["a", "b", "b/x", "b/y", "c", "l"]);
        assert_eq!(names(d.path(), true, 0, 3), (["a", "b", "b/x"].map(String::from).to_vec(), true));
        assert!(!names(d.path(), true, 0, 7).1);
    }

    #[test]
    fn names_only_gives_the_same_paths_and_types_without_the_stat() {
        let d = tree();
        std::fs::write(d.path().join("a"), b"12345").unwrap();
        for (recursive, max_depth, max_entries) in [(true, 0, 0), (false, 0, 0), (true, 2, 0), (true, 0, 3)] {
            let full =
                list_sync(d.path().to_path_buf(), &request(d.path(), recursive, max_depth, max_entries))
                    .unwrap();
            let req = ListDir { names_only: true, ..request(d.path(), recursive, max_depth, max_entries) };
            let short = list_sync(d.path().to_path_buf(), &req).unwrap();
            let typed = |r: &Listing| -> Vec<(String, FileKind)> {
                r.entries.iter().map(|e| (e.path.clone(), e.kind)).collect()
            };
            assert_eq!(typed(&short), typed(&full));
            assert_eq!(short.truncated, full.truncated);
            for e in &short.entries {
                assert_eq!(
                    (e.size, e.mode, e.mtime_unix_ms, e.symlink_target.as_str()),
                    (0, 0, 0, ""),
                    "{}",
                    e.path
                );
            }
        }
        let full = list_sync(d.path().to_path_buf(), &request(d.path(), false, 0, 0)).unwrap();
        assert_eq!(full.entries[0].size, 5, "the full listing still stats");
        assert_eq!(full.entries[3].symlink_target, "b");
    }
}
