//! Agent calls on one warm connection through the typed client of `sbx`, and many
//! concurrent execs on it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use sbx::client::{Client, ExecSpec, ListOpts, ReadOpts, WriteOpts};

use crate::peers::{Workload, kib_text};
use crate::stats::Samples;

/// No call here should take long; one that hangs is an agent bug to report, not a figure.
const CALL_LIMIT: Duration = Duration::from_secs(30);

/// Awaits `call`, failing with a clear message if it takes over [`CALL_LIMIT`].
async fn bounded<T>(what: &str, call: impl Future<Output = sbx::client::Result<T>>) -> Result<T> {
    match tokio::time::timeout(CALL_LIMIT, call).await {
        Ok(r) => Ok(r?),
        Err(_) => bail!("{what} got no answer from the agent within {CALL_LIMIT:?}; the agent is stuck"),
    }
}

/// Latency of each agent call.
pub(crate) struct CallLatency {
    /// Exec of `true` (argv, no shell).
    pub(crate) exec_true: Samples,
    /// ReadFile of 1 KiB.
    pub(crate) read_1k: Samples,
    /// WriteFile of 1 KiB (atomic: temp, fsync, rename).
    pub(crate) write_1k: Samples,
    /// ListDir of 100 entries.
    pub(crate) list_100: Samples,
    /// Info: the bare cost of a unary RPC.
    pub(crate) info: Samples,
}

/// Measures each call `n` times after `warmup`.
pub(crate) async fn latency(c: &Client, w: &Workload, warmup: usize, n: usize) -> Result<CallLatency> {
    let spec = ExecSpec::argv(["true"]);
    let exec_true = Samples::measure_async(warmup, n, || async {
        let r = bounded("Exec `true`", c.exec(&spec)).await?;
        ensure!(r.status.code == Some(0), "`true` failed in the agent: {:?}", r.status);
        Ok(())
    })
    .await?;
    let path = w.read_file.display().to_string();
    let read_1k = Samples::measure_async(warmup, n, || async {
        let data = bounded("ReadFile", c.read_to_vec(&path, ReadOpts::default(), 1 << 20)).await?;
        ensure!(data.len() == 1024, "read {} bytes, not 1024", data.len());
        Ok(())
    })
    .await?;
    let target = w.root.join("agent-write-1k.txt").display().to_string();
    let data = Bytes::from(kib_text());
    let write_1k = Samples::measure_async(warmup, n, || async {
        bounded("WriteFile", c.write_bytes(&target, WriteOpts::default(), data.clone())).await?;
        Ok::<_, anyhow::Error>(())
    })
    .await?;
    let dir = w.list_dir.display().to_string();
    let list_100 = Samples::measure_async(warmup, n, || async {
        let l = bounded("ListDir", c.list(&dir, ListOpts::default())).await?;
        ensure!(l.entries.len() == 100, "listed {} entries, not 100", l.entries.len());
        Ok(())
    })
    .await?;
    let info = Samples::measure_async(warmup, n, || async {
        bounded("Info", c.info()).await?;
        Ok::<_, anyhow::Error>(())
    })
    .await?;
    Ok(CallLatency { exec_true, read_1k, write_1k, list_100, info })
}

/// Calls per second of `total` execs of `true`, `parallel` in flight at a time on one
/// connection.
pub(crate) async fn concurrent_execs(c: &Client, parallel: usize, total: usize) -> Result<f64> {
    let spec = Arc::new(ExecSpec::argv(["true"]));
    let t = Instant::now();
    let mut inflight = FuturesUnordered::new();
    let mut started = 0;
    let mut done = 0;
    while done < total {
        while started < total && inflight.len() < parallel {
            let (c, spec) = (c.clone(), spec.clone());
            inflight.push(async move { bounded("concurrent Exec `true`", c.exec(&spec)).await });
            started += 1;
        }
        match inflight.next().await {
            Some(r) => {
                let r = r?;
                if r.status.code != Some(0) {
                    bail!("a concurrent `true` failed in the agent: {:?}", r.status);
                }
                done += 1;
            }
            None => bail!("the exec pool ran dry before {total} calls"),
        }
    }
    Ok(total as f64 / t.elapsed().as_secs_f64())
}
