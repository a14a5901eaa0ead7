//! A shared folder's path made canonical the way `realpath` does it (absolute, `.`,
//! `..` and symbolic links resolved), but one component at a time on directory handles
//! (`openat(O_PATH | O_NOFOLLOW)` beneath the handle of the folder above): each link met
//! is read from the very inode just opened (`readlinkat(fd, "")`) and shown to a judge
//! *before* it is followed, with where it lies (its folder's path and the device and
//! inode of that folder and of every folder above it). The caller refuses links a
//! sandbox's guest could have put there ([`crate::sandbox::mounts::canonical_dir`]).
//!
//! Nothing is re-read by path: a component swapped after it was opened changes nothing
//! in this walk, and what the walk returns is opened later with no link allowed at all
//! ([`super::shares`]), so a link swapped in after it fails the create.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

/// Most links followed in one path, as the kernel's own limit (`ELOOP` past it).
pub const MAX_LINKS: usize = 40;

/// Longest path, given or found, in bytes, as the kernel's `PATH_MAX` (`ENAMETOOLONG`
/// past it, as `realpath` says): what the walk holds (its components, a descriptor for
/// each folder down to where it is) stays bounded whatever a caller or a link names.
pub const MAX_PATH: usize = 4096;

/// A symbolic link met on the way, before it is followed.
#[derive(Debug)]
pub struct Link<'a> {
    /// The link itself: its folder's canonical path and its name.
    pub at: PathBuf,
    /// What it points to, as written in it.
    pub target: PathBuf,
    /// Device and inode of the link's folder and of each folder above it, up to `/`.
    pub parents: &'a [(u64, u64)],
}

/// Why a path could not be resolved.
#[derive(Debug)]
pub enum WalkError<E> {
    /// The judge refused a link.
    Refused(E),
    /// A component does not exist.
    Missing,
    /// The path names something that is not a directory.
    NotDir,
    /// More than [`MAX_LINKS`] links.
    Loop,
    /// A component could not be opened or read.
    Io(std::io::Error),
}

/// A folder found: its canonical path, and the folder opened (`O_PATH`).
#[derive(Debug)]
pub struct Resolved {
    /// Absolute, with no `.`, `..` or link in it.
    pub path: PathBuf,
    /// The folder as the walk opened it.
    pub dir: OwnedFd,
}

/// One folder of the walk's current position.
struct Step {
    name: OsString,
    fd: OwnedFd,
    id: (u64, u64),
}

/// Resolves `path` (relative to the working directory unless absolute) to a folder,
/// calling `judge` on each symbolic link before following it; the first `Err` of
/// `judge` stops the walk. `..` goes up from where the walk is (after a link, from the
/// link's target, as the kernel does).
pub fn resolve<E>(
    path: &Path,
    mut judge: impl FnMut(&Link<'_>) -> Result<(), E>,
) -> Result<Resolved, WalkError<E>> {
    // As `realpath`: an empty path names nothing (not the working directory).
    if path.as_os_str().is_empty() {
        return Err(WalkError::Missing);
    }
    let full = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map_err(WalkError::Io)?.join(path)
    };
    if full.as_os_str().len() >= MAX_PATH {
        return Err(io(Errno::NAMETOOLONG));
    }
    let root = open_step(rustix::fs::CWD, OsStr::new("/"))?;
    if FileType::from_raw_mode(root.1.st_mode) != FileType::Directory {
        return Err(WalkError::NotDir);
    }
    let mut stack = vec![Step { name: "/".into(), fd: root.0, id: id(&root.1) }];
    // Components still to walk, the next one last.
    let mut todo: Vec<OsString> = Vec::new();
    push_components(&mut todo, &full);
    let mut links = 0;
    // Bytes of the walk's position as a path (each folder's name and its `/`).
    let mut depth_bytes = 0;
    while let Some(name) = todo.pop() {
        match name.as_bytes() {
            b"" | b"." => continue,
            b".." => {
                if stack.len() > 1
                    && let Some(up) = stack.pop()
                {
                    depth_bytes -= up.name.len() + 1;
                }
                continue;
            }
            _ => {}
        }
        let top = stack.last().ok_or(WalkError::Missing)?;
        let (fd, st) = open_step(&top.fd, &name)?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                depth_bytes += name.len() + 1;
                if depth_bytes >= MAX_PATH {
                    return Err(io(Errno::NAMETOOLONG));
                }
                stack.push(Step { name, fd, id: id(&st) });
            }
            FileType::Symlink => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(WalkError::Loop);
                }
                // The link just opened, not whatever has its name now.
                let target = rustix::fs::readlinkat(&fd, c"", Vec::new()).map_err(io)?;
                let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
                let parents: Vec<(u64, u64)> = stack.iter().rev().map(|s| s.id).collect();
                let link = Link { at: path_of(&stack).join(&name), target, parents: &parents };
                judge(&link).map_err(WalkError::Refused)?;
                if link.target.is_absolute() {
                    stack.truncate(1);
                    depth_bytes = 0;
                }
                push_components(&mut todo, &link.target);
            }
            _ => return Err(WalkError::NotDir),
        }
    }
    let path = path_of(&stack);
    let dir = stack.pop().ok_or(WalkError::Missing)?.fd;
    Ok(Resolved { path, dir })
}

/// Puts the components of `path` on `todo` so that the first is popped first.
fn push_components(todo: &mut Vec<OsString>, path: &Path) {
    let parts: Vec<&[u8]> = path.as_os_str().as_bytes().split(|b| *b == b'/').collect();
    todo.extend(parts.into_iter().rev().map(|p| OsString::from_vec(p.to_vec())));
}

/// The canonical path of the walk's position.
fn path_of(stack: &[Step]) -> PathBuf {
    let mut p = PathBuf::from("/");
    for s in stack.iter().skip(1) {
        p.push(&s.name);
    }
    p
}

/// `name` opened beneath `at` without following it, and its status.
fn open_step<E>(
    at: impl std::os::fd::AsFd,
    name: &OsStr,
) -> Result<(OwnedFd, rustix::fs::Stat), WalkError<E>> {
    let fd = rustix::fs::openat(at, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| match e {
        Errno::NOENT => WalkError::Missing,
        Errno::NOTDIR => WalkError::NotDir,
        e => io(e),
    })?;
    let st = rustix::fs::fstat(&fd).map_err(io)?;
    Ok((fd, st))
}

fn id(st: &rustix::fs::Stat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

fn io<E>(e: Errno) -> WalkError<E> {
    WalkError::Io(e.into())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, symlink};

    use super::*;

    fn canonical(p: &Path) -> PathBuf {
        std::fs::canonicalize(p).unwrap()
    }

    /// Each link met: (link, target).
    type Seen = Vec<(PathBuf, PathBuf)>;

    /// Resolves `p`, recording every link met.
    fn walk(p: &Path) -> (Result<PathBuf, WalkError<()>>, Seen) {
        let mut seen = Vec::new();
        let r = resolve(p, |l: &Link<'_>| {
            seen.push((l.at.clone(), l.target.clone()));
            Ok::<(), ()>(())
        });
        (r.map(|r| r.path), seen)
    }

    #[test]
    fn resolves_as_realpath_does_and_reports_each_link() {
        let d = tempfile::tempdir().unwrap();
        let top = canonical(d.path());
        std::fs::create_dir_all(top.join("a/b/c")).unwrap();
        std::fs::create_dir_all(top.join("x/y")).unwrap();
        // A chain: l1 -> l2 -> a/b (relative), then an absolute one.
        symlink("l2", top.join("l1")).unwrap();
        symlink("a/b", top.join("l2")).unwrap();
        symlink(top.join("x/y"), top.join("a/b/c/abs")).unwrap();
        let (got, seen) = walk(&top.join("l1/c/abs"));
        assert_eq!(got.unwrap(), top.join("x/y"));
        assert_eq!(
            seen,
            [
                (top.join("l1"), PathBuf::from("l2")),
                (top.join("l2"), PathBuf::from("a/b")),
                (top.join("a/b/c/abs"), top.join("x/y")),
            ]
        );
        // `..` after a link goes up from its target (as the kernel does), not lexically.
        let (got, _) = walk(&top.join("a/b/c/abs/.."));
        assert_eq!(got.unwrap(), top.join("x"));
        assert_eq!(walk(&top.join("a/b/c/abs/..")).0.unwrap(), canonical(&top.join("a/b/c/abs/..")));
        // `.`, `..`, repeated slashes, and `..` above `/`.
        let odd = format!("{}/./a//b/../b/c/", top.display());
        assert_eq!(walk(Path::new(&odd)).0.unwrap(), top.join("a/b/c"));
        assert_eq!(walk(Path::new("/../..")).0.unwrap(), PathBuf::from("/"));
    }

    #[test]
    fn relative_paths_start_at_the_working_directory() {
        let (got, _) = walk(Path::new("."));
        assert_eq!(got.unwrap(), canonical(&std::env::current_dir().unwrap()));
    }

    #[test]
    fn loops_missing_parts_and_files_are_errors() {
        let d = tempfile::tempdir().unwrap();
        let top = canonical(d.path());
        symlink("loop2", top.join("loop1")).unwrap();
        symlink("loop1", top.join("loop2")).unwrap();
        std::fs::write(top.join("file"), "").unwrap();
        symlink("file", top.join("to-file")).unwrap();
        let (got, seen) = walk(&top.join("loop1"));
        assert!(matches!(got, Err(WalkError::Loop)), "{got:?}");
        assert_eq!(seen.len(), MAX_LINKS);
        assert!(matches!(walk(&top.join("nope/x")).0, Err(WalkError::Missing)));
        assert!(matches!(walk(Path::new("")).0, Err(WalkError::Missing)));
        assert!(matches!(walk(&top.join("file")).0, Err(WalkError::NotDir)));
        assert!(matches!(walk(&top.join("to-file")).0, Err(WalkError::NotDir)));
        assert!(matches!(walk(&top.join("file/..")).0, Err(WalkError::NotDir)));
    }

    #[test]
    fn paths_longer_than_path_max_are_refused_given_or_reached_through_links() {
        use rustix::fs::{Mode, OFlags};
        let too_long = |r: Result<PathBuf, WalkError<()>>| matches!(r, Err(WalkError::Io(ref e)) if e.raw_os_error() == Some(Errno::NAMETOOLONG.raw_os_error()));
        // Given: a model's 1 MB of `./` is refused before anything is held for it.
        assert!(too_long(walk(Path::new(&"./".repeat(1 << 19))).0));
        // Reached: two links, each within PATH_MAX, lead 3000 folders deep (6000 bytes).
        let d = tempfile::tempdir().unwrap();
        let top = canonical(d.path());
        let mut at = rustix::fs::open(&top, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        for _ in 0..3000 {
            rustix::fs::mkdirat(&at, "a", Mode::from_raw_mode(0o700)).unwrap();
            at = rustix::fs::openat(&at, "a", OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        }
        let half = vec!["a"; 1500].join("/");
        symlink(&half, top.join("l1")).unwrap();
        let mut mid = rustix::fs::open(&top, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        for _ in 0..1500 {
            mid = rustix::fs::openat(&mid, "a", OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        }
        rustix::fs::symlinkat(half.as_str(), &mid, "l2").unwrap();
        assert!(too_long(walk(&top.join("l1/l2")).0));
        // Within the limit, the same links resolve.
        assert!(walk(&top.join("l1")).0.is_ok());
    }

    #[test]
    fn a_refused_link_stops_the_walk_before_it_is_followed() {
        let d = tempfile::tempdir().unwrap();
        let top = canonical(d.path());
        std::fs::create_dir_all(top.join("share/deep")).unwrap();
        symlink("/", top.join("share/deep/root")).unwrap();
        let share = std::fs::metadata(top.join("share")).unwrap();
        let mut met = 0;
        let r = resolve(&top.join("share/deep/root/etc"), |l: &Link<'_>| {
            met += 1;
            // The link's folder first, then each folder above it, `/` last.
            assert_eq!(l.parents[0], {
                let m = std::fs::metadata(top.join("share/deep")).unwrap();
                (m.dev(), m.ino())
            });
            assert_eq!(
                l.parents.last(),
                Some(&{
                    let m = std::fs::metadata("/").unwrap();
                    (m.dev(), m.ino())
                })
            );
            if l.parents.contains(&(share.dev(), share.ino())) { Err(l.at.clone()) } else { Ok(()) }
        });
        assert!(matches!(r, Err(WalkError::Refused(ref at)) if *at == top.join("share/deep/root")), "{r:?}");
        assert_eq!(met, 1);
    }
}
