//! Helpers shared by the hardening tests: requests, waiting on a condition, and
//! looking at processes in /proc.

#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use atoll_proto::agent::v1 as pb;

/// An Exec of `cmd` through /bin/sh -c.
pub(crate) fn shell(cmd: &str) -> pb::ExecRequest {
    pb::ExecRequest {
        command: Some(pb::Command { shell: cmd.into(), ..Default::default() }),
        ..Default::default()
    }
}

/// An Exec of `args` run directly.
pub(crate) fn argv(args: &[&str]) -> pb::ExecRequest {
    let argv = args.iter().map(|s| s.to_string()).collect();
    pb::ExecRequest { command: Some(pb::Command { argv, ..Default::default() }), ..Default::default() }
}

/// Waits (generously) until `cond` holds; panics naming `what` otherwise.
pub(crate) async fn eventually(what: &str, cond: impl FnMut() -> bool) {
    eventually_within(Duration::from_secs(30), what, cond).await;
}

/// Waits up to `limit` until `cond` holds; panics naming `what` otherwise.
pub(crate) async fn eventually_within(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The fields of /proc/<pid>/stat after the command name: state, ppid, pgid, sid.
pub(crate) fn stat(pid: u32) -> Option<(String, u32, u32, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = text.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((f[0].to_owned(), f[1].parse().ok()?, f[2].parse().ok()?, f[3].parse().ok()?))
}

/// Killed and reaped: gone from /proc.
pub(crate) fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// Alive: in /proc and not a zombie.
pub(crate) fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, ..)| state != "Z" && state != "X")
}

/// The pids whose parent is `ppid`, with their states.
pub(crate) fn children_of(ppid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if let Some((state, parent, ..)) = stat(pid)
            && parent == ppid
        {
            out.push((pid, state));
        }
    }
    out
}

/// The pids written (whitespace-separated) to `path` so far.
pub(crate) fn read_pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Number of open file descriptors of `pid`.
pub(crate) fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// Current resident set size of `pid` in KiB.
pub(crate) fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}
