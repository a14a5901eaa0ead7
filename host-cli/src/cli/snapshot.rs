//! The arguments of `atoll snapshot create|ls|rm|restore`.

use std::time::Duration;

use clap::{Args, Subcommand};

/// `atoll snapshot ...`.
#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Save a sandbox's memory, processes and disk under a name; it keeps running.
    #[command(after_help = "Examples:\n  atoll snapshot create dev --name dev-clean\n  \
                            atoll create --from dev-clean --name try1\n  atoll snapshot restore dev dev-clean")]
    Create(SnapshotCreateArgs),
    /// List the snapshots: name, source sandbox, template, memory, size on disk, age.
    Ls,
    /// Remove snapshots.
    Rm(SnapshotRmArgs),
    /// Put a sandbox back to a snapshot (memory, processes and disk); its name and id stay.
    ///
    /// A snapshot saved by an older atoll (whose VMs had a vsock device) cannot be
    /// restored, nor forked: remove it and take a new one.
    Restore(SnapshotRestoreArgs),
}

/// `atoll snapshot create`.
#[derive(Debug, Args)]
pub struct SnapshotCreateArgs {
    /// The sandbox to save; default: the global --sandbox.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: Option<String>,
    /// The snapshot's name (letters, digits, `-`, `_`, `.`); default: SANDBOX-UNIXTIME.
    #[arg(long, short = 'n')]
    pub name: Option<String>,
    /// Remove the sandbox once it is saved.
    #[arg(long)]
    pub stop: bool,
}

/// `atoll snapshot rm`.
#[derive(Debug, Args)]
pub struct SnapshotRmArgs {
    /// Snapshot names.
    #[arg(value_name = "SNAPSHOT", required = true)]
    pub names: Vec<String>,
}

/// `atoll snapshot restore`.
#[derive(Debug, Args)]
pub struct SnapshotRestoreArgs {
    /// The sandbox to put back.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
    /// The snapshot.
    #[arg(value_name = "SNAPSHOT")]
    pub snapshot: String,
    /// How long to wait for the restored agent, e.g. 120s, 5m.
    #[arg(long, default_value = "120s", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}
