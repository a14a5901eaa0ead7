//! Reaching an agent: the hybrid-vsock handshake against a listener that speaks it
//! (forwarding to a real agent), its failure modes ("EOF before OK", "never answers"),
//! and the error shapes and exit codes for unreachable agents and bad addresses.

mod cli_util;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use atoll_tests::Agent;
use cli_util::{atoll, code, json, json_error, s, stderr};

/// How the fake VMM socket treats each connection.
#[derive(Clone, Copy)]
enum Vmm {
    /// Answer `OK <n>` and splice the stream to the agent's socket.
    Forward,
    /// Read the CONNECT line and hang up.
    HangUp,
    /// Read the CONNECT line and never answer.
    Silent,
    /// Answer something other than OK.
    Garbage,
}

/// A Unix listener speaking the Firecracker hybrid-vsock protocol; reports each
/// CONNECT line it reads on the returned channel.
fn fake_vmm(dir: &Path, mode: Vmm, agent: Option<PathBuf>) -> (PathBuf, mpsc::Receiver<String>) {
    let path = dir.join("vm.vsock");
    let listener = UnixListener::bind(&path).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let tx = tx.clone();
            let agent = agent.clone();
            std::thread::spawn(move || serve(conn, mode, agent, tx));
        }
    });
    (path, rx)
}

fn serve(conn: UnixStream, mode: Vmm, agent: Option<PathBuf>, tx: mpsc::Sender<String>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    // Byte-wise so that nothing after the newline is swallowed by the buffer.
    let mut byte = [0u8; 1];
    while reader.get_mut().read(&mut byte).unwrap_or(0) == 1 {
        line.push(byte[0] as char);
        if byte[0] == b'\n' {
            break;
        }
    }
    let _ = tx.send(line);
    let mut conn = conn;
    match mode {
        Vmm::HangUp => drop(conn),
        Vmm::Silent => {
            let _ = reader.fill_buf();
            let mut sink = Vec::new();
            let _ = conn.read_to_end(&mut sink);
        }
        Vmm::Garbage => {
            let _ = conn.write_all(b"NO SUCH PORT\n");
        }
        Vmm::Forward => {
            let upstream = UnixStream::connect(agent.expect("agent socket")).unwrap();
            conn.write_all(b"OK 1073741824\n").unwrap();
            let (mut a_in, mut a_out) = (conn.try_clone().unwrap(), conn);
            let (mut u_in, mut u_out) = (upstream.try_clone().unwrap(), upstream);
            let up = std::thread::spawn(move || {
                let _ = std::io::copy(&mut a_in, &mut u_out);
                let _ = u_out.shutdown(std::net::Shutdown::Write);
            });
            let _ = std::io::copy(&mut u_in, &mut a_out);
            let _ = a_out.shutdown(std::net::Shutdown::Write);
            let _ = up.join();
        }
    }
}

#[test]
fn hybrid_vsock_handshake_reaches_the_agent() {
    let agent = Agent::start();
    let vmm_dir = tempfile::tempdir().unwrap();
    let (sock, connects) = fake_vmm(vmm_dir.path(), Vmm::Forward, Some(agent.socket.clone()));
    let file = agent.dir.path().join("hello.txt");
    std::fs::write(&file, b"through the VMM socket\n").unwrap();
    let addr = format!("hvsock://{}:1024", sock.display());
    let out = atoll(&addr, &["cat", s(&file)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(out.stdout, b"through the VMM socket\n");
    assert_eq!(connects.recv().unwrap(), "CONNECT 1024\n");
    let st = json(&atoll(&addr, &["--json", "stat", s(&file)]));
    assert_eq!(st["size"], 23);
}

#[test]
fn eof_before_ok_means_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, connects) = fake_vmm(dir.path(), Vmm::HangUp, None);
    let addr = format!("hvsock://{}:1024", sock.display());
    let out = atoll(&addr, &["stat", "/"]);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("closed the connection before answering OK"), "{err}");
    assert!(err.contains("not booted yet or atoll-agent is not listening on port 1024"), "{err}");
    assert_eq!(connects.recv().unwrap(), "CONNECT 1024\n");
}

#[test]
fn a_refusal_is_reported_with_its_words() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, _connects) = fake_vmm(dir.path(), Vmm::Garbage, None);
    let out = atoll(&format!("hvsock://{}:5000", sock.display()), &["--json", "stat", "/"]);
    assert_eq!(code(&out), 69);
    let e = json_error(&out);
    assert_eq!(e["kind"], "unreachable");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("NO SUCH PORT") && msg.contains("port 5000"), "{msg}");
}

#[test]
fn a_silent_vmm_hits_the_connect_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, _connects) = fake_vmm(dir.path(), Vmm::Silent, None);
    let addr = format!("hvsock://{}:1024", sock.display());
    let out = atoll(&addr, &["--connect-timeout", "1s", "info"]);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim_end(),
        format!(
            "atoll: the VM socket at {addr} took the connection but did not let us through to guest port \
             1024 within 1 s: the VM is not booted yet, or it is stopped"
        )
    );
}

#[test]
fn a_missing_socket_is_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nothing.sock");
    let out = atoll(&format!("unix://{}", path.display()), &["info"]);
    assert_eq!(code(&out), 69);
    let err = stderr(&out);
    assert!(err.contains(&format!("no socket at {}", path.display())), "{err}");

    let out = atoll(&format!("unix://{}", path.display()), &["--json", "exec", "--", "true"]);
    assert_eq!(code(&out), 69);
    let e = json_error(&out);
    assert_eq!((e["kind"].as_str(), e["exit_code"].as_i64()), (Some("unreachable"), Some(69)));
    assert!(out.stdout.is_empty());
}

#[test]
fn a_refused_tcp_port_is_unreachable() {
    // Bind and drop to find a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = atoll(&format!("tcp://127.0.0.1:{port}"), &["info"]);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(stderr(&out).contains("could not connect to the agent at tcp://127.0.0.1"), "{}", stderr(&out));
}

#[test]
fn bad_addresses_and_usage_errors_exit_2() {
    let out = atoll("/tmp/x.sock", &["info"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("use vsock://CID:PORT, hvsock:///PATH:PORT"), "{}", stderr(&out));

    let out = atoll("", &["info"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("pass --agent ADDR"), "{}", stderr(&out));

    let out = atoll("", &["--json", "info", "--no-such-flag"]);
    assert_eq!(code(&out), 2);
    assert_eq!(json_error(&out)["kind"], "usage");

    let out = atoll("unix:///x.sock", &["cp", "a", "b"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("write the guest side as :/path"), "{}", stderr(&out));

    let state = atoll_tests::vm::short_tempdir();
    let out = cli_util::atoll_cmd("", &["--sandbox", "ghost", "info"])
        .env("ATOLL_STATE_DIR", state.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("ghost"), "{}", stderr(&out));
}

#[test]
fn help_teaches_and_completions_generate() {
    let out = atoll("", &["--help"]);
    let help = cli_util::ok(&out);
    assert!(help.contains("Examples:") && help.contains("Exit codes:") && help.contains("69"), "{help}");
    let script = cli_util::ok(&atoll("", &["completions", "bash"]));
    assert!(script.contains("_atoll") && script.contains("exec"), "{}", &script[..200.min(script.len())]);
}

#[test]
fn info_reports_the_agent() {
    let agent = Agent::start();
    let doc = json(&atoll(&agent.address(), &["--json", "info"]));
    assert!(doc["agent_version"].as_str().is_some_and(|v| !v.is_empty()), "{doc}");
    assert!(doc["cpus"].as_u64().is_some_and(|n| n >= 1), "{doc}");
    assert_eq!(doc["pid1"], false);
    let text = cli_util::ok(&atoll(&agent.address(), &["info"]));
    assert!(text.contains(&format!("at {}", agent.address())), "{text}");
}

#[test]
fn ls_without_a_path_lists_sandboxes() {
    let state = atoll_tests::vm::short_tempdir();
    let out = cli_util::atoll_cmd("", &["--json", "ls"])
        .env("ATOLL_STATE_DIR", state.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(json(&out), serde_json::json!([]));
}
