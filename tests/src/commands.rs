//! Every `atoll` subcommand that talks to an agent, with arguments that would work
//! against a healthy one, for tests that aim all of them at an agent that is not
//! (silent endpoints, a stopped VM); and [`run_bounded`], which runs one and says how
//! long it took, killing it past a hang guard.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// One subcommand: a name for messages, its arguments, what it reads on stdin.
pub struct AgentCommand {
    /// How the test names it.
    pub name: &'static str,
    /// Its arguments (after the global options).
    pub args: Vec<String>,
    /// Its stdin.
    pub stdin: &'static [u8],
}

fn cmd(name: &'static str, args: &[&str]) -> AgentCommand {
    AgentCommand { name, args: args.iter().map(ToString::to_string).collect(), stdin: b"" }
}

/// The subcommands: guest paths under `/tmp`, host paths under `host` (which exists;
/// an upload's source is made there).
pub fn agent_commands(host: &Path) -> Vec<AgentCommand> {
    let up = host.join("up.txt");
    std::fs::write(&up, b"up\n").expect("write the upload's source");
    let (up, down, dir_down, zip) = (
        up.display().to_string(),
        host.join("down.txt").display().to_string(),
        host.join("dirdown").display().to_string(),
        host.join("dir.zip").display().to_string(),
    );
    let mut write = cmd("write", &["write", "/tmp/w.txt"]);
    write.stdin = b"data\n";
    let mut exec_stdin = cmd("exec with stdin", &["exec", "--", "cat"]);
    exec_stdin.stdin = b"through stdin\n";
    vec![
        cmd("info", &["info"]),
        cmd("--json info", &["--json", "info"]),
        cmd("exec", &["exec", "--", "true"]),
        exec_stdin,
        cmd("exec --capture", &["exec", "--capture", "--", "true"]),
        cmd("--json exec --capture", &["--json", "exec", "--capture", "--", "true"]),
        cmd("run", &["run", "--", "true"]),
        cmd("run -d", &["run", "-d", "--", "true"]),
        cmd("jobs", &["jobs"]),
        cmd("job status", &["job", "status", "j1"]),
        cmd("job wait", &["job", "wait", "j1"]),
        cmd("job kill", &["job", "kill", "j1"]),
        cmd("job logs", &["job", "logs", "j1"]),
        cmd("cat", &["cat", "/etc/hostname"]),
        write,
        cmd("ls", &["ls", "/tmp"]),
        cmd("stat", &["stat", "/tmp"]),
        cmd("rm", &["rm", "/tmp/nothing-here"]),
        cmd("mv", &["mv", "/tmp/a", "/tmp/b"]),
        cmd("mkdir", &["mkdir", "-p", "/tmp/m"]),
        cmd("cp host to guest", &["cp", &up, ":/tmp/up.txt"]),
        cmd("cp guest to host", &["cp", ":/etc/hostname", &down]),
        cmd("cp a guest dir to host", &["cp", ":/etc", &dir_down]),
        cmd("download", &["download", "/etc", "-o", &zip]),
    ]
}

/// Spawns `command` with `stdin` fed to it, waits up to `guard` (killing it then and
/// failing the test), and returns its output and how long it ran.
pub fn run_bounded(mut command: Command, stdin: &[u8], guard: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn atoll");
    let mut input = child.stdin.take().expect("stdin");
    let _ = input.write_all(stdin);
    drop(input);
    let out = crate::vm::wait_bounded(child, guard)
        .unwrap_or_else(|| panic!("{command:?} still ran after {} s and was killed", guard.as_secs()));
    (out, started.elapsed())
}
