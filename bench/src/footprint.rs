//! The agent's footprint: binary size, memory idle and under a 1 GiB output flood, and
//! how long it takes from exec to listening.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};
use atoll::client::{ExecEvent, ExecSpec};
use futures::StreamExt;

use crate::agent::{Agent, Memory};
use crate::stats::Samples;

/// Startup time of `runs` fresh agents.
pub(crate) fn startup(bin: &Path, dir: &Path, runs: usize) -> Result<Samples> {
    let mut v = Vec::with_capacity(runs);
    for i in 0..runs {
        let a = Agent::start(bin, dir, &format!("startup-{i}"))?;
        v.push(a.startup);
    }
    Ok(Samples::from_durations(v))
}

/// How long after its last call an agent's memory is read as settled: past the one
/// second the agent waits before trimming what its allocator holds free.
pub(crate) const SETTLED: Duration = Duration::from_secs(2);

/// The agent's memory before and after streaming `bytes` of a command's stdout.
pub(crate) struct Flood {
    /// Right after it started listening, before any call.
    pub(crate) idle: Memory,
    /// Right after the flood.
    pub(crate) after: Memory,
    /// [`SETTLED`] after the flood, once the agent has handed freed memory back.
    pub(crate) settled: Memory,
    /// Bytes received.
    pub(crate) bytes: u64,
    /// How long the flood took.
    pub(crate) took: Duration,
}

/// Starts a fresh agent and streams `bytes` of zeros through ExecStream.
pub(crate) async fn flood(bin: &Path, dir: &Path, bytes: u64) -> Result<Flood> {
    let agent = Agent::start(bin, dir, &format!("flood-{bytes}"))?;
    // Let lazy initialisation settle before calling it idle.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let idle = agent.memory()?;
    let client = agent.client().await?;
    let spec = ExecSpec::shell(format!("head -c {bytes} /dev/zero"));
    let t = std::time::Instant::now();
    let mut events = client.exec_stream::<tokio::io::Empty>(&spec, None).await?;
    let mut got = 0u64;
    while let Some(ev) = events.next().await {
        match ev? {
            ExecEvent::Stdout(b) => got += b.len() as u64,
            ExecEvent::Exited(s) if s.code != Some(0) => bail!("the flood command failed: {s:?}"),
            _ => {}
        }
    }
    let took = t.elapsed();
    if got != bytes {
        bail!("the flood delivered {got} bytes, not {bytes}");
    }
    let after = agent.memory()?;
    tokio::time::sleep(SETTLED).await;
    Ok(Flood { idle, after, settled: agent.memory()?, bytes: got, took })
}
