//! The agent restarted in service mode: an `atoll` call open when it dies ends with exit
//! 69 and says the connection was lost; a call while it is down says nobody answers;
//! the next call after it is back on the same socket works at once.

mod cli_util;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cli_util::{atoll, atoll_cmd, code, ok, stderr};

/// A call still running after this long is hung (a hang guard, not a timing check).
const HANG_GUARD: Duration = Duration::from_secs(60);

/// An atoll-agent on a fixed socket path, so that a new one can take the old one's place.
struct ServiceAgent {
    child: Child,
}

impl ServiceAgent {
    fn start(socket: &Path, jobs: &Path) -> ServiceAgent {
        let child = Command::new(atoll_tests::workspace_bin("atoll-agent"))
            .arg("--listen")
            .arg(format!("unix://{}", socket.display()))
            .arg("--job-dir")
            .arg(jobs)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn atoll-agent");
        let mut agent = ServiceAgent { child };
        let deadline = Instant::now() + HANG_GUARD;
        while std::os::unix::net::UnixStream::connect(socket).is_err() {
            assert!(agent.child.try_wait().unwrap().is_none(), "atoll-agent exited before listening");
            assert!(Instant::now() < deadline, "atoll-agent did not listen on {}", socket.display());
            std::thread::sleep(Duration::from_millis(10));
        }
        agent
    }

    /// SIGKILL, as a crash or an OOM kill would: the socket file stays behind.
    fn crash(mut self) {
        self.child.kill().expect("kill atoll-agent");
        self.child.wait().expect("reap atoll-agent");
    }
}

impl Drop for ServiceAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn paths(dir: &tempfile::TempDir) -> (PathBuf, PathBuf, String) {
    let socket = dir.path().join("agent.sock");
    let addr = format!("unix://{}", socket.display());
    (socket, dir.path().join("jobs"), addr)
}

#[test]
fn consecutive_cli_calls_across_an_agent_restart_work_on_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, jobs, addr) = paths(&dir);

    let first = ServiceAgent::start(&socket, &jobs);
    assert_eq!(ok(&atoll(&addr, &["exec", "--", "echo", "one"])), "one\n");
    first.crash();
    assert!(socket.exists(), "a crashed agent leaves its socket file");

    // While it is down: exit 69 and a sentence that says nobody answers there.
    let down = atoll(&addr, &["exec", "--", "true"]);
    assert_eq!(code(&down), 69, "{}", stderr(&down));
    assert!(stderr(&down).contains("is atoll-agent running and listening there?"), "{}", stderr(&down));

    // A new agent on the same (stale) socket path serves the very next call.
    let _second = ServiceAgent::start(&socket, &jobs);
    assert_eq!(ok(&atoll(&addr, &["exec", "--", "echo", "two"])), "two\n");
    assert_eq!(ok(&atoll(&addr, &["exec", "--", "echo", "three"])), "three\n");
}

#[test]
fn an_open_cli_call_ends_with_a_clear_error_when_the_agent_dies() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, jobs, addr) = paths(&dir);
    let agent = ServiceAgent::start(&socket, &jobs);

    let mut exec = atoll_cmd(&addr, &["exec", "--", "sh", "-c", "echo started; exec sleep 600"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn atoll exec");
    let mut first = String::new();
    BufReader::new(exec.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert_eq!(first, "started\n");
    agent.crash();

    let pid = exec.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(exec.wait_with_output()));
    let out = match rx.recv_timeout(HANG_GUARD) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            panic!("atoll exec hung after its agent was killed");
        }
    };
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(stderr(&out).contains("lost the connection to the agent"), "{}", stderr(&out));

    let _back = ServiceAgent::start(&socket, &jobs);
    assert_eq!(ok(&atoll(&addr, &["exec", "--", "echo", "back"])), "back\n");
}
