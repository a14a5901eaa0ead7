//! `--connect-timeout` bounds every step of reaching an agent: against endpoints that
//! take the connection and then say nothing (at the socket, after the hybrid-vsock
//! `CONNECT`, after `OK`, on TCP), that start an HTTP/2 session and never answer a
//! call, or that start every response and never finish one, every subcommand that
//! talks to an agent, and an MCP tool call, ends with exit
//! 69 (a tool error for MCP) within the timeout plus 2 s, with a message that names
//! what was reached and what did not answer. The bound is a correctness limit (the
//! command must not wait on), generous for a busy 2-core machine, not a benchmark.

mod cli_util;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::process::Command;
use std::time::{Duration, Instant};

use atoll_tests::commands::{agent_commands, run_bounded};
use cli_util::{McpStdio, atoll_cmd, code, stderr};

/// The timeout every command gets.
const TIMEOUT: Duration = Duration::from_secs(2);
/// How much longer than the timeout a command may take, at most, to give up.
const MARGIN: Duration = Duration::from_secs(2);
/// Commands run at once (each mostly waits).
const AT_ONCE: usize = 8;

/// How an endpoint treats each connection it takes.
#[derive(Clone, Copy, Debug)]
enum Silence {
    /// Takes the connection, never reads or writes.
    AtTheSocket,
    /// Reads the hybrid-vsock `CONNECT` line, never answers it.
    AfterConnect,
    /// Answers `OK` to `CONNECT`, then says nothing.
    AfterOk,
    /// Speaks HTTP/2 (its SETTINGS and their ACK) but never answers a request.
    AfterHttp2Settings,
    /// Speaks HTTP/2 and starts every response (a gRPC response's headers, and a PING's
    /// ACK) but never sends a message or a status.
    AfterResponseHeaders,
}

/// A listening endpoint that keeps every connection open until the test ends.
struct Endpoint {
    addr: String,
    _dir: tempfile::TempDir,
}

impl Endpoint {
    fn unix(silence: Silence) -> Endpoint {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let listener = UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                std::thread::spawn(move || serve(conn, silence));
            }
        });
        let addr = match silence {
            Silence::AfterConnect | Silence::AfterOk => format!("hvsock://{}:1024", path.display()),
            _ => format!("unix://{}", path.display()),
        };
        Endpoint { addr, _dir: dir }
    }

    fn tcp() -> Endpoint {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = format!("tcp://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            for conn in listener.incoming() {
                kept.extend(conn.ok());
            }
        });
        Endpoint { addr, _dir: tempfile::tempdir().unwrap() }
    }
}

/// Serves one connection with `silence`; holds it open (reading, where the peer expects
/// its writes to be read) until the client goes away.
fn serve<S: Read + Write>(mut conn: S, silence: Silence) {
    const SETTINGS: [u8; 9] = [0, 0, 0, 0x4, 0, 0, 0, 0, 0];
    const SETTINGS_ACK: [u8; 9] = [0, 0, 0, 0x4, 0x1, 0, 0, 0, 0];
    let mut sink = [0u8; 4096];
    match silence {
        Silence::AtTheSocket => {
            // Nothing read: what the client sent stays queued.
            std::thread::sleep(Duration::from_secs(3600));
        }
        Silence::AfterConnect | Silence::AfterOk => {
            let mut reader = BufReader::new(&mut conn);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            if matches!(silence, Silence::AfterOk) {
                let _ = conn.write_all(b"OK 1073741824\n");
            }
            while conn.read(&mut sink).is_ok_and(|n| n > 0) {}
        }
        Silence::AfterHttp2Settings => {
            let _ = conn.write_all(&SETTINGS);
            let _ = conn.write_all(&SETTINGS_ACK);
            while conn.read(&mut sink).is_ok_and(|n| n > 0) {}
        }
        Silence::AfterResponseHeaders => {
            let _ = conn.write_all(&SETTINGS);
            let _ = conn.write_all(&SETTINGS_ACK);
            let _ = headers_only(&mut conn);
        }
    }
}

/// Answers each request's HEADERS frame with response headers (`:status 200`,
/// `content-type: application/grpc`, END_HEADERS, no END_STREAM) and each PING with its
/// ACK; nothing more, until the client goes away.
fn headers_only<S: Read + Write>(conn: &mut S) -> std::io::Result<()> {
    // HPACK: `:status 200` (static index 8); `content-type` (static index 31) literal.
    const BLOCK: &[u8] = b"\x88\x0f\x10\x10application/grpc";
    let mut preface = [0u8; 24];
    conn.read_exact(&mut preface)?;
    loop {
        let mut head = [0u8; 9];
        conn.read_exact(&mut head)?;
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0u8; len];
        conn.read_exact(&mut payload)?;
        let (kind, flags, stream) = (head[3], head[4], [head[5] & 0x7f, head[6], head[7], head[8]]);
        let reply = |kind: u8, flags: u8, payload: &[u8]| {
            let n = u32::try_from(payload.len()).expect("a frame's payload fits 24 bits").to_be_bytes();
            let mut frame = vec![n[1], n[2], n[3], kind, flags];
            frame.extend_from_slice(&stream);
            frame.extend_from_slice(payload);
            frame
        };
        match kind {
            0x1 => conn.write_all(&reply(0x1, 0x4, BLOCK))?,
            0x6 if flags & 0x1 == 0 => conn.write_all(&reply(0x6, 0x1, &payload))?,
            _ => {}
        }
    }
}

/// Runs every agent subcommand against `addr` with `--connect-timeout 2s`: each ends
/// within the bound with exit 69 and a message holding `said`.
fn every_command_gives_up(addr: &str, said: &str) {
    let host = tempfile::tempdir().unwrap();
    let commands = agent_commands(host.path());
    let timeout = format!("{}s", TIMEOUT.as_secs());
    for batch in commands.chunks(AT_ONCE) {
        std::thread::scope(|scope| {
            for c in batch {
                let timeout = &timeout;
                scope.spawn(move || {
                    let args: Vec<&str> = c.args.iter().map(String::as_str).collect();
                    let command = atoll_cmd(addr, &[&["--connect-timeout", timeout.as_str()], &args[..]].concat());
                    let (out, took) = run_bounded(command, c.stdin, Duration::from_secs(120));
                    let err = stderr(&out);
                    assert_eq!(code(&out), 69, "`atoll {}` at {addr}: {err}", c.name);
                    assert!(
                        took < TIMEOUT + MARGIN,
                        "`atoll {}` at {addr} took {took:?}, past the {TIMEOUT:?} timeout + {MARGIN:?}: {err}",
                        c.name
                    );
                    assert!(err.contains(said), "`atoll {}` at {addr} said: {err}", c.name);
                    assert!(err.contains(addr), "`atoll {}` does not name {addr}: {err}", c.name);
                    if c.name.starts_with("--json") {
                        assert!(err.contains("\"kind\":\"unreachable\""), "`atoll {}`: {err}", c.name);
                    }
                });
            }
        });
    }
    for leftover in ["down.txt", "dirdown", "dir.zip"] {
        assert!(!host.path().join(leftover).exists(), "a failed command left {leftover} behind");
    }
}

#[test]
fn a_unix_socket_that_takes_the_connection_and_says_nothing() {
    let e = Endpoint::unix(Silence::AtTheSocket);
    every_command_gives_up(&e.addr, "took the connection but sent nothing back within 2 s");
}

#[test]
fn a_tcp_listener_that_takes_the_connection_and_says_nothing() {
    let e = Endpoint::tcp();
    every_command_gives_up(&e.addr, "took the connection but sent nothing back within 2 s");
}

#[test]
fn a_vm_socket_that_reads_connect_and_never_answers() {
    let e = Endpoint::unix(Silence::AfterConnect);
    every_command_gives_up(&e.addr, "did not let us through to guest port 1024 within 2 s");
}

#[test]
fn a_vm_socket_that_answers_ok_then_says_nothing() {
    let e = Endpoint::unix(Silence::AfterOk);
    every_command_gives_up(&e.addr, "took the connection but sent nothing back within 2 s");
}

#[test]
fn an_endpoint_that_speaks_http2_but_never_answers_a_call() {
    let e = Endpoint::unix(Silence::AfterHttp2Settings);
    every_command_gives_up(&e.addr, "started a session, but the agent did not answer within 2 s");
}

/// An endpoint that starts each response and never finishes one (no message, no status)
/// does not hold a command past the timeout either: response headers are not an answer.
#[test]
fn an_endpoint_that_sends_response_headers_but_never_a_message() {
    let e = Endpoint::unix(Silence::AfterResponseHeaders);
    every_command_gives_up(&e.addr, "started a session, but the agent did not answer within 2 s");
}

/// `atoll mcp` pinned to a silent agent: a guest tool call ends with a tool error that
/// says what did not answer, within the bound, and the server keeps serving.
#[test]
fn an_mcp_tool_call_gives_up_too() {
    for (e, said) in [
        (Endpoint::unix(Silence::AtTheSocket), "sent nothing back within 2 s"),
        (Endpoint::unix(Silence::AfterHttp2Settings), "the agent did not answer within 2 s"),
    ] {
        let mut server = Command::new(atoll_tests::workspace_bin("atoll"));
        server.env_remove("ATOLL_AGENT").env_remove("ATOLL_SANDBOX").args([
            "--connect-timeout",
            "2s",
            "--agent",
            &e.addr,
            "mcp",
        ]);
        let mut mcp = McpStdio::start(server);
        for id in [2, 3] {
            let started = Instant::now();
            let reply = mcp.call_tool(id, "sandbox_exec", serde_json::json!({"command": "true"}));
            let took = started.elapsed();
            let result = &reply["result"];
            assert_eq!(result["isError"], true, "{reply}");
            let text = result["content"][0]["text"].as_str().unwrap_or_default();
            assert!(text.contains(said) && text.contains(&e.addr), "{reply}");
            assert!(took < TIMEOUT + MARGIN, "the tool call took {took:?}: {reply}");
        }
    }
}
