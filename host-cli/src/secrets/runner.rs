//! The jailed network helper's only way to secrets, and to resuming its paused sandbox. The helper cannot start programs
//! (its seccomp filter denies exec), and it does not see the secrets store: a helper
//! taken over by a guest would otherwise read every stored value. So beside each helper
//! atoll starts this runner, outside the jail, as atoll's user, with the helper's
//! reduced environment, holding one end of a socket pair whose other end only the
//! helper has.
//!
//! The helper asks for the list of its sandbox's bindings (`L`: name, placeholder,
//! hosts) and for the value of one bound secret (`V` + name). The runner reads both from
//! the store and the sandbox's bindings itself (never from the helper, which can write
//! neither), runs a `--from-command` secret's command (its output kept in the runner's
//! memory for `--cache`), answers only for secrets bound to its sandbox now, does nothing
//! else, and exits when the helper's end closes (the helper ended).
//!
//! A connection to a published port of a paused sandbox resumes it (`R`): the helper,
//! in a PID namespace of its own without capabilities, cannot signal QEMU, so the
//! runner resumes the sandbox its directory names, as `atoll resume` would.

use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use atoll_net::secrets::Bound;
use rustix::net::{RecvFlags, SendFlags};
use serde::{Deserialize, Serialize};

use super::{binding, store, value};

/// The longest request: a kind byte and a name (names are far shorter:
/// [`store::check_name`]).
const MAX_REQUEST: usize = 256;
/// The longest answer: a value is at most 8192 bytes; a list of bindings a few hundred
/// bytes each (well under the socket's buffer, which bounds one message).
const MAX_ANSWER: usize = 128 * 1024;

/// The helper's end, once it has been handed one.
static RUNNER: OnceLock<Mutex<OwnedFd>> = OnceLock::new();

/// One binding as the runner lists it (no value).
#[derive(Debug, Serialize, Deserialize)]
struct Listed {
    name: String,
    placeholder: String,
    hosts: Vec<String>,
    /// Why the secret cannot be used (it was removed from the store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Takes the helper's end of the socket pair (`atoll net-helper --runner-fd N`).
///
/// # Safety
/// `fd` must be an open descriptor this process owns and uses for nothing else.
pub unsafe fn use_runner(fd: RawFd) {
    // SAFETY: the caller hands over ownership of an open descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let _ = RUNNER.set(Mutex::new(fd));
}

/// Whether this process (a jailed helper) has a runner to ask.
pub fn active() -> bool {
    RUNNER.get().is_some()
}

/// Sends `request` to the runner and returns its answer.
fn ask(request: &[u8]) -> Result<String, String> {
    let gone = |e: &dyn std::fmt::Display| format!("the secrets runner is gone ({e}); restart the sandbox");
    let runner = RUNNER.get().ok_or_else(|| gone(&"none was started"))?;
    let fd = runner.lock().unwrap_or_else(|p| p.into_inner());
    rustix::net::send(&*fd, request, SendFlags::NOSIGNAL).map_err(|e| gone(&e))?;
    let mut buf = vec![0u8; MAX_ANSWER];
    let n = loop {
        match rustix::net::recv(&*fd, &mut buf, RecvFlags::empty()) {
            Ok((n, _)) => break n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(gone(&e)),
        }
    };
    match buf[..n].split_first() {
        Some((0, v)) => Ok(String::from_utf8_lossy(v).into_owned()),
        Some((_, why)) => Err(String::from_utf8_lossy(why).into_owned()),
        None => Err(gone(&"it closed")),
    }
}

/// The secrets bound to this helper's sandbox, from its runner; values only when
/// `with_values`. None at all when the runner cannot be asked (the swap then leaves
/// every placeholder as it is, as for a sandbox with no secret bound).
pub fn bound(with_values: bool) -> Vec<Bound> {
    let listed: Vec<Listed> =
        match ask(b"L").and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string())) {
            Ok(l) => l,
            Err(why) => {
                tracing::warn!("cannot list the sandbox's secrets: {why}");
                return Vec::new();
            }
        };
    listed
        .into_iter()
        .map(|l| {
            let value = match (l.error, with_values) {
                (Some(e), _) => Err(e),
                (None, false) => Err("not read".into()),
                (None, true) => ask(&[b"V".as_slice(), l.name.as_bytes()].concat()),
            };
            Bound { name: l.name, placeholder: l.placeholder, hosts: l.hosts, value }
        })
        .collect()
}

/// Asks the runner to resume this helper's sandbox if it is paused (a parked one has no
/// helper: its ports are closed until it is unparked).
pub fn resume() -> Result<String, String> {
    ask(b"R")
}

/// Resumes the sandbox in `dir` (named by its directory, never by what the helper could
/// write) if its record says it is paused.
fn resume_own(dir: &Path) -> Result<String, String> {
    let id = dir.file_name().and_then(|n| n.to_str()).ok_or("no sandbox directory")?;
    let state = crate::vmm::dirs::state_dir().map_err(|e| e.to_string())?;
    let record = crate::vmm::state::find(&state, id).map_err(|e| e.to_string())?;
    if record.id != id || !record.paused {
        return Ok("running".into());
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    rt.block_on(crate::sandbox::resume(id)).map(|_| "resumed".into()).map_err(|e| e.to_string())
}

/// What the runner answers for `request` from the helper of the sandbox in `dir`.
fn answer(dir: &Path, request: &[u8]) -> Result<String, String> {
    match request.split_first() {
        Some((b'R', _)) => resume_own(dir),
        Some((b'L', _)) => {
            let listed: Vec<Listed> = binding::load(dir)
                .into_iter()
                .map(|b| match store::load(&b.secret) {
                    Ok(file) => {
                        Listed { name: b.secret, placeholder: b.placeholder, hosts: file.hosts, error: None }
                    }
                    Err(e) => Listed {
                        name: b.secret,
                        placeholder: b.placeholder,
                        hosts: Vec::new(),
                        error: Some(e.to_string()),
                    },
                })
                .collect();
            serde_json::to_string(&listed).map_err(|e| e.to_string())
        }
        Some((b'V', name)) => {
            let name = std::str::from_utf8(name).map_err(|_| "a secret's name is text".to_owned())?;
            store::check_name(name).map_err(|e| e.to_string())?;
            if !binding::load(dir).iter().any(|b| b.secret == name) {
                return Err(format!("secret `{name}` is not bound to this sandbox"));
            }
            let file = store::load(name).map_err(|e| e.to_string())?;
            value::resolve(&file.name, &file.source)
        }
        _ => Err("unknown request".into()),
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
        rustix::net::send(&helper, b"Vgh", SendFlags::NOSIGNAL).unwrap();
        let mut buf = [0u8; 512];
        let (n, _) = rustix::net::recv(&helper, &mut buf, RecvFlags::empty()).unwrap();
        assert_eq!(buf[0], 1);
        assert!(String::from_utf8_lossy(&buf[1..n]).contains("not bound"), "{:?}", &buf[..n]);
        rustix::net::send(&helper, b"V../x", SendFlags::NOSIGNAL).unwrap();
        let (n, _) = rustix::net::recv(&helper, &mut buf, RecvFlags::empty()).unwrap();
        assert_eq!(buf[0], 1, "{:?}", String::from_utf8_lossy(&buf[1..n]));
        // Nothing bound: an empty list.
        rustix::net::send(&helper, b"L", SendFlags::NOSIGNAL).unwrap();
        let (n, _) = rustix::net::recv(&helper, &mut buf, RecvFlags::empty()).unwrap();
        assert_eq!(&buf[..n], b"\0[]");
        rustix::net::send(&helper, b"X", SendFlags::NOSIGNAL).unwrap();
        let (n, _) = rustix::net::recv(&helper, &mut buf, RecvFlags::empty()).unwrap();
        assert_eq!(buf[0], 1, "{:?}", String::from_utf8_lossy(&buf[1..n]));
        drop(helper);
        served.join().unwrap();
    }
}
