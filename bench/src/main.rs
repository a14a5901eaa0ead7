//! `atoll-bench`: measures atoll next to its floor and its peers, in one run, and prints one
//! markdown table. `bench/run.sh` builds everything, installs the peers and runs it.
//!
//! - [`agent`]: a real `atoll-agent` on a Unix socket; its memory from `/proc`.
//! - [`floors`]: the same operations done locally, and bare Unix-socket transfers.
//! - [`calls`]: agent call latency on a warm connection; concurrent execs.
//! - [`mcp`]: a bare newline-JSON-RPC MCP client; [`official`]: the official Python
//!   (2.x, 1.x) and TypeScript ones; [`http`]: `atoll mcp --http` next to stdio with them.
//! - [`peers`]: `atoll mcp` and the peer servers, and how each spells the operations.
//! - [`throughput`]: `atoll cp` and `atoll download` next to a raw socket copy.
//! - [`footprint`]: agent startup and memory, idle and under a 1 GiB flood.
//! - [`vm`]: a real VM: boot to READY next to a bare boot, exec and copies over the agent
//!   link next to raw streams over the same virtio-serial port in the bare VM.
//! - [`sections`]: turns measurements into table rows; [`report`]: the table.
//! - [`stats`]: samples, quantiles, units.

mod agent;
mod calls;
mod floors;
mod footprint;
mod http;
mod mcp;
mod official;
mod peers;
mod report;
mod sections;
mod stats;
mod throughput;
mod vm;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;

/// Measure atoll against the local floor and against peer MCP servers.
#[derive(Debug, Clone, Parser)]
#[command(name = "atoll-bench", max_term_width = 100)]
pub(crate) struct Opts {
    /// Fewer iterations and smaller copies (64 MiB file, 32 MiB tree, 256 MiB flood).
    #[arg(long)]
    pub(crate) quick: bool,
    /// Measured calls per agent operation (default 1000; --quick 200).
    #[arg(long)]
    pub(crate) iterations: Option<usize>,
    /// Measured calls per MCP operation and client (default 200; --quick 40).
    #[arg(long)]
    pub(crate) mcp_iterations: Option<usize>,
    /// Bytes of the file `atoll cp` moves each way (default 1 GiB).
    #[arg(long)]
    pub(crate) file_bytes: Option<u64>,
    /// Bytes of the tree `atoll download` zips (default 200 MiB).
    #[arg(long)]
    pub(crate) tree_bytes: Option<u64>,
    /// Bytes a command prints through ExecStream for the peak-RSS figure (default 1 GiB).
    #[arg(long)]
    pub(crate) flood_bytes: Option<u64>,
    /// The agent binary (the shipped one: static musl, stripped).
    #[arg(long, default_value = "target/x86_64-unknown-linux-musl/release/atoll-agent")]
    pub(crate) agent_bin: PathBuf,
    /// The `atoll` binary.
    #[arg(long, default_value = "target/release/atoll")]
    pub(crate) atoll_bin: PathBuf,
    /// The bare VM's init and the raw virtio-serial floor (`atoll-link-floor`, static musl).
    #[arg(long, default_value = "target/x86_64-unknown-linux-musl/release/atoll-link-floor")]
    pub(crate) link_floor_bin: PathBuf,
    /// Where the peers were installed (`node_modules/.bin`, `venv-shell`, `venv-client`).
    #[arg(long, default_value = "target/bench")]
    pub(crate) peers_dir: PathBuf,
    /// Skip the peer servers (atoll mcp is still measured).
    #[arg(long)]
    pub(crate) no_peers: bool,
    /// Compare with only these peers (comma-separated names as the table shows them, e.g.
    /// server-filesystem); default: every installed one. For quick A/B runs of one row.
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub(crate) peer: Vec<String>,
    /// Skip the real-VM figures.
    #[arg(long)]
    pub(crate) no_vm: bool,
    /// Skip the official Python MCP clients (SDK 2.x and 1.x).
    #[arg(long)]
    pub(crate) no_python: bool,
    /// Skip the official TypeScript MCP client.
    #[arg(long)]
    pub(crate) no_typescript: bool,
    /// Scratch directory for sockets, workloads and copies (default: a temp dir).
    #[arg(long)]
    pub(crate) scratch: Option<PathBuf>,
    /// Run only these groups (comma-separated): agent, mcp, http, copy, concurrency, footprint, vm.
    #[arg(long, value_delimiter = ',', value_parser = ["agent", "mcp", "http", "copy", "concurrency", "footprint", "vm"])]
    pub(crate) only: Vec<String>,
    /// Also write the table to this file.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Only stream this many MiB out of a bare VM over its virtio-serial port, read and
    /// discarded, best of --port-stream-runs, and print the rate (bench/egress.sh's floor).
    #[arg(long, value_name = "MIB")]
    pub(crate) port_stream_mib: Option<u64>,
    /// Runs of --port-stream-mib.
    #[arg(long, default_value_t = 3)]
    pub(crate) port_stream_runs: usize,
}

impl Opts {
    fn pick<T: Copy>(&self, set: Option<T>, full: T, quick: T) -> T {
        set.unwrap_or(if self.quick { quick } else { full })
    }
    pub(crate) fn iters(&self) -> usize {
        self.pick(self.iterations, 1000, 200)
    }
    pub(crate) fn mcp_iters(&self) -> usize {
        self.pick(self.mcp_iterations, 200, 40)
    }
    pub(crate) fn file_size(&self) -> u64 {
        self.pick(self.file_bytes, 1 << 30, 64 << 20)
    }
    pub(crate) fn tree_size(&self) -> u64 {
        self.pick(self.tree_bytes, 200 << 20, 32 << 20)
    }
    /// Whether the group `name` runs.
    pub(crate) fn runs(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == name)
    }
    pub(crate) fn flood_size(&self) -> u64 {
        self.pick(self.flood_bytes, 1 << 30, 256 << 20)
    }
}

fn main() -> ExitCode {
    let mut opts = Opts::parse();
    // Servers run in the workload directory, so every path handed to them is absolute.
    for p in [&mut opts.agent_bin, &mut opts.atoll_bin, &mut opts.link_floor_bin, &mut opts.peers_dir] {
        if let Ok(abs) = std::path::absolute(&*p) {
            *p = abs;
        }
    }
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("atoll-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(opts: &Opts) -> Result<()> {
    let tmp;
    let scratch = match &opts.scratch {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            tmp = tempfile::Builder::new().prefix("atoll-bench-").tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let scratch = scratch.canonicalize().context("scratch directory")?;
    // The runtime `atoll` runs its agent calls on, so the typed client is measured as it runs.
    let rt = atoll::app::runtime(false)?;
    if let Some(mib) = opts.port_stream_mib {
        let runs = opts.port_stream_runs;
        let took = vm::port_stream(&opts.link_floor_bin, &scratch, mib, runs, &rt)?;
        let rate = stats::fmt_rate(mib << 20, took);
        println!(
            "raw port stream {mib} MiB out of a bare VM (best of {runs}): {rate} ({:.3} s)",
            took.as_secs_f64()
        );
        return Ok(());
    }
    let mut out = format!("{}\n\n", sections::machine());
    out.push_str(&format!(
        "Run: {} agent calls per op, {} MCP calls per op and client, file {}, tree {}, flood {}.\n\n",
        opts.iters(),
        opts.mcp_iters(),
        stats::fmt_bytes(opts.file_size()),
        stats::fmt_bytes(opts.tree_size()),
        stats::fmt_bytes(opts.flood_size()),
    ));
    let tables = sections::all(opts, &scratch, &rt)?;
    out.push_str(&report::markdown(&tables));
    println!("{out}");
    if let Some(path) = &opts.out {
        std::fs::write(path, &out).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}
