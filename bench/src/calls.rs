//! Agent calls on one warm connection through the typed client of `atoll`, and many
//! concurrent execs on it.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use atoll::client::{Client, ExecSpec, ListOpts, ReadOpts, WriteOpts};
use atoll::sandbox::files::read_to_vec;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;

use crate::floors::{self, PingPong};
use crate::peers::{Workload, kib_text};
use crate::stats::Samples;

/// No call here should take long; one that hangs is an agent bug to report, not a figure.
const CALL_LIMIT: Duration = Duration::from_secs(30);

/// Awaits `call`, failing with a clear message if it takes over [`CALL_LIMIT`].
async fn bounded<T>(what: &str, call: impl Future<Output = atoll::client::Result<T>>) -> Result<T> {
    match tokio::time::timeout(CALL_LIMIT, call).await {
        Ok(r) => Ok(r?),
        Err(_) => bail!("{what} got no answer from the agent within {CALL_LIMIT:?}; the agent is stuck"),
    }
}

/// An agent call's latencies and those of the local operations that bound it, taken
/// in turn call by call.
pub(crate) struct Paired {
    /// The agent call.
    pub(crate) atoll: Samples,
    /// Each floor, in the order given.
    pub(crate) floors: Vec<Samples>,
}

impl Paired {
    /// The `i`th floor.
    pub(crate) fn floor(&self, i: usize) -> &Samples {
        &self.floors[i]
    }
}

/// Latency of each agent call, next to its floors.
pub(crate) struct CallLatency {
    /// Exec of `true` (argv, no shell); floor: local spawn+wait of `true`.
    pub(crate) exec_true: Paired,
    /// ReadFile of 1 KiB; floor: local open+read+close.
    pub(crate) read_1k: Paired,
    /// WriteFile of 1 KiB (atomic: temp, rename); floors: the same write done locally
    /// (alternated), then a plain write (measured on its own).
    pub(crate) write_1k: Paired,
    /// WriteFile of 1 KiB with `sync` (temp, fsync, rename, fsync of the directory);
    /// floor: the same durable write done locally.
    pub(crate) write_1k_sync: Paired,
    /// ListDir of 100 entries; floor: local readdir+lstat.
    pub(crate) list_100: Paired,
    /// Info, the bare cost of a unary RPC; floor: a 64-byte Unix-socket ping-pong.
    pub(crate) info: Paired,
}

/// Measures each call `n` times after `warmup`, each time followed by its floors.
/// `scratch` holds the floors' own files and socket.
pub(crate) async fn latency(
    c: &Client,
    w: &Workload,
    scratch: &Path,
    warmup: usize,
    n: usize,
) -> Result<CallLatency> {
    let pair = |(atoll, floors)| Paired { atoll, floors };
    let spec = ExecSpec::argv(["true"]);
    let exec_true = Samples::alternate(
        warmup,
        n,
        || async {
            let r = bounded("Exec `true`", c.exec(&spec)).await?;
            ensure!(r.status.code == Some(0), "`true` failed in the agent: {:?}", r.status);
            Ok(())
        },
        &mut [&mut floors::spawn_true()],
    )
    .await
    .map(pair)?;
    let path = w.read_file.display().to_string();
    let read_1k = Samples::alternate(
        warmup,
        n,
        || async {
            let data = bounded("ReadFile", read_to_vec(c, &path, ReadOpts::default(), 1 << 20)).await?.data;
            ensure!(data.len() == 1024, "read {} bytes, not 1024", data.len());
            Ok(())
        },
        &mut [&mut floors::read_file(&w.read_file)],
    )
    .await
    .map(pair)?;
    // The agent's target and the floor's are side by side, on the same filesystem.
    let target = w.root.join("agent-write-1k.txt").display().to_string();
    let data = Bytes::from(kib_text());
    let floor_target = scratch.join("floor-write.txt");
    let mut write_1k = Samples::alternate(
        warmup,
        n,
        || async {
            bounded("WriteFile", c.write_bytes(&target, WriteOpts::default(), data.clone())).await?;
            Ok(())
        },
        &mut [&mut floors::write_atomic(&floor_target, &data, false)],
    )
    .await
    .map(pair)?;
    let plain_target = scratch.join("floor-write-plain.txt");
    write_1k.floors.push(Samples::measure(warmup, n, floors::write_plain(&plain_target, &data))?);
    // The writes above left their data for the next fsync on the filesystem to flush:
    // flush it now, untimed, so the durable writes' first fsyncs do not pay for it.
    rustix::fs::syncfs(std::fs::File::open(scratch)?)?;
    let sync = WriteOpts { sync: true, ..WriteOpts::default() };
    let write_1k_sync = Samples::alternate(
        warmup,
        n,
        || async {
            bounded("WriteFile (sync)", c.write_bytes(&target, sync, data.clone())).await?;
            Ok(())
        },
        &mut [&mut floors::write_atomic(&floor_target, &data, true)],
    )
    .await
    .map(pair)?;
    let dir = w.list_dir.display().to_string();
    let list_100 = Samples::alternate(
        warmup,
        n,
        || async {
            let l = bounded("ListDir", c.list(&dir, ListOpts::default())).await?;
            ensure!(l.entries.len() == 100, "listed {} entries, not 100", l.entries.len());
            Ok(())
        },
        &mut [&mut floors::list_dir(&w.list_dir)],
    )
    .await
    .map(pair)?;
    let mut ping = PingPong::start(scratch)?;
    let info = Samples::alternate(
        warmup,
        n,
        || async {
            bounded("Info", c.info()).await?;
            Ok(())
        },
        &mut [&mut || ping.round()],
    )
    .await
    .map(pair)?;
    ping.finish()?;
    Ok(CallLatency { exec_true, read_1k, write_1k, write_1k_sync, list_100, info })
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
