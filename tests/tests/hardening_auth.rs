//! Who may talk to the agent: a non-loopback TCP listener needs a token, checked on
//! every call; loopback TCP needs none; the `atoll` CLI sends `ATOLL_AGENT_TOKEN`; and env
//! values given to exec never reach the agent's log, even at trace level.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use atoll_tests::workspace_bin;

const TOKEN: &str = "tok-7f3a9c1e5b2d4068";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `atoll-agent` with `args`, stderr piped; waits until `port` accepts.
fn agent(dir: &std::path::Path, port: u16, args: &[&str], env: &[(&str, &str)]) -> Child {
    let mut child = Command::new(workspace_bin("atoll-agent"))
        .arg("--job-dir")
        .arg(dir.join("jobs"))
        .args(args)
        .env_remove("ATOLL_AGENT_TOKEN")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        // A file, not a pipe: at trace level the log outgrows a pipe nobody reads yet.
        .stderr(std::fs::File::create(dir.join("agent.log")).unwrap())
        .spawn()
        .expect("spawn atoll-agent");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("atoll-agent exited early with {status}");
        }
        assert!(Instant::now() < deadline, "atoll-agent did not listen on port {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// `atoll --agent tcp://127.0.0.1:PORT ARGS` with `ATOLL_AGENT_TOKEN` set to `token` if any.
fn atoll(port: u16, token: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(workspace_bin("atoll"));
    cmd.env_remove("ATOLL_AGENT").env_remove("ATOLL_SANDBOX").env_remove("ATOLL_AGENT_TOKEN");
    if let Some(token) = token {
        cmd.env("ATOLL_AGENT_TOKEN", token);
    }
    cmd.arg("--agent").arg(format!("tcp://127.0.0.1:{port}")).args(args).stdin(Stdio::null());
    cmd.output().expect("run atoll")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Stops the agent and returns its log.
fn stop(mut child: Child, dir: &std::path::Path) -> String {
    let _ = child.kill();
    let _ = child.wait();
    text(&std::fs::read(dir.join("agent.log")).unwrap())
}

#[test]
fn a_non_loopback_tcp_listener_without_a_token_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let out = Command::new(workspace_bin("atoll-agent"))
        .args(["--listen", &format!("tcp://0.0.0.0:{port}"), "--no-announce"])
        .arg("--job-dir")
        .arg(dir.path().join("jobs"))
        .env_remove("ATOLL_AGENT_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("without a token") && err.contains("--token-file"), "{err}");
}

#[test]
fn a_non_loopback_tcp_listener_checks_the_token_on_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let port = free_port();
    let listen = format!("tcp://0.0.0.0:{port}");
    let child = agent(dir.path(), port, &["--listen", &listen, "--token-file", file.to_str().unwrap()], &[]);

    let ok = atoll(port, Some(TOKEN), &["exec", "--", "echo", "let in"]);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    assert_eq!(text(&ok.stdout), "let in\n");

    for token in [None, Some("wrong"), Some(&TOKEN[..TOKEN.len() - 1])] {
        let out = atoll(port, token, &["exec", "--", "echo", "must not run"]);
        assert!(!out.status.success(), "token {token:?} was accepted");
        assert!(!text(&out.stdout).contains("must not run"));
        assert!(text(&out.stderr).contains("ATOLL_AGENT_TOKEN"), "token {token:?}: {}", text(&out.stderr));
    }

    // ReadFile and DownloadDir have their own framing of the reply; the check covers them.
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::write(shared.join("note.txt"), "read me\n").unwrap();
    let (note, zip) = (shared.join("note.txt"), dir.path().join("out.zip"));
    let (note, zip, shared) = (note.to_str().unwrap(), zip.to_str().unwrap(), shared.to_str().unwrap());
    let read = atoll(port, Some(TOKEN), &["cat", note]);
    assert_eq!(text(&read.stdout), "read me\n", "{}", text(&read.stderr));
    assert!(atoll(port, Some(TOKEN), &["download", "-o", zip, shared]).status.success());
    std::fs::remove_file(zip).unwrap();
    for token in [None, Some("wrong")] {
        let out = atoll(port, token, &["cat", note]);
        assert!(!out.status.success() && out.stdout.is_empty(), "token {token:?} read the file");
        assert!(text(&out.stderr).contains("ATOLL_AGENT_TOKEN"), "token {token:?}: {}", text(&out.stderr));
        let out = atoll(port, token, &["download", "-o", zip, shared]);
        assert!(!out.status.success(), "token {token:?} downloaded the directory");
        assert!(!std::path::Path::new(zip).exists(), "a refused download left {zip}");
    }
    let log = stop(child, dir.path());
    assert!(!log.contains(TOKEN), "the token was logged: {log}");
}

#[test]
fn the_token_may_come_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("tcp://0.0.0.0:{port}");
    let child = agent(dir.path(), port, &["--listen", &listen], &[("ATOLL_AGENT_TOKEN", TOKEN)]);
    assert!(atoll(port, Some(TOKEN), &["info"]).status.success());
    assert!(!atoll(port, None, &["info"]).status.success());
    stop(child, dir.path());
}

#[test]
fn loopback_tcp_needs_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = agent(dir.path(), port, &["--listen", &format!("tcp://127.0.0.1:{port}")], &[]);
    let out = atoll(port, None, &["exec", "--", "echo", "local"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "local\n");
    stop(child, dir.path());
}

#[test]
fn env_values_given_to_exec_are_never_logged() {
    const SECRET: &str = "hunter2-5e1f0a77c3";
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("tcp://127.0.0.1:{port}");
    let child = agent(dir.path(), port, &["--listen", &listen], &[("ATOLL_AGENT_LOG", "trace")]);
    let run = |args: &[&str]| atoll(port, None, args);
    let out = run(&["exec", "--env", &format!("API_KEY={SECRET}"), "--", "sh", "-c", "test -n \"$API_KEY\""]);
    assert!(out.status.success(), "the secret did not reach the command: {}", text(&out.stderr));
    // Failing paths log too: a missing program, a timeout, a job.
    let _ = run(&["exec", "--env", &format!("API_KEY={SECRET}"), "--", "no-such-program-x"]);
    let _ = run(&["exec", "--timeout", "1s", "--env", &format!("API_KEY={SECRET}"), "--", "sleep", "5"]);
    let log = stop(child, dir.path());
    assert!(log.contains("TRACE") || log.contains("DEBUG"), "the agent did not log at trace level:\n{log}");
    assert!(!log.contains(SECRET), "the secret appeared in the agent's log");
}

#[test]
fn the_unix_socket_is_private_to_its_owner() {
    use std::os::unix::fs::PermissionsExt;
    let agent = atoll_tests::Agent::start();
    let mode = std::fs::metadata(&agent.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "socket mode {mode:o}");
}
