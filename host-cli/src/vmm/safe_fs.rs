//! Touching files where someone less trusted can also write, without following what
//! they plant. A jailed QEMU writes its sandbox's `vm/` directory (and, when atoll runs
//! as an ordinary user, holds the same uid as every record): every file atoll opens,
//! connects to, copies or hands over there is opened without following a symbolic link
//! at its last component, and every record is written through a temp file of a random
//! name created exclusively, then renamed, and read back only if the effective user
//! owns it.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// Opens `path` for reading, refusing a symbolic link and anything but a regular file
/// (opened without blocking, so a FIFO planted there cannot hang the caller).
pub fn open_read(path: &Path) -> io::Result<File> {
    let flags = OFlags::NOFOLLOW | OFlags::NONBLOCK;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags.bits().cast_signed()).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other(format!("{} is not a regular file", path.display())));
    }
    Ok(file)
}

/// Opens (creating, mode 0600) `path` to append, refusing a symbolic link.
pub fn open_append(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new().create(true).append(true).mode(0o600).custom_flags(libc_nofollow()).open(path)
}

fn libc_nofollow() -> i32 {
    OFlags::NOFOLLOW.bits().cast_signed()
}

/// Writes `bytes` to `path` atomically: a temp file of a random name beside it,
/// created exclusively (mode 0600; nothing planted under a guessable name is
/// followed), then renamed over `path` (a link at `path` is replaced, not followed).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let (dir, name) = split(path)?;
    let mut tmp = tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(".tmp").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Reads the record at `path`: refused if it is a symbolic link or is not owned by
/// the effective user (someone else, a jailed QEMU included, may have put it there).
pub fn read_owned(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = open_read(path)?;
    let meta = f.metadata()?;
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me || !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is not a file owned by uid {me}; it was not written by atoll", path.display()),
        ));
    }
    let mut out = Vec::new();
    (&mut f).take(RECORD_MAX + 1).read_to_end(&mut out)?;
    if out.len() as u64 > RECORD_MAX {
        return Err(io::Error::other(format!(
            "{} is larger than {} MiB; no record atoll writes is",
            path.display(),
            RECORD_MAX >> 20
        )));
    }
    Ok(out)
}

/// Largest record read back: far above any atoll writes, far below what a helper that
/// can write its sandbox directory could plant (a sparse file of a terabyte costs it
/// no disk, and every `atoll ls` reads every record).
pub const RECORD_MAX: u64 = 16 << 20;

/// Copies `from` (not followed if a link) to `to` through an exclusive temp file
/// beside `to`, renamed over it, so `to` is never seen half-written and nothing
/// planted at `to` or at a guessable temp name is written through. Holes in `from`
/// stay holes. The copy has mode 0600.
pub fn copy(from: &Path, to: &Path) -> io::Result<()> {
    let (dir, name) = split(to)?;
    let src = open_read(from)?;
    let tmp = tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(".partial").tempfile_in(dir)?;
    copy_sparse(&src, tmp.as_file())?;
    tmp.persist(to).map_err(|e| e.error)?;
    Ok(())
}

/// Copies the data of `src` into `dst` range by range (`SEEK_DATA`/`SEEK_HOLE`,
/// `copy_file_range`), leaving holes as holes, and gives `dst` the same length.
fn copy_sparse(src: &File, dst: &File) -> io::Result<()> {
    use rustix::fs::SeekFrom;
    let len = src.metadata()?.len();
    let mut at = 0u64;
    while at < len {
        let start = match rustix::fs::seek(src, SeekFrom::Data(at)) {
            Ok(s) => s,
            Err(rustix::io::Errno::NXIO) => break,
            Err(e) => return Err(e.into()),
        };
        let end = rustix::fs::seek(src, SeekFrom::Hole(start)).map_err(io::Error::from)?;
        copy_range(src, dst, start, end)?;
        at = end;
    }
    dst.set_len(len)
}

/// Copies bytes `start..end` of `src` to the same place in `dst`: in the kernel
/// (`copy_file_range`) where it can, else (another file system, say) through a buffer.
fn copy_range(src: &File, dst: &File, start: u64, end: u64) -> io::Result<()> {
    use rustix::io::Errno;
    use std::os::unix::fs::FileExt;
    let shrank = || io::Error::new(io::ErrorKind::UnexpectedEof, "the file shrank while it was copied");
    let (mut off_in, mut off_out) = (start, start);
    while off_in < end {
        let want = usize::try_from(end - off_in).unwrap_or(usize::MAX).min(1 << 30);
        match rustix::fs::copy_file_range(src, Some(&mut off_in), dst, Some(&mut off_out), want) {
            Ok(0) => return Err(shrank()),
            Ok(_) => {}
            Err(Errno::XDEV | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => break,
            Err(e) => return Err(e.into()),
        }
    }
    let mut buf = vec![0u8; 1 << 20];
    while off_in < end {
        let n = usize::try_from(end - off_in).unwrap_or(usize::MAX).min(buf.len());
        let got = src.read_at(&mut buf[..n], off_in)?;
        if got == 0 {
            return Err(shrank());
        }
        dst.write_all_at(&buf[..got], off_in)?;
        off_in += got as u64;
    }
    Ok(())
}

/// A Unix socket at `path`, connected without following a link there: the socket
/// file is opened `O_PATH | O_NOFOLLOW`, checked to be a socket, and connected
/// through `/proc/self/fd`.
pub async fn connect_unix(path: &Path) -> io::Result<tokio::net::UnixStream> {
    let fd = open_socket_file(path)?;
    tokio::net::UnixStream::connect(format!("/proc/self/fd/{}", fd.as_raw_fd())).await
}

/// [`connect_unix`], blocking.
pub fn connect_unix_blocking(path: &Path) -> io::Result<std::os::unix::net::UnixStream> {
    let fd = open_socket_file(path)?;
    std::os::unix::net::UnixStream::connect(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn open_socket_file(path: &Path) -> io::Result<OwnedFd> {
    let fd = rustix::fs::open(path, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Socket {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a socket (a link or a file is in its place)", path.display()),
        ));
    }
    Ok(fd)
}

/// Gives `path` (not followed if a link; a link is refused) to group `gid` with
/// `mode`.
pub fn chown_group_mode(path: &Path, gid: u32, mode: u32) -> io::Result<()> {
    let fd = rustix::fs::open(path, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "a symbolic link is in its place"));
    }
    let gid = rustix::fs::Gid::from_raw(gid);
    rustix::fs::chownat(fd.as_fd(), "", None, Some(gid), AtFlags::EMPTY_PATH)?;
    // chmod through the descriptor's /proc link acts on what it names (a link was refused above).
    rustix::fs::chmod(format!("/proc/self/fd/{}", fd.as_raw_fd()), Mode::from_raw_mode(mode))?;
    Ok(())
}

/// Sets `path`'s mode (not followed if a link; a link is refused).
pub fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    let fd = rustix::fs::open(path, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "a symbolic link is in its place"));
    }
    rustix::fs::chmod(format!("/proc/self/fd/{}", fd.as_raw_fd()), Mode::from_raw_mode(mode))?;
    Ok(())
}

/// Removes the folder `path` and everything below it, following no link (a link is
/// removed itself), with at most three handles open and no recursion, however deep it
/// is. Whoever planted the tree (a taken-over QEMU or helper in `vm/wire/` or `net/`)
/// chose its depth, and `std::fs::remove_dir_all` holds a handle per level and recurses:
/// past the open-file limit it fails (a sandbox that cannot be killed or come back),
/// deeper it overflows the stack and aborts atoll. Here a folder that is not empty has
/// its entries moved up into `path` (under fresh names) and is then removed, so no walk
/// goes more than one level below `path`; each entry is moved at most once.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    use rustix::fs::{Dir, RenameFlags};
    use rustix::io::Errno;
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let top = rustix::fs::open(path, dir_flags, Mode::empty())?;
    let skip = |name: &std::ffi::CStr| name == c"." || name == c"..";
    let mut fresh = 0u64;
    loop {
        let mut seen = false;
        for entry in Dir::read_from(&top)? {
            let entry = entry?;
            let name = entry.file_name();
            if skip(name) {
                continue;
            }
            seen = true;
            match rustix::fs::unlinkat(&top, name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => continue,
                Err(Errno::ISDIR) => {}
                Err(e) => return Err(e.into()),
            }
            match rustix::fs::unlinkat(&top, name, AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT) => continue,
                Err(Errno::NOTEMPTY | Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            let sub = rustix::fs::openat(&top, name, dir_flags, Mode::empty())?;
            for inner in Dir::read_from(&sub)? {
                let inner = inner?;
                if skip(inner.file_name()) {
                    continue;
                }
                loop {
                    fresh += 1;
                    let to = format!(".atoll-rm-{fresh}");
                    match rustix::fs::renameat_with(
                        &sub,
                        inner.file_name(),
                        &top,
                        &to,
                        RenameFlags::NOREPLACE,
                    ) {
                        Err(Errno::EXIST) => continue,
                        Ok(()) | Err(Errno::NOENT) => break,
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            // Emptied (an entry the listing missed is met on the next pass).
            match rustix::fs::unlinkat(&top, name, AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if !seen {
            break;
        }
    }
    drop(top);
    std::fs::remove_dir(path)
}

fn split(path: &Path) -> io::Result<(PathBuf, String)> {
    let bad = || io::Error::new(io::ErrorKind::InvalidInput, format!("{} has no file name", path.display()));
    let name = path.file_name().ok_or_else(bad)?.to_string_lossy().into_owned();
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
    Ok((dir, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree deeper than the open-file limit allows `remove_dir_all` (4,000 levels; a
    /// file, a link out and a planted `.atoll-rm-1` at every tenth level) is removed
    /// whole on a 2 MiB thread under a 256-handle limit, and the link's target is
    /// untouched (the 66,033 levels of `vm_jail`'s plant go through the real binary).
    #[test]
    fn a_tree_of_any_depth_is_removed_without_following_links() {
        let d = tempfile::tempdir().unwrap();
        let away = d.path().join("away");
        std::fs::create_dir(&away).unwrap();
        std::fs::write(away.join("keep"), b"keep").unwrap();
        let root = d.path().join("tree");
        std::fs::create_dir(&root).unwrap();
        let mut cur = rustix::fs::open(&root, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        for i in 0..4_000 {
            if i % 10 == 0 {
                std::fs::write(format!("/proc/self/fd/{}/f", cur.as_raw_fd()), b"x").unwrap();
                std::os::unix::fs::symlink(&away, format!("/proc/self/fd/{}/l", cur.as_raw_fd())).unwrap();
                rustix::fs::mkdirat(&cur, ".atoll-rm-1", Mode::from_raw_mode(0o700)).unwrap();
            }
            rustix::fs::mkdirat(&cur, "a", Mode::from_raw_mode(0o700)).unwrap();
            cur = rustix::fs::openat(&cur, "a", OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        }
        drop(cur);
        let limit = rustix::process::Rlimit { current: Some(256), maximum: None };
        let old = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        rustix::process::setrlimit(
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit { maximum: old.maximum, ..limit },
        )
        .unwrap();
        let r = root.clone();
        let removed = std::thread::Builder::new().stack_size(2 << 20).spawn(move || remove_tree(&r)).unwrap();
        removed.join().unwrap().unwrap();
        rustix::process::setrlimit(rustix::process::Resource::Nofile, old).unwrap();
        assert!(!root.exists());
        assert_eq!(std::fs::read(away.join("keep")).unwrap(), b"keep");
        // A link at the top is refused, not followed.
        std::os::unix::fs::symlink(&away, d.path().join("top")).unwrap();
        assert!(remove_tree(&d.path().join("top")).is_err());
        assert!(away.join("keep").exists());
    }

    /// A link planted at the record's old temp name, at the record itself or at a log
    /// is never written through; a socket is reached only where no link stands.
    #[tokio::test]
    async fn planted_links_are_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        let rec = d.path().join("sandbox.json");
        std::os::unix::fs::symlink(&victim, d.path().join(".sandbox.json.tmp")).unwrap();
        write_atomic(&rec, b"{}").unwrap();
        assert_eq!(std::fs::read(&rec).unwrap(), b"{}");
        std::os::unix::fs::symlink(&victim, d.path().join("log")).unwrap();
        assert!(open_append(&d.path().join("log")).is_err(), "a link at a log is refused");
        assert!(open_read(&d.path().join("log")).is_err());
        let other = tempfile::tempdir().unwrap();
        let fifo = other.path().join("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        assert!(open_read(&fifo).is_err(), "a FIFO is refused, without blocking on it");
        std::fs::remove_file(&rec).unwrap();
        std::os::unix::fs::symlink(&victim, &rec).unwrap();
        write_atomic(&rec, b"{\"a\":1}").unwrap();
        assert!(std::fs::symlink_metadata(&rec).unwrap().is_file(), "the link was replaced");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert_eq!(read_owned(&rec).unwrap(), b"{\"a\":1}");
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 4, "no temp file is left: {names:?}");

        // A huge sparse record is refused after RECORD_MAX + 1 bytes, not read whole.
        let huge = std::fs::File::create(&rec).unwrap();
        huge.set_len(1 << 40).unwrap();
        let e = read_owned(&rec).unwrap_err().to_string();
        assert!(e.contains("larger than 16 MiB"), "{e}");
        std::fs::remove_file(&rec).unwrap();

        let sock = d.path().join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        connect_unix(&sock).await.expect("a real socket connects");
        let link = d.path().join("l.sock");
        std::os::unix::fs::symlink(&sock, &link).unwrap();
        assert!(connect_unix(&link).await.is_err(), "a link to a socket is not followed");
        assert!(connect_unix_blocking(&link).is_err());
        drop(listener);

        let sparse = d.path().join("sparse");
        let f = File::create(&sparse).unwrap();
        f.set_len(64 << 20).unwrap();
        rustix::fs::seek(&f, rustix::fs::SeekFrom::Start(32 << 20)).unwrap();
        (&f).write_all(b"data").unwrap();
        copy(&sparse, &d.path().join("copy")).unwrap();
        let c = std::fs::metadata(d.path().join("copy")).unwrap();
        assert_eq!(c.len(), 64 << 20);
        assert!(c.blocks() * 512 < 1 << 20, "holes stay holes: {} blocks", c.blocks());
        let got = std::fs::read(d.path().join("copy")).unwrap();
        assert_eq!(&got[32 << 20..(32 << 20) + 4], b"data");

        // Onto another file system (tmpfs), where copy_file_range refuses.
        if let Ok(shm) = tempfile::tempdir_in("/dev/shm") {
            copy(&sparse, &shm.path().join("copy")).unwrap();
            assert_eq!(std::fs::read(shm.path().join("copy")).unwrap(), got);
        }

        chown_group_mode(&victim, rustix::process::getegid().as_raw(), 0o640).unwrap();
        assert!(chown_group_mode(&rec.with_file_name("log"), 0, 0o666).is_err(), "a link is refused");
    }
}
