//! A sandbox whose VM cannot answer: its QEMU stopped by a signal atoll did not send
//! (SIGSTOP), then its guest's CPUs stopped through QEMU's monitor (a wedged guest:
//! QEMU runs, the agent link is up, nothing answers behind it). Every subcommand that
//! talks to an agent ends with exit 69 within `--connect-timeout` plus 2 s, saying
//! what did not answer (and never sending the user to `atoll ls`, which shows a stopped
//! VM as `stopped`); `atoll ls` and `atoll info NAME` report it; once it runs again,
//! commands work. One VM for all of it.

mod cli_util;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use atoll_tests::commands::{agent_commands, run_bounded};
use atoll_tests::vm::{Atoll, text};

/// The timeout every command gets.
const TIMEOUT: Duration = Duration::from_secs(2);
/// How much longer than the timeout a command may take, at most, to give up.
const MARGIN: Duration = Duration::from_secs(2);

/// Runs every agent subcommand at sandbox `name`: each exits 69 within the bound with
/// a message holding `said` and not pointing at `atoll ls`.
fn every_command_gives_up(atoll: &Atoll, name: &str, said: &str) {
    let host = tempfile::tempdir().unwrap();
    let timeout = format!("{}s", TIMEOUT.as_secs());
    for batch in agent_commands(host.path()).chunks(8) {
        std::thread::scope(|scope| {
            for c in batch {
                let timeout = &timeout;
                scope.spawn(move || {
                    let mut args = vec!["-s", name, "--connect-timeout", timeout.as_str()];
                    args.extend(c.args.iter().map(String::as_str));
                    let (out, took) = run_bounded(atoll.command(&args), c.stdin, Duration::from_secs(120));
                    let err = text(&out.stderr);
                    assert_eq!(out.status.code(), Some(69), "`atoll {}` at {name}: {err}", c.name);
                    assert!(
                        took < TIMEOUT + MARGIN,
                        "`atoll {}` at {name} took {took:?}, past the {TIMEOUT:?} timeout + {MARGIN:?}: {err}",
                        c.name
                    );
                    assert!(err.contains(said), "`atoll {}` at {name} said: {err}", c.name);
                    assert!(!err.contains("atoll ls"), "`atoll {}` sends the user to `atoll ls`: {err}", c.name);
                });
            }
        });
    }
}

/// One QMP command on the sandbox's monitor.
fn qmp(dir: &Path, command: &str) {
    let conn = UnixStream::connect(dir.join("vm/qmp.sock")).expect("connect to QMP");
    conn.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut writer = conn;
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.contains("QMP"), "{line}");
    for execute in ["qmp_capabilities", command] {
        writeln!(writer, "{{\"execute\":\"{execute}\"}}").unwrap();
        loop {
            line.clear();
            assert!(reader.read_line(&mut line).unwrap() > 0, "QMP closed");
            if line.contains("\"return\"") {
                break;
            }
            assert!(!line.contains("\"error\""), "QMP {execute}: {line}");
        }
    }
}

#[test]
fn vm_a_stopped_or_wedged_sandbox_fails_fast_and_says_so() {
    let atoll = Atoll::new();
    atoll.create_with("frozen", &["--net", "none"]);
    let inspected = atoll.json(&["inspect", "frozen"]);
    let pid = inspected["qemu_pid"].as_u64().expect("QEMU's pid").to_string();
    let dir = PathBuf::from(inspected["dir"].as_str().unwrap());

    // SIGSTOP from outside atoll: listed, inspected and refused as stopped.
    assert!(std::process::Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    atoll_tests::vm::wait_until("QEMU to stop", Duration::from_secs(30), || {
        atoll.state_of("frozen").as_deref() == Some("stopped")
    });
    let ls = text(&atoll.run(&["ls"]).stdout);
    assert!(ls.lines().any(|l| l.contains("frozen") && l.contains("stopped")), "{ls}");
    let info = atoll.json(&["info", "frozen"]);
    assert_eq!(info["state"], "stopped", "{info}");
    every_command_gives_up(&atoll, "frozen", "is stopped");
    let err = atoll.fails(&["-s", "frozen", "exec", "--", "true"]);
    assert_eq!(
        err.trim_end(),
        format!(
            "atoll: sandbox `frozen` is stopped: its QEMU process (pid {pid}) was stopped by a signal \
             (SIGSTOP) or a debugger, so nothing in it answers; `atoll resume frozen` continues it"
        )
    );

    // `atoll resume` continues it.
    atoll.json(&["resume", "frozen"]);
    assert_eq!(atoll.state_of("frozen").as_deref(), Some("running"));
    assert_eq!(atoll.sh("frozen", "echo back"), "back\n");

    // A wedged guest: QEMU runs, its CPUs do not. Nothing answers behind the link.
    qmp(&dir, "stop");
    every_command_gives_up(&atoll, "frozen", "the agent did not answer within 2 s");
    let info = atoll.json(&["--connect-timeout", "2s", "info", "frozen"]);
    let why = info["agent_error"].as_str().unwrap_or_default();
    assert!(why.contains("the VM is wedged"), "{info}");
    qmp(&dir, "cont");
    assert_eq!(atoll.sh("frozen", "echo again"), "again\n");
}
