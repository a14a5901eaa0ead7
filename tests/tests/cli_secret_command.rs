//! Attack (issue 30, the secrets runner): a `--from-command` command that leaves a
//! process behind in a session of its own (`setsid` in a double fork, as a daemon
//! does) must not have it run on as the user after its run. Through the real `atoll`
//! binary, on both paths that run a command: `atoll secret set`'s check, and the
//! `atoll secret-runner` a sandbox's network helper asks for a value (started here as
//! atoll starts it, with a socket pair, and asked as the helper asks: `V` + name). As
//! root, and as an ordinary user (uid [`atoll_tests::vm::SHARE_OWNER`] through
//! `setpriv`) when the tests run as root. No VM: the runner is the same binary and
//! code whether a helper or this test holds the other end.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use atoll_tests::vm::{HANG_GUARD, SHARE_OWNER, short_tempdir, text, wait_bounded};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

/// `atoll ARGS` with state directory `state`, as an ordinary user when `ordinary`.
fn atoll(state: &Path, ordinary: bool, args: &[&str]) -> Command {
    let mut cmd = if ordinary {
        let id = SHARE_OWNER.to_string();
        let mut c = Command::new("setpriv");
        c.args(["--reuid", &id, "--regid", &id, "--clear-groups", "--"]);
        c.arg(atoll_tests::workspace_bin("atoll"));
        c
    } else {
        Command::new(atoll_tests::workspace_bin("atoll"))
    };
    cmd.env_remove("ATOLL_AGENT")
        .env_remove("ATOLL_SANDBOX")
        .env("ATOLL_STATE_DIR", state)
        .env("HOME", state)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The processes whose command line holds `marker` (killed, so a failure leaves
/// nothing behind), with their command lines.
fn running_with(marker: &str) -> Vec<String> {
    running_with_no_kill(marker)
        .into_iter()
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            format!("{pid}: {}", String::from_utf8_lossy(&cmdline).replace('\0', " "))
        })
        .collect()
}

/// A command that prints a value only once a process it started has moved to a
/// session of its own, whose parent has already exited (a double fork).
fn escaping_command(dir: &Path, marker: &str) -> String {
    let ready = dir.join(format!("moved-{marker}"));
    let r = ready.display();
    format!(
        "rm -f {r}; (setsid sh -c ': > {r}; exec sleep {marker}' &)\n\
         until [ -e {r} ]; do sleep 0.01; done; echo value-from-a-command"
    )
}

/// `secret set` and the runner, as root (`ordinary` false) or as an ordinary user.
fn nothing_outlives_a_command(ordinary: bool) {
    let state = short_tempdir();
    if ordinary {
        std::os::unix::fs::chown(state.path(), Some(SHARE_OWNER), Some(SHARE_OWNER)).unwrap();
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let marker = format!("978.{}{}{nanos}", std::process::id(), u8::from(ordinary));
    let command = escaping_command(state.path(), &marker);

    // The check `secret set` runs.
    let mut set = atoll(
        state.path(),
        ordinary,
        &["secret", "set", "tok", "--host", "api.example.test", "--from-command", &command, "--cache", "1s"],
    );
    let out = wait_bounded(set.spawn().unwrap(), HANG_GUARD).expect("secret set hung");
    let left = running_with(&marker);
    assert!(out.status.success(), "secret set --from-command: {}", text(&out.stderr));
    assert!(left.is_empty(), "`atoll secret set`'s check left {left:?} running");

    // The runner beside a sandbox's helper: the secret bound to sandbox `reaptest`.
    let id = "reaptest";
    let bindings = state.path().join(".secrets/bindings");
    std::fs::create_dir_all(&bindings).unwrap();
    let file = bindings.join(format!("{id}.json"));
    let placeholder = format!("atoll-secret-tok-{}", "0".repeat(32));
    std::fs::write(
        &file,
        serde_json::json!([{"env": "TOK", "secret": "tok", "placeholder": placeholder}]).to_string(),
    )
    .unwrap();
    if ordinary {
        for p in [&bindings, &file] {
            std::os::unix::fs::chown(p, Some(SHARE_OWNER), Some(SHARE_OWNER)).unwrap();
        }
    }
    let (helper, runner_end): (OwnedFd, OwnedFd) =
        rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
            .unwrap();
    let sandbox_dir = state.path().join(id);
    let mut runner = atoll(
        state.path(),
        ordinary,
        &["secret-runner", "--dir", sandbox_dir.to_str().unwrap(), "--fd", "3"],
    );
    let raw = runner_end.as_raw_fd();
    // SAFETY: dup2 is async-signal-safe; it gives the child the runner's end as fd 3
    // (without close-on-exec), as atoll hands it on.
    unsafe {
        runner.pre_exec(move || {
            if libc::dup2(raw, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = runner.spawn().unwrap();
    drop(runner_end);
    rustix::net::send(&helper, b"Vtok", SendFlags::NOSIGNAL).unwrap();
    let mut buf = [0u8; 512];
    let (n, _) = rustix::net::recv(&helper, &mut buf, RecvFlags::empty()).unwrap();
    let left = running_with(&marker);
    let answer = String::from_utf8_lossy(&buf[1..n]).into_owned();
    drop(helper);
    let out = wait_bounded(child, HANG_GUARD).expect("the runner did not exit with its helper's end closed");
    assert_eq!((buf[0], answer.as_str()), (0, "value-from-a-command"), "runner: {}", text(&out.stderr));
    assert!(left.is_empty(), "the secrets runner left {left:?} running after the command's run");

    // The caller killed mid-run (SIGKILL: nothing of atoll's own runs after it): the
    // command's keeper sees it die and ends what the command started.
    let ready = state.path().join("moved-long");
    let (m1, m2) = (format!("{marker}1"), format!("{marker}2"));
    let long = format!("(setsid sh -c ': > {r}; exec sleep {m1}' &); exec sleep {m2}", r = ready.display());
    let set = atoll(
        state.path(),
        ordinary,
        &["secret", "set", "long", "--host", "api.example.test", "--from-command", &long],
    )
    .spawn()
    .unwrap();
    atoll_tests::vm::wait_until("the long command to start", HANG_GUARD, || {
        ready.exists() && !running_with_no_kill(&m2).is_empty()
    });
    rustix::process::kill_process(rustix::process::Pid::from_child(&set), rustix::process::Signal::KILL)
        .unwrap();
    let _ = wait_bounded(set, HANG_GUARD);
    let gone = |m: &str| running_with_no_kill(m).is_empty();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !(gone(&m1) && gone(&m2)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let left = [running_with(&m1), running_with(&m2)].concat();
    assert!(left.is_empty(), "killing `atoll secret set` mid-run left {left:?} running");
}

/// The processes whose command line holds `marker`, left as they are.
fn running_with_no_kill(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if cmdline.windows(marker.len()).any(|w| w == marker.as_bytes()) {
            found.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

/// As an ordinary user, a descendant that became root (a setuid-root `setpriv` that
/// sets all its uids to 0, as `sudo` does) cannot be killed: the run fails, saying so,
/// instead of returning a value while it runs on. (The test then ends it as root.)
fn a_process_that_changed_user_fails_the_run() {
    let state = short_tempdir();
    std::os::unix::fs::chown(state.path(), Some(SHARE_OWNER), Some(SHARE_OWNER)).unwrap();
    let setuid = state.path().join("setpriv");
    std::fs::copy("/usr/bin/setpriv", &setuid).unwrap();
    std::fs::set_permissions(&setuid, std::os::unix::fs::PermissionsExt::from_mode(0o4755)).unwrap();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let marker = format!("979.{}{nanos}", std::process::id());
    let ready = state.path().join("root-now");
    let command = format!(
        "(setsid {s} --reuid 0 --regid 0 --clear-groups sh -c ': > {r}; exec sleep {marker}' &)\n\
         until [ -e {r} ]; do sleep 0.01; done; echo value-from-a-command",
        s = setuid.display(),
        r = ready.display()
    );
    let mut set = atoll(
        state.path(),
        true,
        &["secret", "set", "su", "--host", "api.example.test", "--from-command", &command],
    );
    let out = wait_bounded(set.spawn().unwrap(), HANG_GUARD).expect("secret set hung");
    let _ = std::fs::remove_file(&setuid);
    let left = running_with(&marker);
    assert!(ready.exists(), "the setuid step did not run: {}", text(&out.stderr));
    assert_eq!(left.len(), 1, "the root descendant is not what was left: {left:?}");
    assert!(!out.status.success(), "secret set succeeded with a root process left running");
    let err = text(&out.stderr);
    assert!(err.contains("left 1 process(es) running that atoll could not kill"), "{err}");
}

#[test]
fn a_command_s_escaped_process_outlives_neither_secret_set_nor_the_runner() {
    nothing_outlives_a_command(false);
    if rustix::process::geteuid().is_root() {
        nothing_outlives_a_command(true);
        a_process_that_changed_user_fails_the_run();
    }
}
