//! The rules for host folders shared into a sandbox (`atoll create --mount
//! HOSTDIR:GUESTDIR[:rw]`, MCP `mounts`; read-only unless `rw` is asked for) and for its disk size (`--disk 8G`), for
//! both faces: parsing, the checks that refuse bad input before anything is started,
//! which folders an MCP client may share, and the refusal to snapshot a sandbox that
//! has host folders. QEMU's side is [`crate::vmm::storage`].

use std::path::{Path, PathBuf};

use crate::vmm::state::Record;
pub use crate::vmm::storage::{Mount, Storage};

/// Most host folders one sandbox may have (each is a PCI device and a kernel command
/// line word, which holds 2 KiB in all).
pub const MAX_MOUNTS: usize = 8;
/// Longest guest path accepted, in bytes.
const MAX_GUEST_PATH: usize = 128;
/// Smallest disk accepted.
pub const MIN_DISK_BYTES: u64 = 64 << 20;
/// Largest disk accepted.
pub const MAX_DISK_BYTES: u64 = 16 << 40;

/// Why a mount or a disk size was refused.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// Not `HOSTDIR:GUESTDIR[:ro|:rw]`.
    #[error(
        "`{0}` is not HOSTDIR:GUESTDIR[:ro|:rw]; e.g. --mount ./src:/work (read-only) or --mount ./src:/work:rw"
    )]
    Syntax(String),
    /// The host folder does not exist. It is not made for the user: a mistyped path would
    /// then share a new empty folder instead of failing.
    #[error(
        "host folder `{}` does not exist; atoll shares an existing folder and does not make one: create it first (`mkdir -p {}`) or fix the path",
        .0.display(), .0.display()
    )]
    HostMissing(PathBuf),
    /// The host folder cannot be reached.
    #[error("host folder `{}` cannot be read ({}); check the path and its permissions", .0.display(), .1)]
    HostUnreadable(PathBuf, std::io::ErrorKind),
    /// A host path given without `..` and symlinks resolved.
    #[error("host folder `{}` is not canonical; give it as `realpath` prints it", .0.display())]
    NotCanonical(PathBuf),
    /// The host path goes through a link a sandbox's guest could have put there.
    #[error(transparent)]
    LinkInShare(Box<LinkInShare>),
    /// The host path is a file.
    #[error("`{}` is not a folder; --mount shares folders (copy single files with `atoll cp`)", .0.display())]
    HostNotDir(PathBuf),
    /// A guest path that is relative, odd or reserved.
    #[error("guest path `{path}` {why}")]
    GuestPath {
        /// The path given.
        path: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// Two folders on one guest path.
    #[error("two host folders are mounted on `{0}`; give each its own guest path")]
    Duplicate(String),
    /// Too many folders.
    #[error("{0} host folders asked for; a sandbox takes at most {MAX_MOUNTS}")]
    TooMany(usize),
    /// A bad disk size.
    #[error("disk size `{0}` {1}")]
    Disk(String, String),
    /// An MCP client asked for a folder outside what it may share.
    #[error("`{}` may not be mounted: MCP sandboxes may mount only folders under {allowed}", host.display())]
    NotAllowed {
        /// The folder asked for (canonical).
        host: PathBuf,
        /// What is allowed, said in words.
        allowed: String,
    },
    /// A copy out of a guest would be staged inside a folder a sandbox writes.
    #[error(
        "`{}` is inside `{}`, which sandbox `{sandbox}` shares read-write: its guest could swap files there while they land; copy to a folder outside it, then move the result",
        path.display(), host.display()
    )]
    StagingShared {
        /// Where the copy would be staged.
        path: PathBuf,
        /// The shared folder.
        host: PathBuf,
        /// The sandbox sharing it.
        sandbox: String,
    },
    /// A host folder that holds atoll's state directory (`/`, a home folder).
    #[error(
        "host folder `{}` holds atoll's state directory `{}` (every sandbox's records, sockets and keys): a guest could reach the other sandboxes through it; share a folder that does not contain it",
        host.display(), state.display()
    )]
    HoldsState {
        /// The folder.
        host: PathBuf,
        /// The state directory.
        state: PathBuf,
    },
    /// A host folder inside atoll's state directory (the secrets store, a sandbox's
    /// directory).
    #[error(
        "host folder `{}` is inside atoll's state directory `{}` (the secrets store, every sandbox's records, disks and sockets): a guest must not see or change it; share a folder outside it",
        host.display(), state.display()
    )]
    InState {
        /// The folder.
        host: PathBuf,
        /// The state directory.
        state: PathBuf,
    },
    /// A read-write host folder that holds or lies in atoll's data directory.
    #[error(
        "host folder `{}` would be shared read-write with atoll's data directory `{}` in it or around it (the kernel, templates and guest agent every later sandbox boots from): a guest could change what other sandboxes run; share it read-only (:ro) or share a folder that does not contain it",
        host.display(), data.display()
    )]
    DataDir {
        /// The folder.
        host: PathBuf,
        /// The data directory.
        data: PathBuf,
    },
    /// A snapshot or park of a sandbox with host folders.
    #[error(
        "sandbox `{0}` has host folders (--mount), which snapshots and parking cannot carry; snapshot a sandbox made without --mount, or copy files in with `atoll cp`"
    )]
    Snapshot(String),
}

/// A host path refused for a link in it that a sandbox could have put there.
#[derive(Debug, thiserror::Error)]
#[error(
    "`{}` goes through a link (`{}` -> `{}`) inside `{}`, which {}: {} could have put it there; give the folder's real path (`realpath`), from a folder no sandbox can write",
    shown(path),
    shown(link),
    shown(target),
    shown(inside),
    whose,
    who
)]
pub struct LinkInShare {
    /// The host path given.
    pub path: PathBuf,
    /// The link met.
    pub link: PathBuf,
    /// What it points to.
    pub target: PathBuf,
    /// The read-write share (or the state directory) it lies in.
    pub inside: PathBuf,
    /// "sandbox `web` shares read-write", "is the atoll state directory".
    pub whose: String,
    /// "its guest", "a sandbox's processes".
    pub who: &'static str,
}

/// One `--mount` as given: `HOSTDIR:GUESTDIR[:ro|:rw]`, read-only unless it ends in
/// `:rw` (a guest that can write a folder can plant what host tools run). The host folder must exist; it
/// is made canonical (absolute, `..` and symlinks resolved) by [`canonical_dir`], which
/// refuses a link a sandbox could have put there, so the folder shared is the one the
/// user named even if a link moves later.
pub fn parse_mount(text: &str) -> Result<Mount, MountError> {
    let (rest, read_only) = match text.rsplit_once(':') {
        Some((rest, "ro")) => (rest, true),
        Some((rest, "rw")) => (rest, false),
        _ => (text, true),
    };
    // Guest paths hold no `:`, so the last one splits; a host path may contain `:`.
    let Some((host, guest)) = rest.rsplit_once(':') else { return Err(MountError::Syntax(text.into())) };
    if host.is_empty() || guest.is_empty() {
        return Err(MountError::Syntax(text.into()));
    }
    let host = canonical_dir(Path::new(host))?;
    not_near_state(&host, read_only)?;
    Ok(Mount { host, guest: guest_path(guest)?, read_only })
}

/// Refuses a canonical host folder that is, holds or lies inside this user's state
/// directory (sharing `/` or a home folder would show a guest every sandbox's records
/// and sockets, and the MCP token; its `.secrets` holds every secret's value), and a
/// read-write one that holds or lies inside the data directory (kernel, templates and
/// guest agent of every later sandbox).
fn not_near_state(host: &Path, read_only: bool) -> Result<(), MountError> {
    let Ok(state) = crate::vmm::dirs::state_dir() else { return Ok(()) };
    let data = if read_only { None } else { crate::vmm::dirs::data_dir().ok() };
    refuse_near(host, &state, data.as_deref())
}

/// [`not_near_state`] with the directories given. "Holds" and "inside" are by path (the
/// directory made canonical as far as it exists) and by device and inode (the folder
/// among the directory's ancestors, or the directory among the folder's), so the same
/// folder reached through a bind mount counts too.
fn refuse_near(host: &Path, state: &Path, data: Option<&Path>) -> Result<(), MountError> {
    let host_ids = open_ids(host);
    let near = |dir: &Path| -> Option<(PathBuf, bool)> {
        let dir = canonical_as_far_as_it_exists(dir);
        let dir_ids = open_ids(&dir);
        let holds = dir.starts_with(host) || host_ids.first().is_some_and(|h| dir_ids.contains(h));
        let inside = host.starts_with(&dir) || dir_ids.first().is_some_and(|d| host_ids.contains(d));
        (holds || inside).then_some((dir, holds))
    };
    match near(state) {
        Some((state, true)) => return Err(MountError::HoldsState { host: host.into(), state }),
        Some((state, false)) => return Err(MountError::InState { host: host.into(), state }),
        None => {}
    }
    if let Some((data, _)) = data.and_then(near) {
        return Err(MountError::DataDir { host: host.into(), data });
    }
    Ok(())
}

/// `path` made canonical up to its deepest existing folder, the rest appended as given
/// (a state directory not made yet is still known under the name it will have).
fn canonical_as_far_as_it_exists(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (at.parent(), at.file_name()) {
            (Some(up), Some(name)) => {
                rest.push(name.to_owned());
                at = up;
            }
            _ => return path.into(),
        }
    }
}

/// Device and inode of the folder at `path` and of each folder above it (empty if it
/// cannot be opened).
fn open_ids(path: &Path) -> Vec<(u64, u64)> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    rustix::fs::open(path, flags, Mode::empty())
        .map(|fd| ancestors(std::os::fd::AsFd::as_fd(&fd)))
        .unwrap_or_default()
}

/// A host folder, canonical (absolute, `.`, `..` and links resolved), resolved one
/// component at a time ([`crate::jail::share_path`]). A link is followed only if no
/// sandbox of this state directory could have put it there: one inside a folder that a
/// sandbox with a record there shares read-write (recognised by path, and by device and inode
/// among the link's folder and the folders above it, so another bind mount of the share
/// counts too), or inside the state directory, is refused ([`MountError::LinkInShare`]),
/// before it is followed. Used by both faces' `--mount`/`mounts`, `--allow-mount` and MCP
/// roots.
pub fn canonical_dir(host: &Path) -> Result<PathBuf, MountError> {
    canonical_dir_among(host, walls_of_state)
}

/// [`canonical_dir`] with the walls `walls_of` gives, asked for only when a link is met.
fn canonical_dir_among(host: &Path, walls_of: impl Fn() -> Vec<Wall>) -> Result<PathBuf, MountError> {
    use crate::jail::share_path::{WalkError, resolve};
    let mut walls: Option<Vec<Wall>> = None;
    let judge = |link: &crate::jail::share_path::Link<'_>| {
        let walls = walls.get_or_insert_with(&walls_of);
        match walls
            .iter()
            .find(|w| link.at.starts_with(&w.path) || w.id.is_some_and(|id| link.parents.contains(&id)))
        {
            None => Ok(()),
            Some(w) => Err(MountError::LinkInShare(Box::new(LinkInShare {
                path: host.into(),
                link: link.at.clone(),
                target: link.target.clone(),
                inside: w.path.clone(),
                whose: w.whose.clone(),
                who: w.who,
            }))),
        }
    };
    match resolve(host, judge) {
        Ok(found) => Ok(found.path),
        Err(WalkError::Refused(e)) => Err(e),
        Err(WalkError::Missing) => {
            Err(MountError::HostMissing(std::path::absolute(host).unwrap_or(host.into())))
        }
        Err(WalkError::NotDir) => Err(MountError::HostNotDir(host.into())),
        Err(WalkError::Loop) => {
            Err(MountError::HostUnreadable(host.into(), std::io::Error::from(rustix::io::Errno::LOOP).kind()))
        }
        Err(WalkError::Io(e)) => Err(MountError::HostUnreadable(host.into(), e.kind())),
    }
}

/// A folder no link may lie in: a read-write share of a sandbox, or the state directory.
struct Wall {
    path: PathBuf,
    /// Device and inode, when it could be stat'ed.
    id: Option<(u64, u64)>,
    whose: String,
    who: &'static str,
}

/// The walls of this user's state directory ([`walls_in`]).
fn walls_of_state() -> Vec<Wall> {
    crate::vmm::dirs::state_dir().map(|state| walls_in(&state)).unwrap_or_default()
}

/// The walls of the state directory `state`: the directory itself (sandboxes' QEMU and
/// network helpers write there) and each read-write share of each sandbox whose record
/// it holds, running or not: a link its guest planted stays after the guest stops, and
/// whether its QEMU runs is read from the record, which its network helper can write.
/// Records are read as [`crate::vmm::state::load_all`] checks them (owned by us, not
/// links, named for their id); a share counts only with an absolute path, at most
/// [`MAX_MOUNTS`] of a record. One whose folder cannot be stat'ed now still counts by
/// its path.
fn walls_in(state: &Path) -> Vec<Wall> {
    let stat_id = |p: &Path| rustix::fs::stat(p).ok().map(|st| dev_ino(&st));
    let mut walls = Vec::new();
    if let Some(id) = stat_id(state) {
        let path = std::fs::canonicalize(state).unwrap_or(state.into());
        walls.push(Wall {
            path,
            id: Some(id),
            whose: "is the atoll state directory".into(),
            who: "a sandbox's processes",
        });
    }
    for record in crate::vmm::state::load_all(state).into_iter().flatten() {
        for m in
            record.storage.mounts.iter().filter(|m| !m.read_only && m.host.is_absolute()).take(MAX_MOUNTS)
        {
            walls.push(Wall {
                path: m.host.clone(),
                id: stat_id(&m.host),
                whose: format!(
                    "sandbox `{}` shares read-write",
                    crate::output::escape_controls(&record.name)
                ),
                who: "its guest",
            });
        }
    }
    walls
}

/// A path for a message: control characters escaped (a link's target is the guest's).
fn shown(p: &Path) -> String {
    crate::output::escape_controls(&p.to_string_lossy()).into_owned()
}

/// A guest path: absolute, normalized (no `.`, `..` or empty parts), printable ASCII
/// without `:`, `,`, quotes or `\` (it travels on the kernel command line), and not
/// `/` or under `/proc`, `/sys`, `/dev`.
pub fn guest_path(path: &str) -> Result<String, MountError> {
    let bad = |why| Err(MountError::GuestPath { path: path.into(), why });
    if !path.starts_with('/') {
        return bad("is relative; give an absolute path such as /work");
    }
    if path.len() > MAX_GUEST_PATH {
        return bad("is too long (at most 128 bytes)");
    }
    if !path.bytes().all(|b| b.is_ascii_graphic() && !b":,\"'\\".contains(&b)) {
        return bad("may hold only printable ASCII without spaces, `:`, `,`, quotes or `\\`");
    }
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if parts.iter().any(|p| *p == "." || *p == "..") {
        return bad("holds `.` or `..`; give it without them");
    }
    if parts.is_empty() {
        return bad("is the guest's root; mount under it, e.g. /work");
    }
    if matches!(parts[0], "proc" | "sys" | "dev") {
        return bad("is inside /proc, /sys or /dev, which the guest kernel owns; pick another");
    }
    Ok(format!("/{}", parts.join("/")))
}

/// The checks across a sandbox's mounts: how many, one folder per guest path, and
/// each as [`parse_mount`] leaves it (an existing canonical folder, a normalized guest
/// path), for callers that built them by hand.
pub fn check(mounts: &[Mount]) -> Result<(), MountError> {
    if mounts.len() > MAX_MOUNTS {
        return Err(MountError::TooMany(mounts.len()));
    }
    for (i, m) in mounts.iter().enumerate() {
        if canonical_dir(&m.host)? != m.host {
            return Err(MountError::NotCanonical(m.host.clone()));
        }
        not_near_state(&m.host, m.read_only)?;
        if guest_path(&m.guest)? != m.guest {
            return Err(MountError::GuestPath { path: m.guest.clone(), why: "is not normalized" });
        }
        if mounts[..i].iter().any(|o| o.guest == m.guest) {
            return Err(MountError::Duplicate(m.guest.clone()));
        }
    }
    Ok(())
}

/// A disk size: a whole number with a unit, K, M, G or T (powers of 1024; `8G`,
/// `512M`; `GiB`/`GB` are read the same), between 64 MiB and 16 TiB.
pub fn parse_disk(text: &str) -> Result<u64, MountError> {
    let bad = |why: &str| MountError::Disk(text.into(), why.into());
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let shift = match unit.to_ascii_uppercase().trim_end_matches("IB").trim_end_matches('B') {
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        "" => return Err(bad("has no unit; give e.g. 8G or 512M")),
        _ => return Err(bad("has an unknown unit; use K, M, G or T, e.g. 8G")),
    };
    let value: u64 = number.parse().map_err(|_| bad("is not a whole number with a unit, e.g. 8G"))?;
    let bytes = value.saturating_mul(1 << shift);
    if !(MIN_DISK_BYTES..=MAX_DISK_BYTES).contains(&bytes) {
        return Err(bad("is out of range; give 64M to 16T"));
    }
    Ok(bytes)
}

/// Refuses to snapshot or park `record` when it has host folders: a restored VM would
/// need the same folders, unchanged, and QEMU cannot save a 9p device in use.
pub fn refuse_snapshot(record: &Record) -> Result<(), MountError> {
    if record.storage.mounts.is_empty() { Ok(()) } else { Err(MountError::Snapshot(record.name.clone())) }
}

/// Refuses to stage a copy from a guest in the folder `dir` (an open handle; `real` is
/// where it was opened, for messages), where temp files and folders are made before
/// their rename, when it lies in a folder a sandbox of `records` shares read-write: the
/// guest could plant a link or swap a file there mid-copy.
///
/// A share is recognised by its root's device and inode, not its path: the handle's
/// ancestors are walked (`openat(fd, "..")`, `fstat`) up to `/` and each compared with
/// every read-write share's root, so the same folder reached through another bind mount
/// of it, a link, or any other alias is refused the same way. The path is compared too,
/// for a share whose root can no longer be stat'ed.
pub fn refuse_staging_in_share(
    dir: std::os::fd::BorrowedFd<'_>,
    real: &Path,
    records: &[Record],
) -> Result<(), MountError> {
    let shares: Vec<(&Record, &Mount)> = records
        .iter()
        .flat_map(|r| r.storage.mounts.iter().filter(|m| !m.read_only).map(move |m| (r, m)))
        .collect();
    if shares.is_empty() {
        return Ok(());
    }
    let refused = |r: &Record, m: &Mount| MountError::StagingShared {
        path: real.to_path_buf(),
        host: m.host.clone(),
        sandbox: r.name.clone(),
    };
    if let Some((r, m)) = shares.iter().find(|(_, m)| real.starts_with(&m.host)) {
        return Err(refused(r, m));
    }
    let roots: Vec<((u64, u64), &Record, &Mount)> = shares
        .iter()
        .filter_map(|(r, m)| rustix::fs::stat(&m.host).ok().map(|st| (dev_ino(&st), *r, *m)))
        .collect();
    for id in ancestors(dir) {
        if let Some((_, r, m)) = roots.iter().find(|(root, _, _)| *root == id) {
            return Err(refused(r, m));
        }
    }
    Ok(())
}

fn dev_ino(st: &rustix::fs::Stat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

/// The device and inode of `dir` and of each folder above it, up to `/` (where `..` is
/// the folder itself). A folder that cannot be opened or stat'ed ends the walk.
fn ancestors(dir: std::os::fd::BorrowedFd<'_>) -> Vec<(u64, u64)> {
    use rustix::fs::{Mode, OFlags};
    let mut ids = Vec::new();
    let Ok(mut at) = rustix::io::dup(dir) else { return ids };
    // Bounded: no real tree is deeper than this.
    for _ in 0..4096 {
        let Ok(st) = rustix::fs::fstat(&at) else { break };
        let id = dev_ino(&st);
        if ids.last() == Some(&id) {
            break;
        }
        ids.push(id);
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        match rustix::fs::openat(&at, "..", flags, Mode::empty()) {
            Ok(up) => at = up,
            Err(_) => break,
        }
    }
    ids
}

/// Whether an MCP client may mount `host` (canonical): it must be one of `allowed`
/// (canonical folders: `atoll mcp --allow-mount`, and the client's roots when
/// `roots_count`, over stdio) or inside one.
pub fn check_allowed(host: &Path, allowed: &[PathBuf], roots_count: bool) -> Result<(), MountError> {
    if allowed.iter().any(|a| host.starts_with(a)) {
        return Ok(());
    }
    let mut allowed = if allowed.is_empty() && roots_count {
        "nothing: this client declared no roots and `atoll mcp` was started without --allow-mount DIR".into()
    } else if allowed.is_empty() {
        "nothing: `atoll mcp` was started without --allow-mount DIR".into()
    } else {
        allowed.iter().map(|a| format!("`{}`", a.display())).collect::<Vec<_>>().join(", ")
    };
    if !roots_count {
        allowed.push_str(
            "; over HTTP the roots a client declares never count: only the operator can allow a folder, \
             by starting `atoll mcp` with --allow-mount DIR",
        );
    }
    Err(MountError::NotAllowed { host: host.into(), allowed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_parse_with_modes_and_canonical_hosts() {
        let d = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(d.path()).unwrap();
        let m = parse_mount(&format!("{}/./:/work//src/:ro", d.path().display())).unwrap();
        assert_eq!(m, Mount { host: real.clone(), guest: "/work/src".into(), read_only: true });
        assert!(!parse_mount(&format!("{}:/w:rw", d.path().display())).unwrap().read_only);
        assert!(
            parse_mount(&format!("{}:/w", d.path().display())).unwrap().read_only,
            "read-only by default"
        );
        let file = d.path().join("f");
        std::fs::write(&file, "").unwrap();
        for (bad, what) in [
            ("/nonexistent-atoll:/w".to_string(), "`/nonexistent-atoll` does not exist"),
            ("/nonexistent-atoll:/w".to_string(), "mkdir -p /nonexistent-atoll"),
            (format!("{}:/w", file.display()), "not a folder"),
            (format!("{}:work", d.path().display()), "relative"),
            (format!("{}:/", d.path().display()), "root"),
            (format!("{}:/a/../etc", d.path().display()), "`..`"),
            (format!("{}:/proc/x", d.path().display()), "/proc"),
            (format!("{}:/a b", d.path().display()), "printable"),
            ("/tmp".to_string(), "HOSTDIR:GUESTDIR"),
        ] {
            let e = parse_mount(&bad).unwrap_err().to_string();
            assert!(e.contains(what), "{bad}: {e}");
        }
    }

    #[test]
    fn links_in_a_read_write_share_are_refused_before_they_are_followed() {
        use std::os::unix::fs::{MetadataExt, symlink};
        let d = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(d.path()).unwrap();
        let (share, other) = (top.join("share"), top.join("other"));
        std::fs::create_dir_all(share.join("sub")).unwrap();
        std::fs::create_dir(&other).unwrap();
        symlink("/", share.join("sub/out")).unwrap();
        symlink("/\x1b[2Jx", share.join("esc")).unwrap();
        symlink(&share, top.join("proj")).unwrap();
        let meta = std::fs::metadata(&share).unwrap();
        let wall = |path: &Path| Wall {
            path: path.into(),
            id: Some((meta.dev(), meta.ino())),
            whose: "sandbox `web` shares read-write".into(),
            who: "its guest",
        };
        let asked = top.join("proj/sub/out/etc");
        let e = canonical_dir_among(&asked, || vec![wall(&share)]).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "`{}` goes through a link (`{}` -> `/`) inside `{}`, which sandbox `web` shares read-write: its guest could have put it there; give the folder's real path (`realpath`), from a folder no sandbox can write",
                asked.display(),
                share.join("sub/out").display(),
                share.display()
            )
        );
        // Known by device and inode alone (the share reached under another name).
        let e = canonical_dir_among(&share.join("sub/out"), || vec![wall(Path::new("/elsewhere"))]);
        assert!(matches!(e, Err(MountError::LinkInShare(_))), "{e:?}");
        // A guest's bytes are escaped in the message.
        let e = canonical_dir_among(&share.join("esc"), || vec![wall(&share)]).unwrap_err().to_string();
        assert!(e.contains("-> `/\\x1b[2Jx`") && !e.contains('\x1b'), "{e}");
        // The user's own link outside the share is followed; with no link, no walls are read.
        assert_eq!(canonical_dir_among(&top.join("proj"), || vec![wall(&share)]).unwrap(), share);
        let never = || -> Vec<Wall> { panic!("walls read with no link in the path") };
        assert_eq!(canonical_dir_among(&share.join("sub"), never).unwrap(), share.join("sub"));
        // No wall: followed as before.
        assert_eq!(canonical_dir_among(&share.join("sub/out"), Vec::new).unwrap(), PathBuf::from("/"));
        assert!(canonical_dir_among(&other, || vec![wall(&share)]).is_ok());
    }

    #[test]
    fn folders_holding_or_inside_the_state_directory_and_read_write_ones_near_the_data_directory_are_refused()
    {
        let d = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(d.path()).unwrap();
        let (state, data, other) =
            (top.join("home/.local/state/atoll"), top.join("home/.local/share/atoll"), top.join("proj"));
        for dir in [state.join(".secrets"), state.join("0123abcd"), data.join("templates"), other.clone()] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let err =
            |host: &Path, data: Option<&Path>| refuse_near(host, &state, data).map_err(|e| e.to_string());
        // Holding it (as before), and now inside it: the secrets store, a sandbox's directory.
        assert!(err(&top.join("home"), None).unwrap_err().contains("holds atoll's state directory"));
        for inside in [state.join(".secrets"), state.join("0123abcd")] {
            let e = err(&inside, None).unwrap_err();
            assert!(e.contains("is inside atoll's state directory") && e.contains("secrets store"), "{e}");
        }
        // Read-write near the data directory (the kernel and templates of later sandboxes).
        for near in [top.join("home/.local/share"), data.clone(), data.join("templates")] {
            let e = err(&near, Some(&data)).unwrap_err();
            assert!(e.contains("data directory") && e.contains(":ro"), "{e}");
        }
        assert!(err(&other, Some(&data)).is_ok() && err(&data, None).is_ok());
        // A state directory not made yet is known by the name it will have.
        let later = top.join("home/.local/state/none-yet/atoll");
        assert!(refuse_near(&top.join("home/.local/state"), &later, None).is_err());
        // A prefix of the name that is not a folder above it holds nothing.
        std::fs::create_dir_all(top.join("home/.local/state/atol")).unwrap();
        assert!(err(&top.join("home/.local/state/atol"), None).is_ok());
    }

    #[test]
    fn the_state_directory_reached_through_a_bind_mount_is_refused_too() {
        // Needs root (mount --bind); skipped, saying so, as an ordinary user.
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root for a bind mount");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(d.path()).unwrap();
        let (state, alias) = (top.join("home/.local/state/atoll"), top.join("alias"));
        std::fs::create_dir_all(state.join(".secrets")).unwrap();
        std::fs::create_dir(&alias).unwrap();
        let ok = std::process::Command::new("mount").arg("--bind").arg(top.join("home")).arg(&alias).status();
        assert!(ok.unwrap().success());
        let holds = refuse_near(&alias, &state, None).map_err(|e| e.to_string());
        let inside =
            refuse_near(&alias.join(".local/state/atoll/.secrets"), &state, None).map_err(|e| e.to_string());
        let _ = std::process::Command::new("umount").arg(&alias).status();
        assert!(holds.unwrap_err().contains("holds atoll's state directory"));
        assert!(inside.unwrap_err().contains("is inside atoll's state directory"));
    }

    #[test]
    fn a_stopped_sandboxs_read_write_share_is_still_a_wall() {
        use crate::vmm::process::ProcRef;
        use crate::vmm::state::{Allocation, Paths, Record};
        let d = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(d.path()).unwrap();
        let (state, share) = (top.join("state"), top.join("share"));
        std::fs::create_dir_all(state.join("abc123")).unwrap();
        std::fs::create_dir(&share).unwrap();
        std::os::unix::fs::symlink("/", share.join("out")).unwrap();
        let dir = state.join("abc123");
        let alloc = Allocation { id: "abc123".into(), name: "web".into(), dir: dir.clone() };
        let mut record =
            Record::starting(alloc, "minimal".into(), 256, 1, "tcg".into(), Paths::in_dir(&dir, false));
        record.storage.mounts = vec![Mount { host: share.clone(), guest: "/w".into(), read_only: false }];
        // Its QEMU ended (or its helper wrote so in its record).
        let mut gone = std::process::Command::new("sleep").arg("10").spawn().unwrap();
        record.qemu = ProcRef::of(gone.id());
        gone.kill().unwrap();
        gone.wait().unwrap();
        assert!(record.qemu.is_some_and(|p| !p.is_alive()));
        record.save().unwrap();
        let e = canonical_dir_among(&share.join("out/etc"), || walls_in(&state)).unwrap_err().to_string();
        assert!(e.contains("sandbox `web` shares read-write"), "{e}");
    }

    #[test]
    fn one_folder_per_guest_path() {
        // Not `/`: it holds the state directory whenever that exists under $HOME.
        let d = tempfile::tempdir().unwrap();
        let host = std::fs::canonicalize(d.path()).unwrap();
        let m = |g: &str| Mount { host: host.clone(), guest: g.into(), read_only: false };
        assert!(check(&[m("/a"), m("/a/b")]).is_ok());
        assert!(check(&[m("/a"), m("/a")]).unwrap_err().to_string().contains("`/a`"));
        assert!(check(&vec![m("/x"); 9]).is_err());
        let odd = Mount { host: "/tmp/../tmp".into(), guest: "/a".into(), read_only: false };
        assert!(check(&[odd]).unwrap_err().to_string().contains("not canonical"));
    }

    #[test]
    fn disk_sizes() {
        assert_eq!(parse_disk("8G").unwrap(), 8 << 30);
        assert_eq!(parse_disk("512M").unwrap(), 512 << 20);
        assert_eq!(parse_disk("2GiB").unwrap(), 2 << 30);
        for bad in ["0", "0G", "10X", "G", "8", "1K", "17T", "", "1.5G", "99999999999T"] {
            assert!(parse_disk(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mcp_mounts_stay_under_allowed_folders() {
        let allowed = vec![PathBuf::from("/home/u/proj")];
        assert!(check_allowed(Path::new("/home/u/proj"), &allowed, true).is_ok());
        assert!(check_allowed(Path::new("/home/u/proj/sub"), &allowed, true).is_ok());
        let e = check_allowed(Path::new("/home/u/projects"), &allowed, true).unwrap_err().to_string();
        assert!(e.contains("/home/u/proj`"), "{e}");
        assert!(
            check_allowed(Path::new("/etc"), &[], true).unwrap_err().to_string().contains("--allow-mount")
        );
        let e = check_allowed(Path::new("/"), &[], false).unwrap_err().to_string();
        assert!(e.contains("only the operator") && e.contains("--allow-mount"), "{e}");
    }
}
