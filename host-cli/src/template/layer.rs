//! Applying OCI image layers to a tree, in Rust, as the OCI image spec's "Applying
//! Changesets" says: each layer is a tar (plain, gzip or zstd), its whiteouts (`.wh.NAME`)
//! delete `NAME` from the layers below, an opaque marker (`.wh..wh..opq`) empties its
//! directory of what the layers below put there, and the rest of the entries are
//! written over what is there.
//!
//! A layer is data from whoever built the image, so every file operation is relative
//! to a directory handle opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`:
//! an entry named with an absolute path or `..` is refused, and so is one whose parent
//! directory is a symlink (it would be written wherever the link points); symlinks are
//! created, never followed. Whiteouts apply to the layers below only, so each layer is
//! read twice: once for its deletions, once for its files.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufReader, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// The opaque-directory marker.
const OPAQUE: &str = ".wh..wh..opq";
/// The prefix of a whiteout.
const WHITEOUT: &str = ".wh.";

/// Why a layer could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// The layer file cannot be opened or read.
    #[error("cannot read layer {}", path.display())]
    Read {
        /// The layer blob.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A compression other than gzip.
    #[error("layer {} is compressed with {what}, which atoll cannot unpack (gzip, zstd and plain tar only); rebuild the image with gzip or zstd layers", path.display())]
    Compression {
        /// The layer blob.
        path: PathBuf,
        /// The compression found.
        what: &'static str,
    },
    /// The tar stream is malformed.
    #[error("layer {} is not a valid tar archive", path.display())]
    Tar {
        /// The layer blob.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// An entry that would land outside the tree.
    #[error(
        "layer {} has a hostile entry `{entry}`: {why}; nothing was built (is the image from a source you trust?)",
        layer.display()
    )]
    Hostile {
        /// The layer blob.
        layer: PathBuf,
        /// The entry's name, escaped.
        entry: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// Writing an entry failed.
    #[error("could not write `{entry}` of layer {}", layer.display())]
    Write {
        /// The layer blob.
        layer: PathBuf,
        /// The entry's name, escaped.
        entry: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// The owner, mode and device number an entry should have, kept aside when the tree is
/// written without root ([`apply_rootless`]): the host files are the writer's own, and
/// [`super::owners`] sets these in the ext4 image afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Permission bits (with setuid, setgid, sticky).
    pub mode: u32,
    /// A character or block device: (`c` or `b`, major, minor); the host holds an empty
    /// file in its place.
    pub device: Option<(char, u32, u32)>,
}

/// [`Meta`] by path relative to the tree's root.
pub type Owners = std::collections::BTreeMap<PathBuf, Meta>;

/// Applies the layer at `path` (a tar, plain, gzip or zstd) to the tree under `root`.
pub fn apply(root: &Path, path: &Path) -> Result<(), LayerError> {
    apply_with(root, path, None)
}

/// [`apply`] without root: owners, modes and device nodes go into `owners` instead of
/// the host files (which stay readable by the caller).
pub fn apply_rootless(root: &Path, path: &Path, owners: &mut Owners) -> Result<(), LayerError> {
    apply_with(root, path, Some(std::cell::RefCell::new(owners)))
}

fn apply_with<'a>(
    root: &Path,
    path: &'a Path,
    owners: Option<std::cell::RefCell<&'a mut Owners>>,
) -> Result<(), LayerError> {
    let root_fd = rustix::fs::open(root, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| LayerError::Write { layer: path.into(), entry: "/".into(), source: e.into() })?;
    let layer = Layer { path, root: root_fd, owners };
    // Pass 1: deletions from the layers below.
    layer.each_entry(|layer, rel, _entry| {
        let Some((parent, name)) = split(rel) else { return Ok(()) };
        let name = name.as_bytes();
        if name == OPAQUE.as_bytes() {
            if let Some(dir) = layer.open_dir(&parent, false, rel)? {
                clear_dir(dir.as_fd()).map_err(|e| layer.write_err(rel, e))?;
            }
        } else if let Some(victim) = name.strip_prefix(WHITEOUT.as_bytes()) {
            if victim.is_empty() || victim == b"." || victim == b".." {
                return Err(layer.hostile(rel, "a whiteout must name a file"));
            }
            if let Some(dir) = layer.open_dir(&parent, false, rel)? {
                remove_at(dir.as_fd(), OsStr::from_bytes(victim)).map_err(|e| layer.write_err(rel, e))?;
            }
        }
        Ok(())
    })?;
    // Pass 2: the layer's own entries.
    layer.each_entry(|layer, rel, entry| {
        let Some((_, name)) = split(rel) else { return Ok(()) };
        if name.as_bytes().starts_with(WHITEOUT.as_bytes()) {
            return Ok(());
        }
        layer.write_entry(rel, entry)
    })
}

struct Layer<'a> {
    path: &'a Path,
    root: OwnedFd,
    /// Rootless: where owners and modes go.
    owners: Option<std::cell::RefCell<&'a mut Owners>>,
}

impl Layer<'_> {
    /// Calls `f` with each entry's checked relative path (empty for the root itself).
    fn each_entry(
        &self,
        mut f: impl FnMut(&Self, &Path, &mut tar::Entry<'_, Box<dyn Read + '_>>) -> Result<(), LayerError>,
    ) -> Result<(), LayerError> {
        let reader = self.open()?;
        let mut archive = tar::Archive::new(reader);
        let tar_err = |source| LayerError::Tar { path: self.path.into(), source };
        for entry in archive.entries().map_err(tar_err)? {
            let mut entry = entry.map_err(tar_err)?;
            let raw = entry.path().map_err(tar_err)?.into_owned();
            let rel = self.checked(&raw)?;
            f(self, &rel, &mut entry)?;
        }
        Ok(())
    }

    /// The layer's tar stream, decompressed.
    fn open(&self) -> Result<Box<dyn Read + '_>, LayerError> {
        let read_err = |source| LayerError::Read { path: self.path.into(), source };
        let mut file = BufReader::new(File::open(self.path).map_err(read_err)?);
        let mut magic = [0u8; 4];
        let n = read_up_to(&mut file, &mut magic).map_err(read_err)?;
        let head = std::io::Cursor::new(magic[..n].to_vec());
        let stream = head.chain(file);
        match magic {
            [0x1f, 0x8b, ..] => Ok(Box::new(flate2::read::MultiGzDecoder::new(stream))),
            // `application/vnd.oci.image.layer.v1.tar+zstd`; a stream of several frames
            // is read as one, as `zstd -d` does.
            [0x28, 0xb5, 0x2f, 0xfd] => {
                Ok(Box::new(zstd::stream::read::Decoder::new(stream).map_err(read_err)?))
            }
            [b'B', b'Z', b'h', _] => Err(LayerError::Compression { path: self.path.into(), what: "bzip2" }),
            [0xfd, b'7', b'z', b'X'] => Err(LayerError::Compression { path: self.path.into(), what: "xz" }),
            _ => Ok(Box::new(stream)),
        }
    }

    /// `raw` as a relative path of normal components, or a refusal.
    fn checked(&self, raw: &Path) -> Result<PathBuf, LayerError> {
        let mut out = PathBuf::new();
        for c in raw.components() {
            match c {
                Component::Normal(n) => out.push(n),
                Component::CurDir => {}
                Component::RootDir | Component::Prefix(_) => {
                    return Err(self.hostile(raw, "an absolute path"));
                }
                Component::ParentDir => return Err(self.hostile(raw, "a `..` component")),
            }
        }
        Ok(out)
    }

    /// The directory `rel` under the root, never through a symlink; with `create`,
    /// missing directories are made (0755, root's); without, `None` when it is missing.
    fn open_dir(&self, rel: &Path, create: bool, entry: &Path) -> Result<Option<OwnedFd>, LayerError> {
        let mut cur = self.beneath(self.root.as_fd(), Path::new("."), entry)?;
        for part in rel.components() {
            let Component::Normal(part) = part else { continue };
            match self.beneath_dir(cur.as_fd(), part) {
                Ok(fd) => cur = fd,
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(cur.as_fd(), part, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(self.write_err(entry, e.into())),
                    }
                    cur = self.beneath_dir(cur.as_fd(), part).map_err(|e| self.dir_err(entry, e))?;
                }
                Err(Errno::NOENT) => return Ok(None),
                Err(e) => return Err(self.dir_err(entry, e)),
            }
        }
        Ok(Some(cur))
    }

    fn beneath(&self, dir: BorrowedFd<'_>, rel: &Path, entry: &Path) -> Result<OwnedFd, LayerError> {
        self.beneath_dir(dir, rel.as_os_str()).map_err(|e| self.dir_err(entry, e))
    }

    fn beneath_dir(&self, dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Errno> {
        rustix::fs::openat2(
            dir,
            name,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
    }

    fn dir_err(&self, entry: &Path, e: Errno) -> LayerError {
        match e {
            Errno::LOOP | Errno::XDEV => {
                self.hostile(entry, "its directory is a symlink, which atoll does not follow")
            }
            Errno::NOTDIR => self.hostile(entry, "its parent is not a directory"),
            e => self.write_err(entry, e.into()),
        }
    }

    fn hostile(&self, entry: &Path, why: &'static str) -> LayerError {
        LayerError::Hostile { layer: self.path.into(), entry: escaped(entry), why }
    }

    fn write_err(&self, entry: &Path, source: std::io::Error) -> LayerError {
        LayerError::Write { layer: self.path.into(), entry: escaped(entry), source }
    }

    /// Writes one entry (pass 2).
    fn write_entry(
        &self,
        rel: &Path,
        entry: &mut tar::Entry<'_, Box<dyn Read + '_>>,
    ) -> Result<(), LayerError> {
        let (parent, name) = split(rel).expect("the caller checked the entry has a name");
        let header = entry.header().clone();
        let kind = header.entry_type();
        let werr = |e: std::io::Error| self.write_err(rel, e);
        let mode = header.mode().map_err(werr)? & 0o7777;
        let uid = header.uid().map_err(werr)?;
        let gid = header.gid().map_err(werr)?;
        let (uid, gid) = (
            owner_id(uid).ok_or_else(|| self.hostile(rel, "an owner id over 2^32"))?,
            owner_id(gid).ok_or_else(|| self.hostile(rel, "a group id over 2^32"))?,
        );
        let owner = (Some(rustix::fs::Uid::from_raw(uid)), Some(rustix::fs::Gid::from_raw(gid)));
        // Rootless: the host file keeps the caller as owner and stays readable (and a
        // directory enterable) by it; what the image says is recorded.
        let rootless = self.owners.is_some();
        let record = |device: Option<(char, u32, u32)>| {
            if let Some(owners) = &self.owners {
                owners.borrow_mut().insert(rel.to_path_buf(), Meta { uid, gid, mode, device });
            }
        };
        let chown =
            |fd: BorrowedFd<'_>| if rootless { Ok(()) } else { rustix::fs::fchown(fd, owner.0, owner.1) };
        let host_mode = |extra: u32| if rootless { (mode | extra) & 0o777 } else { mode };
        let dir = self.open_dir(&parent, true, rel)?.expect("created");
        let dir = dir.as_fd();
        let errno = |e: Errno| self.write_err(rel, e.into());

        if kind.is_dir() {
            match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() => {}
                Ok(_) => {
                    remove_at(dir, name).map_err(werr)?;
                    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700)).map_err(errno)?;
                }
                Err(Errno::NOENT) => {
                    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700)).map_err(errno)?
                }
                Err(e) => return Err(errno(e)),
            }
            let fd = self.beneath_dir(dir, name).map_err(|e| self.dir_err(rel, e))?;
            chown(fd.as_fd()).map_err(errno)?;
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(host_mode(0o700))).map_err(errno)?;
            record(None);
            return Ok(());
        }
        // Anything else replaces what is there (a directory with its contents).
        match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => remove_at(dir, name).map_err(werr)?,
            Err(Errno::NOENT) => {}
            Err(e) => return Err(errno(e)),
        }
        let mtime = i64::try_from(header.mtime().unwrap_or(0)).unwrap_or(i64::MAX);
        let times = rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec { tv_sec: mtime, tv_nsec: 0 },
            last_modification: rustix::fs::Timespec { tv_sec: mtime, tv_nsec: 0 },
        };
        match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                let mut file = File::from(create_new(dir, name).map_err(errno)?);
                std::io::copy(entry, &mut file).map_err(werr)?;
                chown(file.as_fd()).map_err(errno)?;
                rustix::fs::fchmod(&file, Mode::from_raw_mode(host_mode(0o600))).map_err(errno)?;
                rustix::fs::futimens(&file, &times).map_err(errno)?;
                record(None);
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(werr)?
                    .ok_or_else(|| self.hostile(rel, "a symlink without a target"))?;
                rustix::fs::symlinkat(target.as_ref(), dir, name).map_err(errno)?;
                if !rootless {
                    rustix::fs::chownat(dir, name, owner.0, owner.1, AtFlags::SYMLINK_NOFOLLOW)
                        .map_err(errno)?;
                }
                rustix::fs::utimensat(dir, name, &times, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
                record(None);
            }
            tar::EntryType::Link => {
                let target = entry
                    .link_name()
                    .map_err(werr)?
                    .ok_or_else(|| self.hostile(rel, "a hard link without a target"))?;
                let target = self.checked(&target)?;
                let (tparent, tname) =
                    split(&target).ok_or_else(|| self.hostile(rel, "a hard link to the root"))?;
                let tdir = self
                    .open_dir(&tparent, false, rel)?
                    .ok_or_else(|| self.hostile(rel, "a hard link to a file the image does not have"))?;
                rustix::fs::linkat(tdir.as_fd(), tname, dir, name, AtFlags::empty()).map_err(errno)?;
                // One inode: the link has its target's owner and mode.
                if let Some(owners) = &self.owners {
                    let mut owners = owners.borrow_mut();
                    if let Some(meta) = owners.get(&target).copied() {
                        owners.insert(rel.to_path_buf(), meta);
                    }
                }
            }
            tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo => {
                let file_type = match kind {
                    tar::EntryType::Char => rustix::fs::FileType::CharacterDevice,
                    tar::EntryType::Block => rustix::fs::FileType::BlockDevice,
                    _ => rustix::fs::FileType::Fifo,
                };
                let major = header.device_major().map_err(werr)?.unwrap_or(0);
                let minor = header.device_minor().map_err(werr)?.unwrap_or(0);
                if rootless && kind != tar::EntryType::Fifo {
                    // Only root makes device nodes: an empty file stands in for it, and
                    // the node is made in the ext4 image.
                    drop(create_new(dir, name).map_err(errno)?);
                    let c = if kind == tar::EntryType::Char { 'c' } else { 'b' };
                    record(Some((c, major, minor)));
                    return Ok(());
                }
                let dev = rustix::fs::makedev(major, minor);
                rustix::fs::mknodat(dir, name, file_type, Mode::from_raw_mode(0o600), dev).map_err(errno)?;
                if !rootless {
                    rustix::fs::chownat(dir, name, owner.0, owner.1, AtFlags::SYMLINK_NOFOLLOW)
                        .map_err(errno)?;
                }
                rustix::fs::chmodat(dir, name, Mode::from_raw_mode(host_mode(0o600)), AtFlags::empty())
                    .map_err(errno)?;
                record(None);
            }
            // PAX and GNU extension headers are folded into the next entry by `tar`;
            // anything else carries no file.
            _ => {}
        }
        Ok(())
    }
}

/// Creates `name` in `dir` for writing, mode 0600: a new file only (nothing there, not a
/// link followed).
fn create_new(dir: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<rustix::fd::OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
}

fn owner_id(id: u64) -> Option<u32> {
    u32::try_from(id).ok()
}

/// `rel` as (parent, last name); `None` for the root itself.
fn split(rel: &Path) -> Option<(PathBuf, &OsStr)> {
    let name = rel.file_name()?;
    Some((rel.parent().map(Path::to_path_buf).unwrap_or_default(), name))
}

/// Removes `name` in `dir` (a directory with everything in it), never following links.
fn remove_at(dir: BorrowedFd<'_>, name: &OsStr) -> std::io::Result<()> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => return Ok(()),
        Err(Errno::ISDIR | Errno::PERM) => {}
        Err(e) => return Err(e.into()),
    }
    let sub = rustix::fs::openat(
        dir,
        name,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    clear_dir(sub.as_fd())?;
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?;
    Ok(())
}

/// Removes everything in `dir`.
fn clear_dir(dir: BorrowedFd<'_>) -> std::io::Result<()> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(name).to_os_string());
        }
    }
    for name in names {
        remove_at(dir, &name)?;
    }
    Ok(())
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// A path for an error message: control characters escaped.
fn escaped(p: &Path) -> String {
    p.to_string_lossy().chars().flat_map(char::escape_default).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    enum E<'a> {
        Dir(&'a str),
        File(&'a str, &'a [u8]),
        Symlink(&'a str, &'a str),
        /// A hard link whose names go into the header unchecked, as a hostile layer's.
        RawHardLink(&'a [u8], &'a [u8]),
        /// A file whose name goes into the header unchecked.
        RawFile(&'a [u8]),
    }

    fn layer(dir: &Path, name: &str, entries: &[E<'_>]) -> PathBuf {
        let path = dir.join(name);
        let gz = flate2::write::GzEncoder::new(File::create(&path).unwrap(), flate2::Compression::fast());
        let mut tar = tar::Builder::new(gz);
        for e in entries {
            let mut h = tar::Header::new_old();
            h.set_uid(1000);
            h.set_gid(1000);
            h.set_size(0);
            match e {
                E::Dir(p) => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_mode(0o750);
                    tar.append_data(&mut h, p, std::io::empty()).unwrap();
                }
                E::File(p, data) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_mode(0o4755);
                    h.set_size(data.len() as u64);
                    tar.append_data(&mut h, p, *data).unwrap();
                }
                E::Symlink(p, t) => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_mode(0o777);
                    tar.append_link(&mut h, p, t).unwrap();
                }
                E::RawHardLink(p, t) => {
                    h.set_entry_type(tar::EntryType::Link);
                    h.set_mode(0o644);
                    h.as_old_mut().name[..p.len()].copy_from_slice(p);
                    h.as_old_mut().linkname[..t.len()].copy_from_slice(t);
                    h.set_cksum();
                    tar.append(&h, std::io::empty()).unwrap();
                }
                E::RawFile(p) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_mode(0o644);
                    h.as_old_mut().name[..p.len()].copy_from_slice(p);
                    h.set_cksum();
                    tar.append(&h, std::io::empty()).unwrap();
                }
            }
        }
        tar.into_inner().unwrap().finish().unwrap();
        path
    }

    #[test]
    fn whiteouts_opaque_dirs_and_replacements_follow_the_oci_spec() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let lower = layer(
            d.path(),
            "l1",
            &[
                E::Dir("a/"),
                E::File("a/gone", b"1"),
                E::Dir("a/tree/"),
                E::File("a/tree/x", b"1"),
                E::Dir("o/"),
                E::File("o/old", b"1"),
                E::Dir("becomes-file/"),
                E::File("becomes-file/x", b"1"),
                E::Symlink("link", "/etc"),
            ],
        );
        let upper = layer(
            d.path(),
            "l2",
            &[
                E::File("o/new", b"2"),
                E::File("a/.wh.gone", b""),
                E::File("a/.wh.tree", b""),
                E::File("o/.wh..wh..opq", b""),
                E::File("becomes-file", b"2"),
                E::File("link", b"not through the link"),
            ],
        );
        apply(&root, &lower).unwrap();
        apply(&root, &upper).unwrap();
        let names = |p: &str| {
            let mut v: Vec<String> = std::fs::read_dir(root.join(p))
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert!(names("a").is_empty(), "{:?}", names("a"));
        assert_eq!(names("o"), ["new"], "the opaque marker keeps the layer's own files, even earlier ones");
        assert_eq!(std::fs::read(root.join("becomes-file")).unwrap(), b"2");
        let link = std::fs::symlink_metadata(root.join("link")).unwrap();
        assert!(link.is_file(), "a file replaces a symlink, never writes through it");
        let meta = std::fs::metadata(root.join("o/new")).unwrap();
        assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o7777), (1000, 1000, 0o4755));
    }

    #[test]
    fn hostile_entries_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"s").unwrap();
        let cases: Vec<(&str, Vec<E<'_>>)> = vec![
            ("dotdot", vec![E::RawFile(b"a/../../x")]),
            ("absolute", vec![E::RawFile(b"/x")]),
            ("hardlink-out", vec![E::RawHardLink(b"h", b"../outside/secret")]),
            ("via-symlink", vec![E::Symlink("s", "../outside"), E::File("s/x", b"x")]),
            ("hardlink-via-symlink", vec![E::Symlink("s", "../outside"), E::RawHardLink(b"h", b"s/secret")]),
        ];
        for (name, entries) in cases {
            let root = d.path().join(format!("root-{name}"));
            std::fs::create_dir(&root).unwrap();
            let l = layer(d.path(), name, &entries);
            let err = apply(&root, &l).unwrap_err();
            assert!(matches!(err, LayerError::Hostile { .. }), "{name}: {err}");
            assert!(err.to_string().contains("hostile entry"), "{name}: {err}");
        }
        let mut left: Vec<String> = std::fs::read_dir(&outside)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["secret"]);
        assert!(!d.path().join("x").exists());
        assert_eq!(std::fs::metadata(outside.join("secret")).unwrap().len(), 1);
    }

    #[test]
    fn other_compressions_are_named() {
        let d = tempfile::tempdir().unwrap();
        let l = d.path().join("l");
        std::fs::write(&l, [0xfd, b'7', b'z', b'X', 0, 0]).unwrap();
        let err = apply(d.path(), &l).unwrap_err();
        assert!(err.to_string().contains("compressed with xz"), "{err}");
    }

    #[test]
    fn zstd_layers_are_applied_and_a_broken_one_refused() {
        let d = tempfile::tempdir().unwrap();
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(5);
        h.set_mode(0o640);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        tar.append_data(&mut h, "etc/zst", &b"zstd\n"[..]).unwrap();
        let plain = tar.into_inner().unwrap();
        let packed = zstd::stream::encode_all(&plain[..], 3).unwrap();
        let l = d.path().join("l");
        std::fs::write(&l, &packed).unwrap();
        let root = d.path().join("root");
        std::fs::create_dir(&root).unwrap();
        apply(&root, &l).unwrap();
        assert_eq!(std::fs::read(root.join("etc/zst")).unwrap(), b"zstd\n");
        std::fs::write(&l, &packed[..packed.len() / 2]).unwrap();
        let err = apply(&root, &l).unwrap_err();
        assert!(matches!(err, LayerError::Tar { .. } | LayerError::Read { .. }), "{err}");
    }
}
