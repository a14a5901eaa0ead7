//! The official MCP clients driving the same servers with the same calls as the bare
//! client: the Python SDK 2.x and 1.x (`bench/mcp_official.py`, each in its own venv)
//! and the TypeScript SDK (`bench/ts/mcp_official.mjs`). Each reads the same JSON on
//! stdin and prints the same report.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use serde_json::json;

use crate::mcp::{Measured, Op, ServerSpec, durations};
use crate::stats::Samples;

#[derive(Deserialize)]
struct Entry {
    cold: Vec<f64>,
    calls: HashMap<String, Vec<f64>>,
    error: Option<String>,
}

/// Per server: its figures, or why the Python client could not take them.
pub(crate) type Results = Vec<(String, Result<Measured, String>)>;

/// An official client: an interpreter and the script that drives the servers with it.
pub(crate) struct OfficialClient {
    /// The section's title.
    pub(crate) title: &'static str,
    /// The interpreter (a venv's python, node).
    pub(crate) program: std::path::PathBuf,
    /// The driver script.
    pub(crate) script: std::path::PathBuf,
}

/// Runs `client` over `servers`.
pub(crate) fn measure(
    client: &OfficialClient,
    servers: &[ServerSpec],
    cold_runs: usize,
    warmup: usize,
    n: usize,
) -> Result<Results> {
    let input = json!({"cold_runs": cold_runs, "warmup": warmup, "iterations": n, "servers": servers});
    let (python, script) = (&client.program, &client.script);
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not run {}; bench/run.sh installs it", python.display()))?;
    child.stdin.take().context("python stdin")?.write_all(&serde_json::to_vec(&input)?)?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("{} failed with {}; its stderr is above", script.display(), out.status);
    }
    let report: HashMap<String, Entry> =
        serde_json::from_slice(&out.stdout).context("the client printed no JSON report")?;
    Ok(servers
        .iter()
        .map(|s| {
            let r = match report.get(&s.name) {
                None => Err("no figures reported".to_string()),
                Some(Entry { error: Some(e), .. }) => Err(e.clone()),
                Some(e) => Ok(Measured {
                    cold: Samples::from_durations(durations(&e.cold)),
                    calls: Op::ALL
                        .iter()
                        .filter_map(|op| {
                            let key = serde_json::to_value(op).ok()?.as_str()?.to_string();
                            e.calls.get(&key).map(|v| (*op, Samples::from_durations(durations(v))))
                        })
                        .collect(),
                }),
            };
            (s.name.clone(), r)
        })
        .collect())
}
