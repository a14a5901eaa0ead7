//! Starting a command as a session leader, with `posix_spawn` unless a user switch needs
//! a `fork`.
//!
//! std's `Command` can only `setsid` through a `pre_exec` hook, and any hook makes it
//! `fork`, which copies the agent's page tables for every command. `posix_spawn` with
//! `POSIX_SPAWN_SETSID` (glibc 2.29 for the working directory's file action, musl
//! 1.1.24) starts the child with a vfork-style
//! clone instead, about half the cost of an Exec of `true` (BENCHMARKS.md). A command
//! that runs as another user still forks: the switch (`setgroups`, `setgid`,
//! `setuid`) has no `posix_spawn` attribute, and neither does making a terminal the
//! controlling terminal of the new session (`TIOCSCTTY`), so a command on a pty forks
//! too.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rustix::thread::{Gid, Uid};

use super::user::Credentials;
use super::{Spec, spec, tree};

/// Runs files that have no `#!` line (as execvp does).
const SHELL: &str = "/bin/sh";

/// Where a command's standard streams go.
pub enum StdioSetup {
    /// Pipes to the agent for all three.
    Piped,
    /// stdin from /dev/null, stdout and stderr to these files.
    Files {
        /// Receives stdout.
        stdout: std::fs::File,
        /// Receives stderr.
        stderr: std::fs::File,
    },
    /// All three on this pty slave, which becomes the session's controlling terminal.
    Terminal(OwnedFd),
}

/// A started child: its pid and the agent's ends of its pipes.
pub struct Started {
    /// The child's pid (also its session and process group id).
    pub pid: u32,
    /// Write end of its stdin, when piped.
    pub stdin: Option<OwnedFd>,
    /// Read end of its stdout, when piped.
    pub stdout: Option<OwnedFd>,
    /// Read end of its stderr, when piped.
    pub stderr: Option<OwnedFd>,
}

/// Starts `spec` in a new session with `tag` in its environment ([`tree::TAG_VAR`]).
pub fn start(spec: &Spec, tag: &str, stdio: StdioSetup) -> io::Result<Started> {
    let creds = spec.user.as_ref().filter(|c| needs_switch(c.uid));
    match (creds, &stdio) {
        (None, StdioSetup::Piped | StdioSetup::Files { .. }) => spawned(spec, tag, stdio),
        _ => forked(spec, tag, stdio, creds),
    }
}

/// Marks every fd above 2 that the agent inherited close-on-exec, so that no command
/// gets a copy (the agent's own fds are opened close-on-exec). Call it at the start of
/// `main`, before any thread exists. Kernels before 5.11 lack the flag; there the fds
/// stay inheritable.
pub fn keep_inherited_fds_from_commands() {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on open fds.
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
}

/// Switching users needs root; asking for the agent's own user is a no-op.
fn needs_switch(uid: u32) -> bool {
    let me = rustix::process::geteuid();
    me.is_root() || me.as_raw() != uid
}

/// `fork`, `setsid`, the controlling terminal, the user switch, `exec`: through std,
/// whose child side is async-signal-safe.
fn forked(spec: &Spec, tag: &str, stdio: StdioSetup, creds: Option<&Credentials>) -> io::Result<Started> {
    let mut cmd = Command::new(spec.program());
    cmd.args(&spec.argv[1..])
        .current_dir(&spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .env(tree::TAG_VAR, tag);
    let terminal = matches!(stdio, StdioSetup::Terminal(_));
    match stdio {
        StdioSetup::Piped => cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()),
        StdioSetup::Files { stdout, stderr } => cmd.stdin(Stdio::null()).stdout(stdout).stderr(stderr),
        StdioSetup::Terminal(slave) => cmd.stdin(slave.try_clone()?).stdout(slave.try_clone()?).stderr(slave),
    };
    let switch = creds.map(|creds| {
        let groups: Vec<Gid> = creds.groups.iter().map(|g| Gid::from_raw(*g)).collect();
        (groups, Uid::from_raw(creds.uid), Gid::from_raw(creds.gid))
    });
    // SAFETY: between fork and exec the child is single-threaded and the closure only
    // makes raw syscalls on data prepared before the fork; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setsid()?;
            if terminal {
                // std has already put the slave on fd 0; the new session takes it.
                rustix::process::ioctl_tiocsctty(std::os::fd::BorrowedFd::borrow_raw(0))?;
            }
            if let Some((groups, uid, gid)) = &switch {
                // Groups and gid first: after setuid the right to change them is gone.
                rustix::thread::set_thread_groups(groups)?;
                rustix::thread::set_thread_gid(*gid)?;
                rustix::thread::set_thread_uid(*uid)?;
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    Ok(Started {
        pid: child.id(),
        stdin: child.stdin.take().map(OwnedFd::from),
        stdout: child.stdout.take().map(OwnedFd::from),
        stderr: child.stderr.take().map(OwnedFd::from),
    })
}

/// `posix_spawn` with `POSIX_SPAWN_SETSID`, the working directory and the stdio set by
/// file actions, the signal mask emptied and SIGPIPE back to its default (the Rust
/// runtime ignores it, and an ignored signal stays ignored across `exec`).
fn spawned(spec: &Spec, tag: &str, stdio: StdioSetup) -> io::Result<Started> {
    let env = environment(spec, tag);
    // Spec::from_command gives the command a PATH whenever the agent has none.
    let path_var = env.get(OsStr::new("PATH")).map_or(OsStr::new(spec::DEFAULT_PATH), OsString::as_os_str);
    let program = cstring(find_program(spec.program(), path_var, &spec.cwd)?.into_os_string())?;
    let argv = spec.argv.iter().map(|a| cstring(a.into())).collect::<io::Result<Vec<_>>>()?;
    let envp = env
        .into_iter()
        .map(|(mut k, v)| {
            k.push("=");
            k.push(v);
            cstring(k)
        })
        .collect::<io::Result<Vec<_>>>()?;
    let cwd = cstring(spec.cwd.clone().into_os_string())?;

    // The child's ends (close-on-exec here; dup2 gives the child copies without it),
    // and the agent's ends.
    let (child_fds, parent_fds) = match stdio {
        StdioSetup::Terminal(_) => unreachable!("a terminal's command is forked"),
        StdioSetup::Piped => {
            let (in_r, in_w) = pipe()?;
            let (out_r, out_w) = pipe()?;
            let (err_r, err_w) = pipe()?;
            ([in_r, out_w, err_w], [Some(in_w), Some(out_r), Some(err_r)])
        }
        StdioSetup::Files { stdout, stderr } => {
            let null = std::fs::File::open("/dev/null")?;
            (
                [above_stdio(null.into())?, above_stdio(stdout.into())?, above_stdio(stderr.into())?],
                [None, None, None],
            )
        }
    };

    let mut actions = FileActions::new()?;
    for (target, fd) in (0..).zip(child_fds.iter()) {
        actions.dup2(fd, target)?;
    }
    actions.chdir(&cwd)?;
    let attr = Attributes::new_session()?;
    let pid = match attr.spawn(&program, &actions, &argv, &envp) {
        // A file without `#!` that the kernel cannot run: as execvp does, hand it to sh.
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => {
            let sh = cstring(SHELL.into())?;
            let argv: Vec<CString> =
                [sh.clone(), program].into_iter().chain(argv.into_iter().skip(1)).collect();
            attr.spawn(&sh, &actions, &argv, &envp)?
        }
        other => other?,
    };
    drop(child_fds);
    let [stdin, stdout, stderr] = parent_fds;
    Ok(Started { pid, stdin, stdout, stderr })
}

/// The agent's environment with the command's variables and its tag on top.
fn environment(spec: &Spec, tag: &str) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    env.extend(spec.env.iter().map(|(k, v)| (k.into(), v.into())));
    env.insert(tree::TAG_VAR.into(), tag.into());
    env
}

/// `program` as execvp finds it: as given when it has a `/`, otherwise the first
/// executable regular file of that name in `path` (empty entries meaning `cwd`).
/// NotFound when there is none; PermissionDenied when only non-executable ones exist.
fn find_program(program: &str, path: &OsStr, cwd: &Path) -> io::Result<PathBuf> {
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    let mut denied = false;
    for dir in path.as_bytes().split(|b| *b == b':') {
        let dir = if dir.is_empty() { cwd } else { Path::new(OsStr::from_bytes(dir)) };
        let candidate = cwd.join(dir).join(program);
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() => {
                if rustix::fs::access(&candidate, rustix::fs::Access::EXEC_OK).is_ok() {
                    return Ok(candidate);
                }
                denied = true;
            }
            _ => {}
        }
    }
    Err(if denied { io::ErrorKind::PermissionDenied } else { io::ErrorKind::NotFound }.into())
}

fn cstring(s: OsString) -> io::Result<CString> {
    CString::new(s.into_vec()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte"))
}

/// A close-on-exec pipe whose ends are not fds 0-2 (see [`above_stdio`]).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    Ok((above_stdio(r)?, above_stdio(w)?))
}

/// `fd` itself, or a close-on-exec copy of it numbered 3 or above: a dup2 onto its own
/// number is a no-op that would leave the close-on-exec flag set, and an fd below 3
/// could be overwritten by an earlier dup2. Only an agent started with closed stdio
/// gets such fds.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 { Ok(fd) } else { Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?) }
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(ret)) }
}

/// `posix_spawn_file_actions_t`, destroyed on drop.
struct FileActions(Box<MaybeUninit<libc::posix_spawn_file_actions_t>>);

impl FileActions {
    fn new() -> io::Result<Self> {
        // Boxed: the C object must not move once initialised.
        let mut fa = Box::new(MaybeUninit::uninit());
        // SAFETY: init writes the object; on failure it is left unused and freed as memory.
        check(unsafe { libc::posix_spawn_file_actions_init(fa.as_mut_ptr()) })?;
        Ok(FileActions(fa))
    }

    fn dup2(&mut self, fd: &OwnedFd, target: i32) -> io::Result<()> {
        // SAFETY: the object was initialised in new(); `fd` outlives the spawn.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(self.0.as_mut_ptr(), fd.as_raw_fd(), target) })
    }

    fn chdir(&mut self, dir: &CString) -> io::Result<()> {
        // SAFETY: as above; the C library copies the path.
        check(unsafe { libc::posix_spawn_file_actions_addchdir_np(self.0.as_mut_ptr(), dir.as_ptr()) })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in new() and destroyed only here.
        unsafe { libc::posix_spawn_file_actions_destroy(self.0.as_mut_ptr()) };
    }
}

/// `posix_spawnattr_t`, destroyed on drop.
struct Attributes(Box<MaybeUninit<libc::posix_spawnattr_t>>);

impl Attributes {
    /// A new session, an empty signal mask and SIGPIPE at its default.
    fn new_session() -> io::Result<Self> {
        let mut attr = Box::new(MaybeUninit::uninit());
        // SAFETY: init writes the object; on failure it is left unused.
        check(unsafe { libc::posix_spawnattr_init(attr.as_mut_ptr()) })?;
        let mut attr = Attributes(attr);
        let p = attr.0.as_mut_ptr();
        // SAFETY: sigemptyset/sigaddset write the local sets; the setters read them and
        // the initialised attribute object.
        unsafe {
            let mut empty = MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(empty.as_mut_ptr());
            let mut pipe_default = MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(pipe_default.as_mut_ptr());
            libc::sigaddset(pipe_default.as_mut_ptr(), libc::SIGPIPE);
            check(libc::posix_spawnattr_setsigmask(p, empty.as_ptr()))?;
            check(libc::posix_spawnattr_setsigdefault(p, pipe_default.as_ptr()))?;
            let flags = libc::c_int::from(libc::POSIX_SPAWN_SETSID)
                | libc::POSIX_SPAWN_SETSIGMASK
                | libc::POSIX_SPAWN_SETSIGDEF;
            let flags = libc::c_short::try_from(flags).expect("posix_spawn flags fit a short");
            check(libc::posix_spawnattr_setflags(p, flags))?;
        }
        Ok(attr)
    }

    fn spawn(
        &self,
        program: &CString,
        actions: &FileActions,
        argv: &[CString],
        envp: &[CString],
    ) -> io::Result<u32> {
        let mut argv_p: Vec<*mut libc::c_char> = argv.iter().map(|a| a.as_ptr().cast_mut()).collect();
        argv_p.push(std::ptr::null_mut());
        let mut envp_p: Vec<*mut libc::c_char> = envp.iter().map(|e| e.as_ptr().cast_mut()).collect();
        envp_p.push(std::ptr::null_mut());
        let mut pid: libc::pid_t = 0;
        // SAFETY: every pointer is valid for the call: NUL-terminated strings owned by
        // the caller, NULL-terminated arrays, initialised actions and attributes.
        check(unsafe {
            libc::posix_spawn(
                &mut pid,
                program.as_ptr(),
                actions.0.as_ptr(),
                self.0.as_ptr(),
                argv_p.as_ptr(),
                envp_p.as_ptr(),
            )
        })?;
        Ok(pid.unsigned_abs())
    }
}

impl Drop for Attributes {
    fn drop(&mut self) {
        // SAFETY: initialised in new_session() and destroyed only here.
        unsafe { libc::posix_spawnattr_destroy(self.0.as_mut_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_as_execvp_would() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let plain = bin.join("plain");
        std::fs::write(&plain, "").unwrap();
        let exe = bin.join("exe");
        std::fs::write(&exe, "").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = OsString::from(format!("/nonexistent:{}", bin.display()));
        assert_eq!(find_program("exe", &path, Path::new("/")).unwrap(), exe);
        assert_eq!(find_program("./x/y", &path, Path::new("/")).unwrap(), PathBuf::from("./x/y"));
        assert_eq!(
            find_program("plain", &path, Path::new("/")).unwrap_err().kind(),
            io::ErrorKind::PermissionDenied
        );
        assert_eq!(find_program("nope", &path, Path::new("/")).unwrap_err().kind(), io::ErrorKind::NotFound);
        // An empty entry is the working directory.
        assert_eq!(find_program("exe", OsStr::new(":/nonexistent"), &bin).unwrap(), exe);
    }
}
