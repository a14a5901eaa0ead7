//! Running the real `atoll` binary as a subprocess, for the `cli_*` tests.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};

use sha2::{Digest, Sha256};

/// `atoll --agent ADDR ARGS...` with stdin closed.
pub fn atoll(addr: &str, args: &[&str]) -> Output {
    atoll_cmd(addr, args).stdin(Stdio::null()).output().expect("run atoll")
}

/// `atoll --agent ADDR ARGS...` with `input` on its stdin.
pub fn atoll_stdin(addr: &str, args: &[&str], input: &[u8]) -> Output {
    let mut child = atoll_cmd(addr, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn atoll");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait for atoll");
    feeder.join().expect("stdin feeder");
    out
}

/// The command, for tests that need more control.
pub fn atoll_cmd(addr: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(atoll_tests::workspace_bin("atoll"));
    cmd.env_remove("ATOLL_AGENT").env_remove("ATOLL_SANDBOX").env("NO_COLOR", "1");
    if !addr.is_empty() {
        cmd.arg("--agent").arg(addr);
    }
    cmd.args(args);
    cmd
}

/// The exit code, failing the test if a signal ended atoll.
pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or_else(|| panic!("atoll died by a signal: {}", stderr(out)))
}

/// stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// stdout as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts success and returns stdout.
pub fn ok(out: &Output) -> String {
    assert_eq!(code(out), 0, "atoll failed: {}", stderr(out));
    stdout(out)
}

/// stdout parsed as one JSON document.
pub fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {}", stdout(out)))
}

/// The `{"error": {...}}` document on stderr.
pub fn json_error(out: &Output) -> serde_json::Value {
    let doc: serde_json::Value = serde_json::from_slice(&out.stderr)
        .unwrap_or_else(|e| panic!("stderr is not one JSON document ({e}): {}", stderr(out)));
    doc.get("error").cloned().unwrap_or_else(|| panic!("no `error` key: {doc}"))
}

/// sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> [u8; 32] {
    let mut f = std::fs::File::open(path).expect("open for hashing");
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).expect("hash");
    h.finalize().into()
}

/// sha256 of bytes.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// A path as &str.
pub fn s(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

/// `atoll mcp` spoken to over stdio in raw JSON-RPC lines (no SDK), for tests of what the
/// server does against a broken or hostile agent. Killed when dropped.
pub struct McpStdio {
    child: Child,
    to: Option<ChildStdin>,
    from: BufReader<ChildStdout>,
}

impl McpStdio {
    /// Spawns `cmd` (an `atoll ... mcp` command; its stdio is set here) and initializes
    /// the session.
    pub fn start(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn atoll mcp");
        let to = child.stdin.take();
        let from = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut mcp = Self { child, to, from };
        mcp.send(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}}));
        mcp.answer(1);
        mcp.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Calls tool `name` with `arguments` as request `id` (from 2 on); the whole reply.
    pub fn call_tool(&mut self, id: u64, name: &str, arguments: serde_json::Value) -> serde_json::Value {
        self.send(&serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": name, "arguments": arguments}}));
        self.answer(id)
    }

    fn send(&mut self, msg: &serde_json::Value) {
        writeln!(self.to.as_mut().expect("stdin open"), "{msg}").unwrap();
    }

    fn answer(&mut self, id: u64) -> serde_json::Value {
        loop {
            let mut line = String::new();
            assert!(self.from.read_line(&mut line).unwrap() > 0, "atoll mcp ended");
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }
}

impl Drop for McpStdio {
    fn drop(&mut self) {
        drop(self.to.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
