//! Zip archives on the host side of `atoll cp` for directories: packing a host directory
//! for `UploadDir`, and unpacking a `DownloadDir` archive safely.
//!
//! A zip from a guest is written by an adversary (a guest's root can replace the agent).
//! Unpacking (`unpack`) checks the archive before writing anything: its end records
//! (`central`: entry count and index size, before the zip crate parses the index), then
//! every entry (a name with `..`, an absolute path or an empty component, a symlink, a
//! name given twice, a name that is both a file and a folder, entries that share their
//! data) refuses the whole archive. Then every entry is created through the staging
//! folder's handle with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` (`beneath`), so
//! no name can reach above it even if the checks had a bug. What it may write is capped
//! ([`UnpackLimits`]: entries, and bytes actually inflated, never the sizes the archive
//! claims), and the modes it asks for pass through the umask (a guest cannot make a host
//! file world-writable). Both functions are blocking; async callers run them on
//! `spawn_blocking`.

mod beneath;
mod central;
mod unpack;

pub use unpack::unzip_into;

use std::fs::{self, File};
use std::io::{self, Seek};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

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
    /// The zip's end records or headers do not hold together.
    #[error("the archive from the guest is not a well-formed zip ({0}); nothing was extracted")]
    Malformed(String),
    /// The index the end records claim is larger than the entry cap allows.
    #[error(
        "the archive from the guest has a {bytes}-byte index, over the {max} bytes --max-entries allows; nothing was extracted (raise --max-entries if you expect that many entries)"
    )]
    IndexTooBig {
        /// Bytes claimed.
        bytes: u64,
        /// The cap.
        max: u64,
    },
    /// A name given twice.
    #[error("the archive entry `{0}` appears twice; nothing was extracted")]
    Duplicate(String),
    /// The index lists one name twice (the zip crate keeps one of them).
    #[error("the archive from the guest lists an entry name twice; nothing was extracted")]
    ListedTwice,
    /// A name that is a file and a folder (or a file with entries below it).
    #[error("the archive entry `{0}` is both a file and a folder; nothing was extracted")]
    FileAndDir(String),
    /// A name that is not a plain relative path (empty or `.` components).
    #[error("the archive entry `{0}` is not a plain relative path; nothing was extracted")]
    BadName(String),
    /// A name deeper than [`MAX_DEPTH`] folders: removing a staging folder that deep
    /// fails (one open handle per level) or overflows the stack, and no real tree is.
    #[error(
        "the archive entry `{shown}…` is {depth} levels deep, over the {max} atoll unpacks; nothing was extracted"
    )]
    TooDeep {
        /// The name's start, escaped.
        shown: String,
        /// Its components.
        depth: usize,
        /// [`MAX_DEPTH`].
        max: usize,
    },
    /// Creating an entry met a link on its way (something else put it there).
    #[error("the archive entry `{0}` would be written through a symlink; nothing was extracted")]
    ThroughLink(String),
    /// The kernel lacks `openat2`.
    #[error(
        "this kernel has no openat2 (Linux 5.6 or later), which atoll needs to unpack a folder from a guest safely; nothing was extracted (copy single files, or use `atoll download` to get the zip)"
    )]
    NoOpenat2,
    /// More bytes than [`UnpackLimits::max_bytes`].
    #[error(
        "the archive from the guest unpacks to more than {max} bytes; extraction stopped (raise the limit with --max-unpacked-bytes if you expect that much)"
    )]
    TooBig {
        /// The limit.
        max: u64,
    },
}

/// Most components in an entry's name. A guest's zip may hold one name of 32,767
/// levels (`a/a/…`, 64 KiB): created one handle at a time it unpacks, but the staging
/// folder left by a later refusal could then not be removed (`remove_dir_all` holds a
/// handle per level and recurses: past the open-file limit it fails, deeper it overflows
/// the stack and aborts atoll), and no folder worth copying is that deep.
pub const MAX_DEPTH: usize = 256;

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

impl UnpackLimits {
    /// Most bytes of zip worth downloading for these caps: the files themselves (with
    /// room for deflate's worst case), plus headers, names and index for each entry. A
    /// guest that sends more cannot be sending a folder these caps let through.
    pub fn max_zip_bytes(&self) -> u64 {
        let per_entry = 2 * central::INDEX_BYTES_PER_ENTRY + 4096;
        self.max_bytes
            .saturating_add(self.max_bytes / 16)
            .saturating_add(self.max_entries.saturating_mul(per_entry))
            .saturating_add(1 << 20)
    }
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
