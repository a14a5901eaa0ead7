//! What sandboxes use, now (`atoll stats`, MCP `sandbox_get_metrics`), measured once:
//!
//! - **CPU**, two figures, each from two samples [`SAMPLE`] apart; 100 % is one CPU
//!   busy, as in `docker stats`:
//!   - `cpu_percent`, the guest's own: the busy share of its vCPUs' time in its
//!     `/proc/stat` (read through the agent's file read, which starts no process);
//!   - `host_cpu_percent`, the host's cost: the CPU time of the sandbox's QEMU process
//!     (all its threads: vCPUs, device emulation and, under TCG, the translation) from
//!     the host's `/proc/PID/stat`. On a busy host a guest that burns its vCPU shows
//!     near 100 % in the first, and only what the host gave QEMU in the second.
//! - **Memory**: the guest's own view (MemTotal minus MemAvailable, from the agent's
//!   Info), against the memory the sandbox was given.
//! - **Disk**: used and total bytes of the guest's root filesystem (agent Info).
//! - **Network**: bytes received and sent by the guest's NIC (its `/proc/net/dev`),
//!   for sandboxes that have a network.
//! - **Uptime**: seconds since the sandbox was created.
//!
//! A paused sandbox is not resumed for this: it shows its CPU (none) and no guest
//! figures; a parked or dead one shows neither.

use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Serialize;

use super::{SandboxError, SandboxInfo, SandboxState, agent_address};
use crate::client::Client;
use crate::vmm::dirs;
use crate::vmm::state::{self, Record};

/// How far apart the two CPU samples are.
pub const SAMPLE: Duration = Duration::from_millis(1000);
/// How long the agent gets to answer.
const AGENT_TIMEOUT: Duration = Duration::from_secs(5);
/// Clock ticks per second in `/proc/PID/stat` (USER_HZ, 100 on every Linux).
const USER_HZ: f64 = 100.0;

/// One sandbox's use of CPU, memory, disk and network.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[schemars(inline)]
pub struct Metrics {
    /// Short id.
    pub id: String,
    /// Name.
    pub name: String,
    /// "running", "paused", "parked", "starting" or "dead".
    pub state: String,
    /// The guest's busy share of its vCPUs over the sample, in percent of one vCPU
    /// (up to 100 per vCPU), from its /proc/stat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_percent: Option<f64>,
    /// CPU the sandbox's VM process used on the host over the sample, in percent of one
    /// host CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_cpu_percent: Option<f64>,
    /// vCPUs the sandbox has.
    pub cpus: u32,
    /// Guest memory in use (total minus available), in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_used_bytes: Option<u64>,
    /// Memory the sandbox was given, in bytes.
    pub memory_limit_bytes: u64,
    /// Bytes used on the guest's root filesystem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_used_bytes: Option<u64>,
    /// Size of the guest's root filesystem, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_total_bytes: Option<u64>,
    /// Bytes the guest's network card received (sandboxes with a network).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net_rx_bytes: Option<u64>,
    /// Bytes the guest's network card sent (sandboxes with a network).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net_tx_bytes: Option<u64>,
    /// Seconds since the sandbox was created.
    pub uptime_secs: u64,
    /// Why some figures are missing, when they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The metrics of the sandboxes named (all of them when `names` is empty), in `atoll
/// ls` order. Every name is looked up first: an unknown one is an error.
pub async fn metrics(names: &[String]) -> Result<Vec<Metrics>, SandboxError> {
    let state_dir = dirs::state_dir()?;
    let records: Vec<Record> = if names.is_empty() {
        state::load_all(&state_dir).into_iter().flatten().collect()
    } else {
        names.iter().map(|n| state::find(&state_dir, n)).collect::<Result<_, _>>()?
    };
    Ok(measure(records).await)
}

/// The metrics of every sandbox `pick` keeps, in `atoll ls` order (an MCP client's
/// "all" is only the sandboxes it may act on).
pub async fn metrics_of(pick: impl Fn(&SandboxInfo) -> bool) -> Result<Vec<Metrics>, SandboxError> {
    let state_dir = dirs::state_dir()?;
    let records =
        state::load_all(&state_dir).into_iter().flatten().filter(|r| pick(&SandboxInfo::of(r))).collect();
    Ok(measure(records).await)
}

/// Samples `records` over one [`SAMPLE`].
async fn measure(records: Vec<Record>) -> Vec<Metrics> {
    let infos: Vec<SandboxInfo> = records.iter().map(SandboxInfo::of).collect();
    let before: Vec<Option<u64>> = infos.iter().map(|i| i.qemu_pid.and_then(cpu_ticks)).collect();
    let started = Instant::now();
    let until = started + SAMPLE;
    let guest =
        futures::future::join_all(records.iter().zip(&infos).map(|(r, i)| guest_figures(r, i, until)));
    let (guest, ()) = tokio::join!(guest, tokio::time::sleep_until(until.into()));
    let elapsed = started.elapsed().as_secs_f64();
    infos
        .into_iter()
        .zip(before)
        .zip(guest)
        .map(|((info, before), guest)| {
            let after = info.qemu_pid.and_then(cpu_ticks);
            let host_cpu_percent = match (before, after) {
                (Some(b), Some(a)) => Some(round1(a.saturating_sub(b) as f64 / USER_HZ / elapsed * 100.0)),
                _ => None,
            };
            Metrics {
                id: info.id,
                name: info.name,
                state: info.state.as_str().to_owned(),
                cpu_percent: guest.cpu_percent,
                host_cpu_percent,
                cpus: info.cpus,
                memory_used_bytes: guest.memory_used,
                memory_limit_bytes: u64::from(info.memory_mib) << 20,
                disk_used_bytes: guest.disk_used,
                disk_total_bytes: guest.disk_total,
                net_rx_bytes: guest.net.map(|n| n.0),
                net_tx_bytes: guest.net.map(|n| n.1),
                uptime_secs: info.age_secs,
                note: guest.note,
            }
        })
        .collect()
}

#[derive(Debug, Default)]
struct Guest {
    cpu_percent: Option<f64>,
    memory_used: Option<u64>,
    disk_used: Option<u64>,
    disk_total: Option<u64>,
    net: Option<(u64, u64)>,
    note: Option<String>,
}

/// What the agent reports, for a running sandbox; /proc/stat is read now and at `until`.
async fn guest_figures(record: &Record, info: &SandboxInfo, until: Instant) -> Guest {
    if info.state != SandboxState::Running {
        return Guest {
            note: Some(format!("the sandbox is {}; guest figures need it running", info.state.as_str())),
            ..Guest::default()
        };
    }
    let client = match Client::connect(&agent_address(record), AGENT_TIMEOUT).await {
        Ok(c) => c,
        Err(e) => return Guest { note: Some(format!("its agent did not answer: {e}")), ..Guest::default() },
    };
    let mut out = Guest::default();
    let first = guest_cpu(&client).await;
    match client.info().await {
        Ok(i) => {
            out.memory_used = Some(i.memory_total_bytes.saturating_sub(i.memory_available_bytes));
            out.disk_used = Some(i.disk_total_bytes.saturating_sub(i.disk_free_bytes));
            out.disk_total = Some(i.disk_total_bytes);
        }
        Err(e) => out.note = Some(format!("its agent did not answer: {e}")),
    }
    let has_nic = crate::sandbox::network::config::NetConfig::load(&record.paths.dir)
        .is_ok_and(|c| c.network == crate::sandbox::network::NetworkMode::Default);
    if has_nic {
        out.net = read_text(&client, "/proc/net/dev").await.as_deref().and_then(nic_bytes);
    }
    tokio::time::sleep_until(until.into()).await;
    if let (Some((busy0, all0)), Some((busy1, all1))) = (first, guest_cpu(&client).await) {
        let all = all1.saturating_sub(all0);
        if all > 0 {
            let share = busy1.saturating_sub(busy0) as f64 / all as f64;
            out.cpu_percent = Some(round1(share * 100.0 * f64::from(info.cpus)));
        }
    }
    out
}

/// A small guest file as text, read by the agent (no process is started).
async fn read_text(client: &Client, path: &str) -> Option<String> {
    let read =
        super::files::read_to_vec(client, path, crate::client::ReadOpts::default(), 1 << 20).await.ok()?;
    Some(String::from_utf8_lossy(&read.data).into_owned())
}

/// Busy and total ticks of all the guest's CPUs, from the `cpu` line of its /proc/stat.
async fn guest_cpu(client: &Client) -> Option<(u64, u64)> {
    cpu_line(&read_text(client, "/proc/stat").await?)
}

/// (busy, total) from a /proc/stat text: idle and iowait are not busy.
fn cpu_line(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest and guest_nice are in user).
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    Some((total.saturating_sub(idle), total))
}

/// Received and sent bytes of the first interface other than `lo` in `/proc/net/dev`.
fn nic_bytes(dev: &str) -> Option<(u64, u64)> {
    dev.lines().skip(2).find_map(|line| {
        let (iface, counters) = line.split_once(':')?;
        if iface.trim() == "lo" {
            return None;
        }
        let fields: Vec<u64> = counters.split_whitespace().filter_map(|f| f.parse().ok()).collect();
        Some((*fields.first()?, *fields.get(8)?))
    })
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // After the name: state is field 3 of the line, utime 14 and stime 15.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_nic_counters_and_skips_loopback() {
        let dev = "Inter-|   Receive                                                |  Transmit\n \
                   face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
                   lo:     120       2    0    0    0     0          0         0      120       2    0    0    0     0       0          0\n  \
                   eth0:  5000      10    0    0    0     0          0         0     7000      12    0    0    0     0       0          0\n";
        assert_eq!(nic_bytes(dev), Some((5000, 7000)));
        assert_eq!(nic_bytes("a\nb\n    lo: 1 2 3 4 5 6 7 8 9 10\n"), None);
    }

    #[test]
    fn busy_time_leaves_out_idle_and_iowait() {
        let stat = "cpu  100 5 20 800 50 1 2 0 0 0\ncpu0 100 5 20 800 50 1 2 0 0 0\n";
        assert_eq!(cpu_line(stat), Some((128, 978)));
        assert_eq!(cpu_line("intr 1 2"), None);
    }

    #[test]
    fn reads_this_process_cpu_time() {
        assert!(cpu_ticks(std::process::id()).is_some());
        assert_eq!(cpu_ticks(u32::MAX), None);
    }
}
