//! `--from-command` secrets for a jailed network helper. The helper cannot start
//! programs (its seccomp filter denies exec) or see the user's home, where such commands
//! keep their state (`gh auth token` reads `~/.config/gh`). So beside each helper atoll
//! starts this runner, outside the jail, as atoll's user, with the helper's reduced
//! environment, holding one end of a socket pair whose other end only the helper has.
//!
//! The helper sends a secret's name; the runner runs that secret's command, read from the
//! store (never from the helper), only if the secret is bound to the runner's sandbox now,
//! and answers with its output or why not. It does nothing else, and exits when the
//! helper's end closes (the helper ended). A helper taken over by a guest can so make the
//! runner run only commands the user stored and bound to that sandbox: values the swap
//! would hand that helper anyway.

use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use rustix::net::{RecvFlags, SendFlags};

use super::store::Source;
use super::{binding, store, value};

/// The longest name the runner reads (names are far shorter: [`store::check_name`]).
const MAX_REQUEST: usize = 256;
/// The longest answer: a value is at most 8192 bytes; an error is cut to fit.
const MAX_ANSWER: usize = 16 * 1024;

/// The helper's end, once it has been handed one.
static RUNNER: OnceLock<Mutex<OwnedFd>> = OnceLock::new();

/// Takes the helper's end of the socket pair (`atoll net-helper --runner-fd N`).
///
/// # Safety
/// `fd` must be an open descriptor this process owns and uses for nothing else.
pub unsafe fn use_runner(fd: RawFd) {
    // SAFETY: the caller hands over ownership of an open descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let _ = RUNNER.set(Mutex::new(fd));
}

/// The output of the command of the secret `name`, run by the runner when this process
/// has one (a jailed helper), else here.
pub fn command_value(name: &str, command: &str) -> Result<String, String> {
    let Some(runner) = RUNNER.get() else { return value::run(command) };
    let fd = runner.lock().unwrap_or_else(|p| p.into_inner());
    rustix::net::send(&*fd, name.as_bytes(), SendFlags::NOSIGNAL)
        .map_err(|e| format!("the secret command runner is gone ({e}); restart the sandbox"))?;
    let mut buf = vec![0u8; MAX_ANSWER];
    let n = loop {
        match rustix::net::recv(&*fd, &mut buf, RecvFlags::empty()) {
            Ok((n, _)) => break n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("the secret command runner is gone ({e}); restart the sandbox")),
        }
    };
    match buf[..n].split_first() {
        Some((0, v)) => Ok(String::from_utf8_lossy(v).into_owned()),
        Some((_, why)) => Err(String::from_utf8_lossy(why).into_owned()),
        None => Err("the secret command runner is gone; restart the sandbox".into()),
    }
}

/// What the runner answers for `request` from the helper of the sandbox in `dir`.
fn answer(dir: &Path, request: &[u8]) -> Result<String, String> {
    let name = std::str::from_utf8(request).map_err(|_| "a secret's name is text".to_owned())?;
    store::check_name(name).map_err(|e| e.to_string())?;
    if !binding::load(dir).iter().any(|b| b.secret == name) {
        return Err(format!("secret `{name}` is not bound to this sandbox"));
    }
    match store::load(name).map_err(|e| e.to_string())?.source {
        Source::Command { command, .. } => value::run(&command),
        Source::Value { .. } => Err(format!("secret `{name}` has no command")),
    }
}

/// Serves the helper of the sandbox in `dir` on `fd` until its end closes.
pub fn serve(fd: BorrowedFd<'_>, dir: &Path) {
    let mut buf = [0u8; MAX_REQUEST];
    loop {
        let n = match rustix::net::recv(fd, &mut buf, RecvFlags::empty()) {
            Ok((0, _)) => return,
            Ok((n, _)) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        };
        let mut reply = match answer(dir, &buf[..n]) {
            Ok(v) => [&[0u8][..], v.as_bytes()].concat(),
            Err(why) => [&[1u8][..], why.as_bytes()].concat(),
        };
        reply.truncate(MAX_ANSWER);
        if rustix::net::send(fd, &reply, SendFlags::NOSIGNAL).is_err() {
            return;
        }
    }
}

/// A socket pair for a helper and its runner: (the helper's end, the runner's end),
/// both closed on exec unless handed on.
pub fn pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    Ok(rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?)
}

/// Runs `atoll secret-runner --dir DIR --fd N` (hidden; started beside each helper).
pub fn main(args: &[std::ffi::OsString]) -> std::process::ExitCode {
    let mut dir = None;
    let mut fd = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--dir") => dir = it.next().map(std::path::PathBuf::from),
            Some("--fd") => fd = it.next().and_then(|v| v.to_str()?.parse::<RawFd>().ok()),
            _ => {}
        }
    }
    let (Some(dir), Some(fd)) = (dir, fd) else {
        eprintln!("atoll secret-runner: usage: atoll secret-runner --dir DIR --fd N (atoll starts it)");
        return std::process::ExitCode::from(2);
    };
    // SAFETY: atoll hands this process the descriptor `fd` for this use alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    serve(fd.as_fd(), &dir);
    std::process::ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_answers_until_the_helper_end_closes() {
        let (helper, runner) = pair().unwrap();
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_path_buf();
        let served = std::thread::spawn(move || serve(runner.as_fd(), &dir));
        // Not a sandbox directory: nothing is bound there, so nothing runs.
        rustix::net::send(&helper, b"gh", SendFlags::NOSIGNAL).unwrap();
        let mut buf = [0u8; 512];
        let (n, _) = rustix::net::recv(&helper, &mut buf, RecvFlags::empty()).unwrap();
        assert_eq!(buf[0], 1);
        assert!(String::from_utf8_lossy(&buf[1..n]).contains("not bound"), "{:?}", &buf[..n]);
        rustix::net::send(&helper, b"../x", SendFlags::NOSIGNAL).unwrap();
        let (n, _) = rustix::net::recv(&helper, &mut buf, RecvFlags::empty()).unwrap();
        assert_eq!(buf[0], 1, "{:?}", String::from_utf8_lossy(&buf[1..n]));
        drop(helper);
        served.join().unwrap();
    }
}
