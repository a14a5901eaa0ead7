//! MCP servers driven by a bare newline-delimited JSON-RPC client over stdio: cold start
//! (spawn, `initialize`, `tools/list`) and warm `tools/call` latency.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::{Value, json};

use crate::stats::Samples;

/// The MCP protocol version the bench clients ask for.
const PROTOCOL_VERSION: &str = "2025-06-18";

/// The operations compared across servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum Op {
    /// Run `echo hi`.
    Exec,
    /// Read a 1 KiB file.
    Read,
    /// Write a 1 KiB file.
    Write,
    /// Write a 1 KiB file on tmpfs, where a `minimal` sandbox keeps its files: the write
    /// without the host disk.
    WriteMem,
    /// List a directory of 100 entries: names and types, no stat per entry.
    List,
    /// List a directory of 100 entries with each one's size and mtime (a stat each).
    ListStat,
}

impl Op {
    /// All of them, in table order.
    pub(crate) const ALL: [Op; 6] = [Op::Exec, Op::Read, Op::Write, Op::WriteMem, Op::List, Op::ListStat];

    /// How the table names it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Op::Exec => "exec `echo hi`",
            Op::Read => "read 1 KiB",
            Op::Write => "write 1 KiB",
            Op::WriteMem => "write 1 KiB on tmpfs",
            Op::List => "list 100 entries",
            Op::ListStat => "list 100 entries with size and mtime",
        }
    }
}

/// One tool call standing for an [`Op`] on one server.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ToolCall {
    /// Which operation.
    pub(crate) op: Op,
    /// The server's tool.
    pub(crate) tool: String,
    /// Its arguments.
    pub(crate) arguments: Value,
    /// Text the result must contain, so a failed call is never timed as a fast one.
    pub(crate) expect: String,
}

/// An MCP server to start over stdio, and the calls it answers.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ServerSpec {
    /// Name in the table.
    pub(crate) name: String,
    /// Program to run.
    pub(crate) command: PathBuf,
    /// Its arguments.
    pub(crate) args: Vec<String>,
    /// Extra environment.
    pub(crate) env: Vec<(String, String)>,
    /// Working directory.
    pub(crate) cwd: PathBuf,
    /// The operations it offers.
    pub(crate) calls: Vec<ToolCall>,
}

/// A live session with a server.
struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    name: String,
}

impl Session {
    /// Spawns the server (stderr to `log`) and completes the handshake and `tools/list`.
    fn start(spec: &ServerSpec, log: &Path) -> Result<Session> {
        let mut child = Command::new(&spec.command)
            .args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&spec.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(File::create(log)?)
            .spawn()
            .with_context(|| format!("could not start {} ({})", spec.name, spec.command.display()))?;
        let stdin = child.stdin.take().context("child stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("child stdout")?);
        let mut s = Session { child, stdin, stdout, next_id: 0, name: spec.name.clone() };
        s.request(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "atoll-bench", "version": env!("CARGO_PKG_VERSION")},
            }),
        )?;
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        let tools = s.request("tools/list", json!({}))?;
        let names: Vec<&str> =
            tools["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
        for call in &spec.calls {
            if !names.contains(&call.tool.as_str()) {
                bail!(
                    "{} has no tool `{}` (it has: {}); update bench/src/peers.rs",
                    spec.name,
                    call.tool,
                    names.join(", ")
                );
            }
        }
        Ok(s)
    }

    fn send(&mut self, msg: &Value) -> Result<()> {
        let mut line = serde_json::to_vec(msg)?;
        line.push(b'\n');
        self.stdin.write_all(&line)?;
        self.stdin.flush()?;
        Ok(())
    }

    /// Sends a request and reads lines until its response, skipping notifications.
    fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line)? == 0 {
                bail!("{} closed stdout while we waited for `{method}`; see its log", self.name);
            }
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                continue; // a server printing non-protocol text: not ours to judge here
            };
            if msg.get("id").and_then(Value::as_u64) != Some(id) || msg.get("method").is_some() {
                continue;
            }
            if let Some(err) = msg.get("error") {
                bail!("{} answered `{method}` with an error: {err}", self.name);
            }
            return Ok(msg["result"].clone());
        }
    }

    /// Calls a tool and checks that its result says it worked.
    fn call(&mut self, call: &ToolCall) -> Result<()> {
        let result = self.request("tools/call", json!({"name": call.tool, "arguments": call.arguments}))?;
        check_result(&self.name, call, &result)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `tools/call` result counts only if it is not an error and holds the expected text.
pub(crate) fn check_result(server: &str, call: &ToolCall, result: &Value) -> Result<()> {
    let text = result.to_string();
    if result["isError"].as_bool() == Some(true) || !text.contains(&call.expect) {
        let short: String = text.chars().take(300).collect();
        bail!("{server} `{}` did not do what was asked: {short}", call.tool);
    }
    Ok(())
}

/// What the bare client measured on one server.
pub(crate) struct Measured {
    /// Spawn to `tools/list` answered.
    pub(crate) cold: Samples,
    /// Warm call latency per operation.
    pub(crate) calls: Vec<(Op, Samples)>,
}

/// Runs `cold_runs` cold starts, then `n` calls (after `warmup`) of each operation.
pub(crate) fn measure(
    spec: &ServerSpec,
    logs: &Path,
    cold_runs: usize,
    warmup: usize,
    n: usize,
) -> Result<Measured> {
    let log = logs.join(format!("{}.stderr.log", spec.name.replace(['/', ' ', '@'], "_")));
    let cold = Samples::measure(0, cold_runs, || Session::start(spec, &log).map(drop))?;
    let mut session = Session::start(spec, &log)?;
    let mut calls = Vec::new();
    for call in &spec.calls {
        calls.push((call.op, Samples::measure(warmup, n, || session.call(call))?));
    }
    Ok(Measured { cold, calls })
}

/// Seconds as the Python client reports them.
pub(crate) fn durations(secs: &[f64]) -> Vec<Duration> {
    secs.iter().map(|&s| Duration::from_secs_f64(s.max(0.0))).collect()
}
