//! `atoll mcp --http` next to `atoll mcp` over stdio, with the official clients: the same tool
//! call one at a time over stdio, over HTTP in a session and (Python) over stateless
//! 2026-07-28 HTTP; then 50 HTTP clients calling at once. The drivers are
//! `bench/mcp_http.py` and `bench/ts/mcp_http.mjs`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use serde_json::json;

use crate::mcp::durations;
use crate::report::Row;
use crate::stats::{Samples, fmt_dur};

/// The clients that call at once.
const CLIENTS: usize = 50;

/// A running `atoll mcp --http 127.0.0.1:0`; killed when dropped.
pub(crate) struct HttpServer {
    child: Child,
    /// `http://127.0.0.1:PORT/mcp`.
    pub(crate) url: String,
}

impl HttpServer {
    /// Starts `atoll --agent AGENT mcp --http 127.0.0.1:0` and reads its URL from its log.
    pub(crate) fn start(atoll: &Path, agent: &str, log: &Path) -> Result<HttpServer> {
        let mut child = Command::new(atoll)
            .args(["--agent", agent, "mcp", "--http", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?)
            .spawn()
            .with_context(|| format!("could not start {}", atoll.display()))?;
        let t = Instant::now();
        loop {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            if let Some(url) =
                text.split_whitespace().find(|w| w.starts_with("http://") && w.ends_with("/mcp"))
            {
                return Ok(HttpServer { child, url: url.to_owned() });
            }
            if let Some(status) = child.try_wait()? {
                bail!("atoll mcp --http exited with {status}: {text}");
            }
            if t.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                bail!("atoll mcp --http printed no URL within 20 s: {text}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl HttpServer {
    /// CPU time the server process has used so far (user + system), from `/proc`.
    fn cpu(&self) -> Result<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))?;
        // Fields after the command name, which ends at the last ')': utime and stime are
        // the 12th and 13th, in USER_HZ ticks (100 per second on Linux).
        let fields: Vec<&str> =
            stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("").split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).context("odd /proc stat");
        Ok(Duration::from_millis((ticks(11)? + ticks(12)?) * 10))
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A driver: an interpreter and its script.
pub(crate) struct Driver {
    /// The client as the table names it.
    pub(crate) name: &'static str,
    /// The interpreter (a venv's python, node).
    pub(crate) program: PathBuf,
    /// The driver script.
    pub(crate) script: PathBuf,
}

#[derive(Deserialize)]
struct Concurrent {
    clients: usize,
    calls: usize,
    seconds: f64,
}

#[derive(Deserialize)]
struct Report {
    stdio: Vec<f64>,
    http_session: Vec<f64>,
    http_stateless: Option<Vec<f64>>,
    concurrent: Concurrent,
}

/// The rows of one driver: HTTP session (and stateless) latency against stdio, and the
/// concurrent clients' calls per second.
pub(crate) fn rows(
    driver: &Driver,
    server: &HttpServer,
    atoll: &Path,
    agent: &str,
    (warmup, n, per_client): (usize, usize, usize),
) -> Result<Vec<Row>> {
    let input = json!({
        "url": server.url,
        "stdio": {"command": atoll, "args": ["--agent", agent, "mcp"]},
        "call": {"tool": "sandbox_exec", "arguments": {"command": "echo hi"}, "expect": "hi\\n"},
        "warmup": warmup,
        "iterations": n,
        "clients": CLIENTS,
        "calls_per_client": per_client,
    });
    let mut child = Command::new(&driver.program)
        .arg(&driver.script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not run {}; bench/run.sh installs it", driver.program.display()))?;
    let cpu_before = server.cpu()?;
    child.stdin.take().context("driver stdin")?.write_all(&serde_json::to_vec(&input)?)?;
    let out = child.wait_with_output()?;
    let server_cpu = server.cpu()?.saturating_sub(cpu_before);
    if !out.status.success() {
        bail!("{} failed with {}; its stderr is above", driver.script.display(), out.status);
    }
    let report: Report = serde_json::from_slice(&out.stdout).context("the driver printed no JSON report")?;
    let stdio = Samples::from_durations(durations(&report.stdio));
    let session = Samples::from_durations(durations(&report.http_session));
    let name = driver.name;
    let mut rows = vec![Row::latency(
        format!("exec `echo hi`, HTTP session, {name}"),
        &session,
        Some(("stdio", &stdio)),
    )];
    if let Some(stateless) = &report.http_stateless {
        let stateless = Samples::from_durations(durations(stateless));
        rows.push(Row::latency(
            format!("exec `echo hi`, HTTP stateless (2026-07-28), {name}"),
            &stateless,
            Some(("stdio", &stdio)),
        ));
    }
    let timed_modes = 1 + usize::from(report.http_stateless.is_some());
    let c = report.concurrent;
    let http_calls = (warmup + n) * timed_modes + c.calls;
    let rate = c.calls as f64 / c.seconds.max(1e-9);
    let one = 1.0 / session.p50().as_secs_f64().max(1e-9);
    let per_call = server_cpu / u32::try_from(http_calls.max(1)).unwrap_or(u32::MAX);
    rows.push(Row::plain(
        format!("  atoll mcp --http CPU per HTTP call, {name} run"),
        fmt_dur(per_call),
        format!(
            "{} of server CPU over {http_calls} HTTP tool calls (and their connects)",
            fmt_dur(server_cpu)
        ),
        "",
    ));
    rows.push(Row::plain(
        format!("{} HTTP clients at once, {} calls each, {name}", c.clients, c.calls / c.clients.max(1)),
        format!("{rate:.0} calls/s"),
        format!("one HTTP client in sequence: {one:.0} calls/s (1 / p50 {})", fmt_dur(session.p50())),
        format!("{:.2}x", rate / one),
    ));
    Ok(rows)
}
