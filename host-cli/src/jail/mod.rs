//! One jail, one door: every process atoll starts for a sandbox (QEMU for a boot, a
//! template snapshot restore, a fork, an unpark, a snapshot restore; the network
//! helper) starts here, so no start path can forget a wall; and each door takes the
//! quotas' [`Admission`] for that start, which only the quota check under the state lock
//! makes ([`crate::sandbox::quota::check`]), so no start path can skip the quotas either
//! (it would not compile). Like Firecracker's jailer,
//! a small module with one job; docs/security.md says what each wall stops and what
//! it does not.
//!
//! - [`mod@env`]: the scrubbed environment (no host token or key reaches QEMU or the helper).
//! - [`namespaces`]: QEMU's view of the host, built by `bwrap`: its own mount, PID, IPC,
//!   UTS and network namespaces, no capabilities, and only the files it needs bound in
//!   (shared folders with what host tools run bound read-only over them).
//! - [`cgroup`]: a cgroup per sandbox (memory, pids, CPU weight), v2 or v1.
//! - [`user`]: who QEMU runs as (never root when atoll is: the shares' owner or the
//!   `atoll` system user), and the few files handed to it.
//! - [`helper`]: the network helper's view of the host, built by `bwrap` too: its own
//!   mount, PID, IPC and UTS namespaces (the host's network), no capabilities, no
//!   supplementary groups, only its own sandbox's files.
//! - [`seccomp`]: the deny-list filter the network helper installs on itself.
//! - [`wire`]: the sockets where QEMU meets the helper, bound by atoll before either
//!   starts, so both can start at once.
//! - [`held`]: a jailed QEMU held before it runs (bwrap's `--block-fd`), its namespaces
//!   and cgroup made while a restore's guest RAM is still being copied.
//! - [`share_path`]: a shared folder's path made canonical one component at a time,
//!   each link judged before it is followed (links a guest could have put there refused).
//!
//! QEMU also runs under its own seccomp filter ([`SECCOMP`]); saves and loads hand it
//! descriptors over QMP (`vmm::migrate`), so it never needs to spawn or open them.

pub mod cgroup;
pub mod env;
pub mod held;
pub mod helper;
pub mod namespaces;
pub mod seccomp;
pub mod share_path;
pub mod shares;
pub mod user;
pub mod wire;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::sandbox::quota::Admission;
use crate::vmm::launcher::{self, VmSpec};
use crate::vmm::process::{ProcRef, ProcessError, find_in_path};

/// QEMU's own seccomp filter: no obsolete calls, no set*id, no fork/exec, no
/// scheduler or CPU-affinity changes.
pub const SECCOMP: &str = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny";
/// The namespace tool.
pub const BWRAP: &str = "bwrap";
/// How long `bwrap` may take to say which pid QEMU has.
const INFO_WAIT: Duration = Duration::from_secs(10);

/// Why a jailed process could not be started.
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    /// A program is missing or would not start.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// The pipe bwrap reports QEMU's pid on could not be made.
    #[error("could not make a pipe for the jail; the process may be out of file descriptors")]
    Pipe(#[source] std::io::Error),
    /// bwrap did not say which pid QEMU has.
    #[error("the jail (bwrap) did not start QEMU: {why}; QEMU's log says: {log}")]
    NoPid {
        /// What happened.
        why: String,
        /// The end of QEMU's log (bwrap writes its own errors there too).
        log: String,
    },
    /// bwrap did not say which pid the network helper has.
    #[error("the jail (bwrap) did not start the network helper: {why}; its log says: {log}")]
    HelperNoPid {
        /// What happened.
        why: String,
        /// The end of the helper's log (bwrap writes its own errors there too).
        log: String,
    },
    /// QEMU's user could not be set up.
    #[error(transparent)]
    User(#[from] user::UserError),
    /// The sandbox's cgroup could not be made.
    #[error(transparent)]
    Cgroup(#[from] cgroup::CgroupError),
    /// A shared folder could not be opened safely.
    #[error(transparent)]
    Share(#[from] shares::ShareError),
    /// The network helper's socket for QEMU's stderr could not be reached.
    #[error("could not reach the network helper's socket {} for QEMU's log: {source}; is the helper running? (`atoll kill` the sandbox and start it again)", path.display())]
    Stderr {
        /// The socket.
        path: std::path::PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A socket where QEMU and the network helper meet could not be bound.
    #[error(transparent)]
    Listen(#[from] wire::WireError),
    /// `vm/wire/`, where QEMU and the network helper meet, could not be made.
    #[error("could not make {} (where QEMU and the network helper meet): {source}; remove what is there", path.display())]
    Wire {
        /// The directory.
        path: std::path::PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// Makes `vm/wire/` of the sandbox in `dir` with `make` (`state::ensure_wire_dir` or
/// `state::renew_wire_dir`), saying which directory failed.
fn make_wire(dir: &Path, make: fn(&Path) -> std::io::Result<std::path::PathBuf>) -> Result<(), JailError> {
    make(dir).map(drop).map_err(|source| JailError::Wire { path: crate::vmm::state::wire_dir(dir), source })
}

/// A jailed QEMU: the `bwrap` process that watches it (it ends when QEMU ends, with
/// QEMU's status), QEMU's own pid, which is what is signalled, paused and watched, and
/// atoll's end of their stderr.
#[derive(Debug)]
pub struct JailedQemu {
    /// The watching bwrap.
    pub child: tokio::process::Child,
    /// QEMU itself.
    pub qemu: ProcRef,
    /// Their stderr, to the network helper.
    pub log: QemuLog,
}

/// atoll's copy of the stream QEMU and its bwrap write their stdout and stderr to: the
/// network helper's `net/stderr.sock`, which it copies to `qemu.log`
/// (`sandbox::network::helper::console`). atoll keeps it while it starts QEMU, to read
/// QEMU's last words if the start fails ([`QemuLog::tail`]), and drops it after.
#[derive(Debug)]
pub struct QemuLog(Option<std::os::unix::net::UnixStream>);

/// How long atoll waits for the helper to write what an ended QEMU said.
const LOG_SETTLE: Duration = Duration::from_secs(2);

impl QemuLog {
    /// The last `lines` lines of `qemu.log` of a QEMU (and bwrap) that ended (or never
    /// started): the stream is shut for writing and the helper, which closes its end once
    /// it has written everything that came before, is waited for (at most
    /// 2 s), so that QEMU's last words are in the file.
    pub async fn tail(&mut self, path: &Path, lines: usize) -> String {
        if let Some(stream) = self.0.take() {
            let _ = tokio::task::spawn_blocking(move || settle(&stream)).await;
        }
        launcher::tail(path, lines)
    }
}

/// Shuts `stream` for writing and reads it until the other end closes it.
fn settle(mut stream: &std::os::unix::net::UnixStream) {
    use std::io::Read;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(LOG_SETTLE));
    let deadline = Instant::now() + LOG_SETTLE;
    let mut buf = [0u8; 256];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Starts QEMU for `spec` in its jail, detached (its own session; it outlives this
/// command), stdout and stderr a stream to the network helper, which writes them to the
/// sandbox's `qemu.log` ([`QemuLog`]). `restore`: QEMU waits stopped for a saved state
/// (`-incoming defer`). `admitted`: the quotas let this start go ahead
/// ([`crate::sandbox::quota::check`]); a start path cannot reach QEMU without it, and
/// it is used up: one check, one QEMU.
pub async fn start_qemu(
    admitted: Admission,
    spec: &VmSpec<'_>,
    restore: bool,
) -> Result<JailedQemu, JailError> {
    hold_qemu(admitted, spec, restore).await?.release()
}

/// [`start_qemu`] up to QEMU's own start: bwrap has made its namespaces and mounts, it
/// is in the sandbox's cgroup, and it waits to run QEMU until [`held::HeldQemu::release`]
/// (which first hands a restore's guest RAM, made meanwhile, to QEMU's user); dropped
/// unreleased, it is killed before QEMU runs.
pub async fn hold_qemu(
    _admitted: Admission,
    spec: &VmSpec<'_>,
    restore: bool,
) -> Result<held::HeldQemu, JailError> {
    let qemu = find_in_path(launcher::QEMU)?;
    let bwrap = find_in_path(BWRAP)?;
    let mut qemu_args = launcher::qemu_args(spec);
    qemu_args.extend(["-sandbox".into(), SECCOMP.into()]);
    if restore {
        qemu_args = crate::vmm::migrate::restore_args(qemu_args);
    }
    // The shares first: a folder that cannot be opened safely leaves nothing made.
    make_wire(&spec.paths.dir, crate::vmm::state::ensure_wire_dir)?;
    let binds = namespaces::binds(spec);
    let inner: Vec<&Path> = binds
        .iter()
        .map(|b| b.path.as_path())
        .filter(|p| spec.storage.mounts.iter().any(|m| p.starts_with(&m.host) && *p != m.host))
        .collect();
    let root = rustix::process::geteuid().is_root();
    let opened = shares::open(spec.storage, &inner, root)?;
    let run_as = user::for_qemu(spec.storage, |p| shares::owner(&opened, p))?;
    let group = cgroup::Cgroup::prepare(spec.id, spec.memory_mib, spec.cpus)?;
    let (info_read, info_write) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| JailError::Pipe(e.into()))?;
    let (block_read, block_write) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| JailError::Pipe(e.into()))?;
    if let Some(run_as) = run_as {
        grant_files(spec, run_as)?;
    }
    clear_agent_port(&crate::vmm::agent_link::port_path(&spec.paths.dir));
    let mut args =
        namespaces::bwrap_args(spec, info_write.as_raw_fd(), block_read.as_raw_fd(), run_as, &opened);
    args.push(qemu.display().to_string());
    args.extend(qemu_args);
    let procs = group.as_ref().map(cgroup::Cgroup::procs_files).transpose()?.unwrap_or_default();
    let log = &spec.paths.qemu_log;
    let mut keep = opened.raw_fds();
    keep.extend([info_write.as_raw_fd(), block_read.as_raw_fd()]);
    let attach = shares::Attach::prepare(&opened, spec.storage, &spec.paths.dir)?;
    let stderr_socket = crate::sandbox::network::config::stderr_socket_path(&spec.paths.dir);
    let stderr = crate::vmm::safe_fs::connect_unix_blocking(&stderr_socket)
        .map_err(|source| JailError::Stderr { path: stderr_socket, source })?;
    let stderr_fd = OwnedFd::from(stderr.try_clone().map_err(JailError::Pipe)?);
    let mut qemu_log = QemuLog(Some(stderr));
    let child =
        spawn(&bwrap, &args, stderr_fd.as_fd(), env::qemu(), &keep, attach.clone(), procs).map_err(|e| {
            match e {
                JailError::Process(ProcessError::Spawn { program, source }) => {
                    match attach.share_error(&source) {
                        Some(share) => share.into(),
                        None => ProcessError::Spawn { program, source }.into(),
                    }
                }
                e => e,
            }
        })?;
    drop(stderr_fd);
    drop(info_write);
    drop(block_read);
    drop(opened);
    let pid = tokio::task::spawn_blocking(move || read_child_pid(info_read))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    let pid = match pid {
        Ok(pid) => pid,
        Err(why) => return Err(JailError::NoPid { why, log: qemu_log.tail(log, 5).await }),
    };
    let Some(qemu) = ProcRef::of(pid) else {
        let why = format!("QEMU (pid {pid}) ended at once");
        return Err(JailError::NoPid { why, log: qemu_log.tail(log, 5).await });
    };
    if let Some(owner) = user::for_helper()? {
        tokio::spawn(own_agent_port(crate::vmm::agent_link::port_path(&spec.paths.dir), owner));
    }
    let ram = match (spec.ram, run_as) {
        (launcher::GuestRam::Snapshot(ram), Some(r)) => Some((ram.to_path_buf(), r)),
        _ => None,
    };
    Ok(held::HeldQemu::new(JailedQemu { child, qemu, log: qemu_log }, block_write, ram))
}

/// Removes whatever is where QEMU is to make its agent port, before it starts. A port an
/// earlier QEMU of this sandbox made was handed to the helper's user ([`own_agent_port`]),
/// and a helper taken over by its guest may have put a link, a FIFO or a directory in
/// its place: in the sticky `wire/` (atoll root) the new QEMU could remove none of them
/// (nor a directory, as any user), would fail to start and the sandbox, parked, would
/// never come back. Nothing there is followed: `unlink` removes a link itself, and
/// `remove_dir_all` neither follows a link inside.
fn clear_agent_port(port: &Path) {
    let removed = match std::fs::symlink_metadata(port) {
        Err(_) => return,
        Ok(m) if m.is_dir() => crate::vmm::safe_fs::remove_tree(port),
        Ok(_) => std::fs::remove_file(port),
    };
    if let Err(e) = removed {
        tracing::warn!("could not remove {} before QEMU makes its agent port there: {e}", port.display());
    }
}

/// How long QEMU may take to make its agent port (under TCG, on a busy host).
const AGENT_PORT_WAIT: Duration = Duration::from_secs(60);

/// When atoll is root, the network helper runs as the `atoll` user (`owner`), so it can
/// connect only to sockets that user may write; QEMU (maybe another user) makes
/// `vm/wire/agent.port` with its own umask. Once it exists, it is handed to the helper's
/// user, 0600: the helper connects, and QEMU, which listens on it, needs no access to
/// the file. A link in its place is refused, never followed.
async fn own_agent_port(port: std::path::PathBuf, owner: (u32, u32)) {
    let deadline = Instant::now() + AGENT_PORT_WAIT;
    loop {
        match own_socket(&port, owner) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => {
                tracing::warn!("could not hand {} to the network helper: {e}", port.display());
                return;
            }
        }
    }
}

/// Makes the socket `path` `owner`'s (uid, gid), 0600 (a link or any other file is
/// refused, and so is a socket with another name: the helper can make names in `vm/`,
/// and a hard link there to a socket of QEMU's other user, where the kernel allows one
/// (`fs.protected_hardlinks` off), would hand it that socket).
fn own_socket(path: &Path, owner: (u32, u32)) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Socket {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a socket"));
    }
    if st.st_nlink != 1 {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "a socket with another name"));
    }
    let (uid, gid) = (rustix::fs::Uid::from_raw(owner.0), rustix::fs::Gid::from_raw(owner.1));
    rustix::fs::chownat(&fd, "", Some(uid), Some(gid), AtFlags::EMPTY_PATH)?;
    // chmod through the descriptor's /proc link acts on what it names (not a link).
    rustix::fs::chmod(format!("/proc/self/fd/{}", fd.as_raw_fd()), Mode::from_raw_mode(0o600))?;
    Ok(())
}

/// The `bwrap` watching a jailed QEMU (its parent, which ends once QEMU has), while
/// both run: whoever ends QEMU waits for it too, so nothing of the sandbox is left.
pub fn monitor_of(qemu: &ProcRef) -> Option<ProcRef> {
    if !qemu.is_alive() {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", qemu.pid)).ok()?;
    // Field 4 (ppid) comes after the command name, which is in parentheses.
    let ppid: u32 = stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()?;
    let comm = std::fs::read_to_string(format!("/proc/{ppid}/comm")).ok()?;
    if comm.trim() == BWRAP { ProcRef::of(ppid) } else { None }
}

/// Waits for the watcher of a QEMU that was just ended to follow it, and kills it if
/// it does not (it was stopped, say).
pub async fn end_monitor(monitor: Option<ProcRef>) {
    let Some(m) = monitor else { return };
    // It follows within a few milliseconds; `kill` waits for it, so poll finely.
    let deadline = Instant::now() + Duration::from_secs(2);
    while m.is_alive() {
        if Instant::now() >= deadline {
            m.kill().await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Hands QEMU's user what it opens itself: its `vm/` directory and `vm/wire/` (to make
/// its sockets in), the disk overlay and the helper's sockets it connects to (the NIC's,
/// the console's), none of them followed if a link stands in its place (a restore's
/// private copy of guest RAM, made while QEMU is held, at [`held::HeldQemu::release`]).
/// Not the console log: the helper writes it.
fn grant_files(spec: &VmSpec<'_>, run_as: user::RunAs) -> Result<(), JailError> {
    let p = spec.paths;
    user::grant(&p.vm, run_as, 0o1770)?;
    user::grant(&crate::vmm::state::wire_dir(&p.dir), run_as, 0o1770)?;
    let mut files = vec![crate::sandbox::network::config::console_socket_path(&p.dir)];
    files.extend(p.overlay.iter().filter(|o| o.exists()).cloned());
    if spec.network {
        files.push(crate::sandbox::network::config::frames_path(&p.dir));
    }
    for f in files {
        user::grant(&f, run_as, 0o660)?;
    }
    Ok(())
}

/// Makes the sockets QEMU made (QMP, the agent link's port, the desktop's VNC) 0600 once they
/// exist (QEMU makes them with its own umask): only their owner, and root, connect.
/// A socket that is missing or replaced by a link is left alone (and never followed).
pub fn restrict_sockets(paths: &crate::vmm::state::Paths) {
    for socket in [
        paths.qmp_socket.clone(),
        crate::vmm::agent_link::port_path(&paths.dir),
        paths.vm.join(crate::desktop::view::VNC_SOCKET),
    ] {
        if let Err(e) = crate::vmm::safe_fs::set_mode(&socket, 0o600) {
            tracing::debug!("could not make {} 0600: {e}", socket.display());
        }
    }
}

/// A jailed network helper: the `bwrap` process that watches it (it ends when the
/// helper ends, with its status), and the helper's own pid, which the sandbox records
/// and `atoll kill` signals.
#[derive(Debug)]
pub struct JailedHelper {
    /// The watching bwrap.
    pub child: tokio::process::Child,
    /// The helper itself.
    pub helper: ProcRef,
    /// Its secrets runner (outside the jail), which the sandbox records beside the
    /// helper so that whoever stops the helper also sees the runner gone.
    pub runner: Option<ProcRef>,
}

impl JailedHelper {
    /// The helper's pid.
    pub fn id(&self) -> Option<u32> {
        Some(self.helper.pid)
    }

    /// Waits until the helper has ended (and its watcher with it).
    pub async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.child.wait().await
    }

    /// The helper's status if it has ended.
    pub fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait()
    }
}

/// Starts the network helper (`exe args`) of the sandbox in `dir` in its jail
/// ([`helper`]), detached, with the scrubbed environment, stdout and stderr appended
/// to `log` (in its own directory, `net/`), in its own cgroup. When atoll is root, the
/// helper runs as the `atoll` system user, without supplementary groups or
/// capabilities ([`helper::bwrap_args`]), and is handed what it needs
/// (`hand_to_helper`). The sockets QEMU connects to (the NIC's with `network`) are
/// bound and listening when this returns ([`wire`]): QEMU may start at once.
/// `_admitted`, as for [`start_qemu`]: the helper is part of the start the quotas let
/// go ahead (lent, not used up: its QEMU's door takes it next).
pub fn start_helper(
    _admitted: &Admission,
    exe: &Path,
    args: &[String],
    dir: &Path,
    log: &Path,
    network: bool,
) -> Result<JailedHelper, JailError> {
    let bwrap = find_in_path(BWRAP)?;
    let owner = user::for_helper()?;
    // What is bound writable into the helper's view must exist: `vm/wire/` (made anew:
    // the helper starts before QEMU, and nothing the last ones left there is kept) and
    // the two logs it writes.
    let paths = crate::vmm::state::Paths::in_dir(dir, false);
    make_wire(dir, crate::vmm::state::renew_wire_dir)?;
    for log in [&paths.qemu_log, &paths.console_log] {
        crate::vmm::safe_fs::open_append(log)
            .map_err(|source| ProcessError::Log { path: log.clone(), source })?;
    }
    let id = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let secrets = helper::secrets(dir);
    if let Some(owner) = owner {
        hand_to_helper(dir, secrets.as_ref(), owner)?;
    }
    let log_file = helper::open_log(log, owner)
        .map_err(|source| ProcessError::Log { path: log.to_path_buf(), source })?;
    // Dropped once the helper has inherited them: then only it listens.
    let listeners = wire::Listeners::bind(dir, network, owner)?;
    let group = cgroup::Cgroup::prepare_helper(&id)?;
    let procs = group.as_ref().map(cgroup::Cgroup::procs_files).transpose()?.unwrap_or_default();
    let (info_read, info_write) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| JailError::Pipe(e.into()))?;
    let ca_fd = helper::ca_copy().map_err(JailError::Pipe)?;
    let ca = ca_fd.as_ref().map(AsRawFd::as_raw_fd);
    let mut bwrap_args = helper::bwrap_args(exe, dir, secrets.as_ref(), ca, info_write.as_raw_fd(), owner);
    bwrap_args.push(exe.display().to_string());
    bwrap_args.extend(args.iter().cloned());
    bwrap_args.extend(listeners.helper_args());
    // `--from-command` secrets are run outside the jail by a runner of their own
    // (secrets::runner), which ends when the helper's end of the pair closes.
    let (helper_end, runner_end) = crate::secrets::runner::pair().map_err(JailError::Pipe)?;
    let runner_args =
        ["secret-runner", "--dir", &dir.display().to_string(), "--fd", &runner_end.as_raw_fd().to_string()]
            .map(String::from);
    // Dropped unwaited: tokio reaps it when it exits. It stays atoll's user, unjailed.
    let runner = spawn(
        exe,
        &runner_args,
        log_file.as_fd(),
        env::helper(),
        &[runner_end.as_raw_fd()],
        shares::Attach::default(),
        Vec::new(),
    )?;
    drop(runner_end);
    let runner = runner.id().and_then(ProcRef::of);
    bwrap_args.extend(["--runner-fd".to_owned(), helper_end.as_raw_fd().to_string()]);
    let mut keep = vec![info_write.as_raw_fd(), helper_end.as_raw_fd()];
    keep.extend(ca);
    keep.extend(listeners.raw_fds());
    // A helper that does not start takes its runner (and its bwrap) with it, so a
    // failed start leaves no process behind for the caller to find.
    let give_up = |e: JailError, child: Option<&mut tokio::process::Child>| {
        if let Some(c) = child {
            let _ = c.start_kill();
        }
        if let Some(r) = runner {
            r.kill_now();
        }
        e
    };
    let mut child =
        spawn(&bwrap, &bwrap_args, log_file.as_fd(), env::helper(), &keep, shares::Attach::default(), procs)
            .map_err(|e| give_up(e, None))?;
    drop(info_write);
    drop(helper_end);
    drop(ca_fd);
    drop(listeners);
    // bwrap reports within milliseconds; the callers start the helper synchronously.
    let pid = read_child_pid(info_read).map_err(|why| {
        give_up(JailError::HelperNoPid { why, log: launcher::tail(log, 5) }, Some(&mut child))
    })?;
    let Some(helper) = ProcRef::of(pid) else {
        let why = format!("the network helper (pid {pid}) ended at once");
        return Err(give_up(JailError::HelperNoPid { why, log: launcher::tail(log, 5) }, Some(&mut child)));
    };
    Ok(JailedHelper { child, helper, runner })
}

/// Hands the helper's user `owner` (atoll being root) what the helper opens itself, and
/// nothing more: `vm/wire/` (`root:atoll`, sticky `1770`, as for QEMU: it binds the
/// NIC's socket there and cannot replace what is not its own), the logs it writes
/// (`qemu.log`, `vm/console.log`: its own, `0600`, so QEMU's user, in the same group,
/// cannot write them), its own `net/` and its private directory in the secrets store
/// (its user's, `0700`). The sandbox directory stays root's `0700` (set again here:
/// atoll once made it `0710` for the `atoll` group): bwrap, still root, binds what the
/// helper needs into its view, and QEMU's, on directories of those views, so neither
/// passes through the directory itself. `sandbox.json` and the rest stay root's.
fn hand_to_helper(dir: &Path, secrets: Option<&helper::Secrets>, owner: (u32, u32)) -> Result<(), JailError> {
    let (uid, gid) = owner;
    let run_as = user::RunAs { uid, gid, atoll_gid: gid };
    let paths = crate::vmm::state::Paths::in_dir(dir, false);
    crate::vmm::safe_fs::set_mode(dir, 0o700)
        .map_err(|source| user::UserError::Grant { path: dir.to_path_buf(), source })?;
    user::grant(&crate::vmm::state::wire_dir(dir), run_as, 0o1770)?;
    for log in [&paths.qemu_log, &paths.console_log] {
        let give = || {
            let file = helper::open_log(log, Some(owner))?;
            rustix::fs::fchmod(&file, rustix::fs::Mode::from_raw_mode(0o600)).map_err(std::io::Error::from)
        };
        give().map_err(|source| user::UserError::Grant { path: log.clone(), source })?;
    }
    let give = |path: &Path| {
        helper::give_dir(path, uid, gid)
            .map_err(|source| JailError::User(user::UserError::Grant { path: path.to_path_buf(), source }))
    };
    crate::sandbox::network::config::prepare_net_dir(dir, Some(owner)).map_err(|source| {
        JailError::User(user::UserError::Grant {
            path: crate::sandbox::network::config::net_dir(dir),
            source,
        })
    })?;
    if let Some(s) = secrets {
        give(&s.private)?;
    }
    Ok(())
}

/// bwrap's `--info-fd` report: `{"child-pid": N, ...}` once the sandbox runs.
fn read_child_pid(from: OwnedFd) -> Result<u32, String> {
    use rustix::event::{PollFd, PollFlags};
    let deadline = Instant::now() + INFO_WAIT;
    let mut text = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&text)
            && let Some(pid) = v.get("child-pid").and_then(serde_json::Value::as_u64)
        {
            return u32::try_from(pid).map_err(|_| format!("bwrap reported pid {pid}"));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no pid reported within {} s", INFO_WAIT.as_secs()));
        }
        let mut fds = [PollFd::new(&from, PollFlags::IN)];
        let timeout = rustix::event::Timespec::try_from(left).ok();
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(format!("waiting for bwrap's report failed: {e}")),
        }
        match rustix::io::read(&from, &mut buf) {
            Ok(0) => return Err("bwrap exited before it started QEMU".into()),
            Ok(n) => text.extend_from_slice(&buf[..n]),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("reading bwrap's report failed: {e}")),
        }
    }
}

/// Starts `program args` in a new session with stdin closed, stdout and stderr
/// `log` (a file open to append, or a stream), exactly the environment `env`, `keep`
/// (descriptors the child inherits) left open across exec, the shares made `noexec` in
/// a mount namespace of its own ([`shares::Attach`]), and the child moved into the
/// cgroups whose `cgroup.procs` are `procs` before it runs anything.
fn spawn(
    program: &Path,
    args: &[String],
    log: std::os::fd::BorrowedFd<'_>,
    env: Vec<(String, String)>,
    keep: &[i32],
    attach: shares::Attach,
    procs: Vec<OwnedFd>,
) -> Result<tokio::process::Child, JailError> {
    let clone = || log.try_clone_to_owned().map_err(JailError::Pipe);
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).env_clear().envs(env).stdin(Stdio::null()).stdout(clone()?).stderr(clone()?);
    let keep = keep.to_vec();
    let proc_fds: Vec<i32> = procs.iter().map(AsRawFd::as_raw_fd).collect();
    // SAFETY: only async-signal-safe calls run between fork and exec (setsid, fcntl,
    // open, write, close, fstat, unshare, mount, open_tree, mount_setattr, move_mount
    // on descriptors and strings made before the fork); nothing allocates or takes a
    // lock.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setsid().map_err(std::io::Error::from)?;
            for &fd in &proc_fds {
                // `0` is the writing process: the child, and so everything it starts.
                let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
                rustix::io::write(fd, b"0").map_err(std::io::Error::from)?;
            }
            for &fd in &keep {
                let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).map_err(std::io::Error::from)?;
            }
            attach.apply()?;
            Ok(())
        });
    }
    let name = program.display().to_string();
    let child = cmd.spawn().map_err(|source| ProcessError::Spawn { program: name, source })?;
    drop(procs);
    Ok(child)
}

/// What the jail can apply on this host, for `atoll info`.
pub fn describe() -> String {
    let ns = match find_in_path(BWRAP) {
        Ok(_) => "own mount/pid/ipc/uts/net namespaces (bwrap), no capabilities",
        Err(_) => "bwrap missing: QEMU cannot start (install bubblewrap)",
    };
    let helper = "network helper: own mount/pid/ipc/uts namespaces (bwrap), seccomp deny-list, no capabilities, the `atoll-net` user (not QEMU's) when run as root, its own cgroup";
    format!("seccomp ({SECCOMP}); {ns}; {}; {helper}", cgroup::describe())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket given to the helper's user must have one name: a hard link to another
    /// socket (QEMU's control socket, say) put in the port's place is refused.
    #[test]
    fn a_socket_with_another_name_is_not_handed_over() {
        let d = tempfile::tempdir().unwrap();
        let (port, other) = (d.path().join("agent.port"), d.path().join("qmp.sock"));
        let _listener = std::os::unix::net::UnixListener::bind(&other).unwrap();
        let me = (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw());
        own_socket(&other, me).expect("a socket with one name is handed over");
        std::fs::hard_link(&other, &port).unwrap();
        let err = own_socket(&port, me).expect_err("a hard link to another socket was handed over");
        assert!(err.to_string().contains("another name"), "{err}");
    }
}
