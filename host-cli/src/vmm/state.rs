//! The on-disk record of each sandbox: `<state>/<id>/sandbox.json`, plus the lock that
//! keeps two `atoll create` from taking the same id or name.

use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::process::ProcRef;
use super::template::is_plain_name;

/// File name of the record inside a sandbox directory.
pub const RECORD_FILE: &str = "sandbox.json";
/// The subdirectory of a sandbox directory that its jailed QEMU sees ([`Paths::vm`]).
pub const VM_DIR: &str = "vm";
/// The subdirectory of `vm/` that QEMU shares with the network helper ([`wire_dir`]).
pub const WIRE_DIR: &str = "wire";

/// `<dir>/vm/wire`: the sockets between QEMU and the sandbox's network helper (the
/// NIC's `net.sock` and the console's `tty.sock`, which atoll binds for the helper
/// (`jail::wire`), and the agent port `agent.port`, which
/// QEMU makes), and nothing else. It is all of `vm/` the helper's view holds (with the
/// console log it bounds): QEMU's control socket, its disk and its RAM stay out of the
/// helper's sight, even when both run as the same user.
pub fn wire_dir(dir: &Path) -> PathBuf {
    dir.join(VM_DIR).join(WIRE_DIR)
}

/// Makes `<dir>/vm/wire` (`0700`) if it is missing (a sandbox parked by an atoll older
/// than the directory is started again), refusing anything but a directory there.
pub fn ensure_wire_dir(dir: &Path) -> std::io::Result<PathBuf> {
    let wire = wire_dir(dir);
    match std::fs::DirBuilder::new().mode(0o700).create(&wire) {
        Ok(()) => std::fs::set_permissions(&wire, std::fs::Permissions::from_mode(0o700))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if !std::fs::symlink_metadata(&wire)?.is_dir() {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a directory"));
            }
        }
        Err(e) => return Err(e),
    }
    Ok(wire)
}

/// Makes `<dir>/vm/wire` anew, empty ([`ensure_wire_dir`]): whatever was there is
/// removed, never followed (a link there, or in it, is removed itself). Nothing in it
/// outlives the sandbox's QEMU and helper (its sockets are bound anew, QEMU makes
/// its port), and what the last ones left can be anything either could make: a link, a
/// FIFO, a directory in a socket's place, which would keep the next helper or QEMU from
/// binding there, and so a parked sandbox from coming back. Only while neither runs
/// (before the helper, which starts first).
pub fn renew_wire_dir(dir: &Path) -> std::io::Result<PathBuf> {
    let wire = wire_dir(dir);
    match std::fs::symlink_metadata(&wire) {
        Ok(m) if m.is_dir() => super::safe_fs::remove_tree(&wire)?,
        Ok(_) => std::fs::remove_file(&wire)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    ensure_wire_dir(dir)
}

/// Why the state directory could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The lock file could not be taken.
    #[error("could not lock the atoll state directory {}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A record could not be written.
    #[error("could not write {}; check free space and permissions", path.display())]
    Write {
        /// The record.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The sandbox directory could not be created.
    #[error("could not create the sandbox directory {}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A name that is not a plain name.
    #[error("`{0}` is not a valid sandbox name; use up to 64 letters, digits, `-`, `_` and `.`")]
    BadName(String),
    /// The name is taken.
    #[error("a sandbox named `{0}` already exists; pick another name or remove it with `atoll kill {0}`")]
    NameTaken(String),
    /// Neither an id nor a name of a sandbox.
    #[error("no sandbox is called `{0}`; `atoll ls` lists them")]
    NotFound(String),
    /// An id prefix that begins the ids of several sandboxes.
    #[error("`{given}` begins the ids of several sandboxes ({}); pass more of the id, or the name", matches.join(", "))]
    Ambiguous {
        /// The prefix given.
        given: String,
        /// Each match, as `name (id)`.
        matches: Vec<String>,
    },
    /// The Unix socket paths would be too long.
    #[error(
        "the sandbox directory {} is too long for Unix socket paths ({len} bytes, at most {max}); set $ATOLL_STATE_DIR to a shorter directory",
        path.display()
    )]
    PathTooLong {
        /// The directory.
        path: PathBuf,
        /// Length of the longest socket path.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// Where a sandbox's files are.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Paths {
    /// The sandbox directory (atoll's alone: records, logs, tokens).
    pub dir: PathBuf,
    /// `<dir>/vm`, all of the sandbox directory its jailed QEMU sees: what QEMU itself
    /// makes and uses (QMP and agent sockets, console, disk overlay, the NIC's socket,
    /// a restore's private copy of guest RAM).
    #[serde(default)]
    pub vm: PathBuf,
    /// QEMU's QMP socket.
    pub qmp_socket: PathBuf,
    /// The guest's serial console.
    pub console_log: PathBuf,
    /// QEMU's own messages.
    pub qemu_log: PathBuf,
    /// The copy-on-write overlay of the template's root filesystem, if it has one.
    pub overlay: Option<PathBuf>,
}

impl Paths {
    /// The layout of the sandbox directory `dir`.
    pub fn in_dir(dir: &Path, with_overlay: bool) -> Paths {
        let vm = dir.join(VM_DIR);
        Paths {
            dir: dir.to_path_buf(),
            qmp_socket: vm.join("qmp.sock"),
            console_log: vm.join("console.log"),
            qemu_log: dir.join("qemu.log"),
            overlay: with_overlay.then(|| vm.join("rootfs.qcow2")),
            vm,
        }
    }

    /// The private copy of a snapshot's guest RAM a restore's QEMU maps (QEMU 7.2 opens
    /// the file read-write, so it never gets the snapshot's own); its name is removed
    /// once QEMU has it open.
    pub fn private_ram(&self) -> PathBuf {
        self.vm.join("ram.bin")
    }

    /// Where a parked sandbox's snapshot is.
    pub fn parked(&self) -> PathBuf {
        self.dir.join("parked")
    }
}

/// Everything recorded about one sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// Short hex id.
    pub id: String,
    /// Unique name.
    pub name: String,
    /// The template it booted from.
    pub template: String,
    /// Guest memory.
    pub memory_mib: u32,
    /// Guest vCPUs.
    pub cpus: u32,
    /// `kvm` or `tcg`.
    pub accel: String,
    /// When it was created (Unix milliseconds).
    pub created_unix_ms: i64,
    /// QEMU, once started.
    pub qemu: Option<ProcRef>,
    /// The vhost-device-vsock of a sandbox started by an atoll from before the agent link
    /// (new sandboxes have none); stopped with the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vhost: Option<ProcRef>,
    /// `atoll net-helper` (published ports, the network), once started.
    #[serde(default)]
    pub net_helper: Option<ProcRef>,
    /// The helper's `atoll secret-runner`, stopped with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_runner: Option<ProcRef>,
    /// The `atoll create` process booting it; a sandbox never announced whose creator is
    /// gone will never become ready.
    #[serde(default)]
    pub creator: Option<ProcRef>,
    /// True once the agent announced itself.
    pub ready: bool,
    /// The agent version from its `READY` line.
    pub agent_version: Option<String>,
    /// Set by `atoll pause`, cleared by `atoll resume`.
    pub paused: bool,
    /// Set by `atoll pause --to-disk`: QEMU is gone and the VM
    /// waits in `<dir>/parked/` (see [`Paths::parked`]).
    #[serde(default)]
    pub parked: bool,
    /// Host folders and disk size it was created with.
    #[serde(default)]
    pub storage: super::storage::Storage,
    /// The disk quota's count for it before its disk exists (the disk's full size, as
    /// asked when the create or fork was checked under the state lock): a disk made
    /// after the lock is let go must not count as nothing meanwhile.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub disk_reserved: u64,
    /// The disk quota's count for the private copy of guest RAM its QEMU maps when it
    /// was started from a snapshot ([`Paths::private_ram`], as stored: holes stay
    /// holes), 0 for a boot. The copy's name is removed once QEMU has it open, but its
    /// blocks stay taken while that QEMU lives, so it counts while the sandbox holds a
    /// VM.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ram_copy: u64,
    /// What its VM started from: `None` for a boot, else `snapshot <NAME>` (a fork) or
    /// `template snapshot` (a plain create that restored its template's snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_from: Option<String>,
    /// Which face created it: `None` for the CLI (the operator), else the MCP identity
    /// (`mcp:stdio`, or `mcp:http:HASH` for an HTTP client's token, never the token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// Its files.
    pub paths: Paths,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Record {
    /// The record of a sandbox this process is about to start in `alloc`: no process
    /// yet, not ready, created now, this process its creator. Storage and where it
    /// started from are set by struct update where they differ from the default.
    pub fn starting(
        alloc: Allocation,
        template: String,
        memory_mib: u32,
        cpus: u32,
        accel: String,
        paths: Paths,
    ) -> Record {
        Record {
            id: alloc.id,
            name: alloc.name,
            template,
            memory_mib,
            cpus,
            accel,
            created_unix_ms: super::now_unix_ms(),
            qemu: None,
            vhost: None,
            net_helper: None,
            secret_runner: None,
            creator: ProcRef::of(std::process::id()),
            ready: false,
            agent_version: None,
            paused: false,
            parked: false,
            storage: Default::default(),
            disk_reserved: 0,
            ram_copy: 0,
            started_from: None,
            created_by: None,
            paths,
        }
    }

    /// True when its `atoll create` died before the agent announced itself: nobody will
    /// finish this boot.
    pub fn is_abandoned(&self) -> bool {
        !self.ready && !self.creator.is_some_and(|p| p.is_alive())
    }

    /// Every host process the sandbox runs on.
    pub fn processes(&self) -> impl Iterator<Item = ProcRef> {
        [self.qemu, self.vhost, self.net_helper, self.secret_runner].into_iter().flatten()
    }

    /// Writes the record atomically (an exclusive temp file of a random name, then
    /// rename: [`super::safe_fs::write_atomic`]).
    pub fn save(&self) -> Result<(), StateError> {
        let path = self.paths.dir.join(RECORD_FILE);
        let json = serde_json::to_vec_pretty(self).expect("a record always serializes");
        super::safe_fs::write_atomic(&path, &json).map_err(|source| StateError::Write { path, source })
    }
}

/// An exclusive lock on the state directory, held while ids, names and CIDs are handed
/// out or records change; released when dropped.
pub struct StateLock {
    _file: Option<File>,
}

impl StateLock {
    /// Blocks until the lock on `<state>/.lock` is ours. A state directory that does not
    /// exist yet holds no sandbox, so there is nothing to lock: what follows finds no
    /// sandbox and says so (a create makes the directory before it locks).
    pub fn acquire(state: &Path) -> Result<StateLock, StateError> {
        if !state.exists() {
            return Ok(StateLock { _file: None });
        }
        let path = state.join(".lock");
        let err = |source| StateError::Lock { path: path.clone(), source };
        let file = File::options().create(true).truncate(false).write(true).open(&path).map_err(err)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| err(std::io::Error::from(e)))?;
        Ok(StateLock { _file: Some(file) })
    }

    /// [`StateLock::acquire`] for async code: the wait happens on a blocking thread, so a
    /// task of this process that holds the lock across an await (a save, a restore, an
    /// unpark) keeps running meanwhile. `atoll mcp` serves calls at once on one thread: a
    /// wait there would stop the holder, and with it every call, for good. Dropped while
    /// waiting, the lock is let go as soon as it is had.
    pub async fn lock(state: &Path) -> Result<StateLock, StateError> {
        let state = state.to_path_buf();
        tokio::task::spawn_blocking(move || StateLock::acquire(&state))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }
}

/// Every readable record under `state`, oldest first. Directories without a readable
/// record (a create that was killed before writing one) are returned as `Err(dir)`.
pub fn load_all(state: &Path) -> Vec<Result<Record, PathBuf>> {
    let mut out: Vec<Result<Record, PathBuf>> = std::fs::read_dir(state)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        // `.snapshots` and other dot directories are not sandboxes.
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| load_dir(&e.path()).ok_or(e.path()))
        .collect();
    out.sort_by_key(|r| r.as_ref().map(|r| r.created_unix_ms).unwrap_or(i64::MAX));
    out
}

/// The record in `dir`, with every path derived from `dir` itself: the paths written in
/// the file are never trusted (`kill` deletes the sandbox directory; one named by a
/// record could be anywhere), nor is a record whose id is not its directory's name,
/// nor one that is a link or is not owned by the effective user.
fn load_dir(dir: &Path) -> Option<Record> {
    let text = super::safe_fs::read_owned(&dir.join(RECORD_FILE)).ok()?;
    let mut record: Record = serde_json::from_slice(&text).ok()?;
    if dir.file_name()? != record.id.as_str() || !is_plain_name(&record.id) {
        return None;
    }
    record.paths = Paths::in_dir(dir, record.paths.overlay.is_some());
    Some(record)
}

/// What a name, id or id prefix names among some sandboxes (see [`lookup`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup<'a, T> {
    /// Exactly one: the sandbox with that id or name, else the only one whose id begins
    /// with it.
    One(&'a T),
    /// No id or name is it, and no id begins with it.
    None,
    /// No id or name is it, and several ids begin with it (each of them).
    Several(Vec<&'a T>),
}

/// Resolves `name_or_id` among `all` (`id_name` gives each one's id and name): an exact
/// id or name first (ids and names never collide: [`allocate`] keeps them apart), else
/// a prefix of exactly one id. The one place a name becomes a sandbox, for the CLI and
/// the MCP access check alike; callers act on the id it gives, never on the name again.
pub fn lookup<'a, T>(all: &'a [T], name_or_id: &str, id_name: impl Fn(&T) -> (&str, &str)) -> Lookup<'a, T> {
    if let Some(one) = all.iter().find(|r| {
        let (id, name) = id_name(r);
        id == name_or_id || name == name_or_id
    }) {
        return Lookup::One(one);
    }
    if name_or_id.is_empty() {
        return Lookup::None;
    }
    let mut prefixed: Vec<&T> = all.iter().filter(|r| id_name(r).0.starts_with(name_or_id)).collect();
    match prefixed.len() {
        0 => Lookup::None,
        1 => Lookup::One(prefixed.remove(0)),
        _ => Lookup::Several(prefixed),
    }
}

/// Finds a sandbox by exact id, exact name, or unique id prefix; a prefix of several ids
/// is refused naming them.
pub fn find(state: &Path, name_or_id: &str) -> Result<Record, StateError> {
    let all: Vec<Record> = load_all(state).into_iter().flatten().collect();
    match lookup(&all, name_or_id, |r| (r.id.as_str(), r.name.as_str())) {
        Lookup::One(r) => Ok(r.clone()),
        Lookup::None => Err(StateError::NotFound(name_or_id.to_string())),
        Lookup::Several(matches) => Err(StateError::Ambiguous {
            given: name_or_id.to_string(),
            matches: matches.iter().map(|r| format!("{} ({})", r.name, r.id)).collect(),
        }),
    }
}

/// What a new sandbox was given.
#[derive(Debug)]
pub struct Allocation {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its directory, now created (mode 0700).
    pub dir: PathBuf,
}

/// Hands out an id and a name (the one asked for, or a generated one), and creates
/// the directory. Call under
/// [`StateLock`].
pub fn allocate(state: &Path, wanted_name: Option<&str>) -> Result<Allocation, StateError> {
    let all: Vec<Record> = load_all(state).into_iter().flatten().collect();
    let taken_name = |n: &str| all.iter().any(|r| r.name == n || r.id == n);
    let name = match wanted_name {
        Some(n) if !is_plain_name(n) => return Err(StateError::BadName(n.into())),
        Some(n) if taken_name(n) => return Err(StateError::NameTaken(n.into())),
        Some(n) => Some(n.to_string()),
        None => None,
    };
    let id = loop {
        let id = format!("{:08x}", random_u32());
        if !taken_name(&id) && !state.join(&id).exists() {
            break id;
        }
    };
    let name = name.unwrap_or_else(|| generate_name(&id, |n| taken_name(n)));
    let dir = state.join(&id);
    check_socket_path_len(&dir)?;
    let vm = dir.join(VM_DIR);
    let made = std::fs::DirBuilder::new().mode(0o700).create(&dir).and_then(|()| {
        // Whatever the umask: a sandbox directory is the user's alone (the jail hands
        // `vm/` to QEMU's group when QEMU runs as another user).
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        std::fs::DirBuilder::new().mode(0o700).create(&vm)?;
        std::fs::set_permissions(&vm, std::fs::Permissions::from_mode(0o700))?;
        ensure_wire_dir(&dir).map(drop)
    });
    made.map_err(|source| StateError::CreateDir { path: dir.clone(), source })?;
    Ok(Allocation { id, name, dir })
}

/// Unix socket paths hold at most 107 bytes; the longest we bind are the temporary name
/// of the helper's NIC socket (`vm/wire/net.sock.new`), QEMU's `vm/wire/agent.port` and
/// the helper's `net/agent.sock`.
fn check_socket_path_len(dir: &Path) -> Result<(), StateError> {
    use crate::sandbox::network::{config, helper::bind_tmp_path};
    const MAX: usize = 107;
    let longest = [
        crate::vmm::agent_link::port_path(dir),
        config::agent_socket_path(dir),
        bind_tmp_path(&config::frames_path(dir)),
        bind_tmp_path(&config::ctl_path(dir)),
        bind_tmp_path(&config::console_socket_path(dir)),
        bind_tmp_path(&config::stderr_socket_path(dir)),
    ]
    .iter()
    .map(|p| p.as_os_str().len())
    .max()
    .unwrap_or(0);
    if longest > MAX {
        return Err(StateError::PathTooLong { path: dir.to_path_buf(), len: longest, max: MAX });
    }
    Ok(())
}

fn random_u32() -> u32 {
    use std::io::Read;
    let mut buf = [0u8; 4];
    match File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)) {
        Ok(()) => u32::from_le_bytes(buf),
        // No /dev/urandom: the clock and our pid are unique enough for an id that is
        // checked against existing ones anyway.
        Err(_) => {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            t.subsec_nanos() ^ std::process::id().rotate_left(16)
        }
    }
}

const ADJECTIVES: [&str; 16] = [
    "amber", "brisk", "calm", "deft", "eager", "fuzzy", "gentle", "happy", "icy", "jolly", "keen", "lucky",
    "mellow", "nimble", "quiet", "rapid",
];
const NOUNS: [&str; 16] = [
    "otter", "falcon", "badger", "heron", "lynx", "marten", "newt", "oriole", "panda", "quail", "raven",
    "seal", "tapir", "urchin", "vole", "wren",
];

/// A readable name such as `brisk-otter`, or `<words>-<id>` once those run out.
fn generate_name(id: &str, taken: impl Fn(&str) -> bool) -> String {
    let r = random_u32() as usize;
    for i in 0..ADJECTIVES.len() * NOUNS.len() {
        let k = (r + i * 37) % (ADJECTIVES.len() * NOUNS.len());
        let name = format!("{}-{}", ADJECTIVES[k / NOUNS.len()], NOUNS[k % NOUNS.len()]);
        if !taken(&name) {
            return name;
        }
    }
    format!("atoll-{id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(dir: &Path, id: &str, name: &str) -> Record {
        let d = dir.join(id);
        std::fs::create_dir_all(&d).unwrap();
        let r = Record {
            id: id.into(),
            name: name.into(),
            template: "minimal".into(),
            memory_mib: 512,
            cpus: 1,
            accel: "tcg".into(),
            created_unix_ms: 1,
            qemu: ProcRef::of(std::process::id()),
            vhost: None,
            net_helper: None,
            secret_runner: None,
            creator: None,
            ready: true,
            agent_version: None,
            paused: false,
            parked: false,
            storage: Default::default(),
            disk_reserved: 0,
            ram_copy: 0,
            started_from: None,
            created_by: None,
            paths: Paths::in_dir(&d, false),
        };
        r.save().unwrap();
        r
    }

    #[test]
    fn allocation_avoids_taken_names() {
        let d = tempfile::tempdir().unwrap();
        record(d.path(), "aaaa0001", "first");
        let err = allocate(d.path(), Some("first")).unwrap_err();
        assert!(matches!(err, StateError::NameTaken(_)), "{err}");
        assert!(matches!(allocate(d.path(), Some("a/b")), Err(StateError::BadName(_))));
        let a = allocate(d.path(), None).unwrap();
        assert_ne!(a.name, "first");
        assert!(a.dir.is_dir());
    }

    #[test]
    fn finds_by_id_name_and_unique_prefix() {
        let d = tempfile::tempdir().unwrap();
        record(d.path(), "ab120000", "one");
        record(d.path(), "ab340000", "two");
        assert_eq!(find(d.path(), "two").unwrap().id, "ab340000");
        assert_eq!(find(d.path(), "ab12").unwrap().name, "one");
        let err = find(d.path(), "ab").unwrap_err();
        assert!(matches!(err, StateError::Ambiguous { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("one (ab120000)") && text.contains("two (ab340000)"), "{err}");
        assert!(text.contains("pass more of the id, or the name"), "{err}");
        assert!(matches!(find(d.path(), ""), Err(StateError::NotFound(_))), "an empty name names none");
        let err = find(d.path(), "zzz").unwrap_err().to_string();
        assert!(err.contains("atoll ls"), "{err}");
    }

    /// What the last helper or QEMU left in `vm/wire/` (a directory in a socket's place
    /// holding a link out, a FIFO; or a link in place of `wire/` itself) is removed, what
    /// the links name is kept, and `wire/` is an empty directory of its own again.
    #[test]
    fn wire_is_made_anew_without_following_what_was_planted() {
        use std::os::unix::fs::{MetadataExt, symlink};
        let d = tempfile::tempdir().unwrap();
        let (dir, outside) = (d.path().join("s"), d.path().join("outside"));
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("kept"), "kept").unwrap();
        std::fs::create_dir_all(dir.join(VM_DIR)).unwrap();
        let wire = ensure_wire_dir(&dir).unwrap();
        std::fs::create_dir(wire.join("net.sock")).unwrap();
        symlink(&outside, wire.join("net.sock/out")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            wire.join("agent.port"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        for round in 0..2 {
            let made = renew_wire_dir(&dir).unwrap();
            let meta = std::fs::symlink_metadata(&made).unwrap();
            assert!(meta.is_dir() && meta.mode() & 0o7777 == 0o700, "round {round}: {meta:?}");
            assert_eq!(std::fs::read_dir(&made).unwrap().count(), 0, "round {round}: not empty");
            assert_eq!(std::fs::read_to_string(outside.join("kept")).unwrap(), "kept", "followed");
            // Then a link in place of `wire/` itself.
            std::fs::remove_dir(&made).unwrap();
            symlink(&outside, &made).unwrap();
        }
    }

    #[test]
    fn refuses_socket_paths_that_are_too_long() {
        let long = PathBuf::from(format!("/tmp/{}", "x".repeat(100)));
        assert!(matches!(check_socket_path_len(&long), Err(StateError::PathTooLong { .. })));
        // atoll binds `vm/wire/net.sock` as `net.sock.new` first: 21 bytes past the
        // directory, so one of 87 bytes is refused (it failed later, in the helper), and
        // one of 86 fits.
        let dir = |len: usize| PathBuf::from(format!("/tmp/{}", "x".repeat(len - 5)));
        let err = check_socket_path_len(&dir(87)).unwrap_err();
        assert!(matches!(err, StateError::PathTooLong { len: 108, max: 107, .. }), "{err}");
        check_socket_path_len(&dir(86)).unwrap();
    }
}
