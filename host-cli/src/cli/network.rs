//! The arguments of a sandbox's network: `sbx port publish|ls|unpublish`, `sbx net
//! show|set|log`, and the hidden `sbx net-helper` that `sbx create` starts.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use sbx_net::policy::Rule;

use crate::sandbox::network::PortSpec;
use crate::sandbox::network::spec::DEFAULT_BIND;

/// `sbx port ...`.
#[derive(Debug, Subcommand)]
pub enum PortCommand {
    /// Make a guest TCP port reachable on the host (127.0.0.1 unless --bind); prints its URL.
    #[command(after_help = "Examples:\n  sbx port publish dev 8000          (a free host port, printed)\n  \
                            sbx port publish dev 8000:8080     (host port 8080)\n  \
                            sbx port publish dev 3000 --bind 0.0.0.0\n\n\
                            The guest side is the guest's own 127.0.0.1 (or ::1), so a server that\n\
                            listens only on loopback is reached too; it works with --net none.")]
    Publish(PublishArgs),
    /// List a sandbox's published ports.
    Ls(PortSandboxArg),
    /// Stop publishing a guest port; its listener and open connections are closed.
    Unpublish(UnpublishArgs),
}

/// `sbx port publish`.
#[derive(Debug, Args)]
pub struct PublishArgs {
    /// Sandbox name or id.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
    /// GUESTPORT, or GUESTPORT:HOSTPORT.
    #[arg(value_name = "GUESTPORT[:HOSTPORT]")]
    pub port: PortSpec,
    /// Host address to listen on.
    #[arg(long, value_name = "ADDR", default_value_t = DEFAULT_BIND)]
    pub bind: IpAddr,
}

/// `sbx port ls`.
#[derive(Debug, Args)]
pub struct PortSandboxArg {
    /// Sandbox name or id.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
}

/// `sbx port unpublish`.
#[derive(Debug, Args)]
pub struct UnpublishArgs {
    /// Sandbox name or id.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
    /// The guest port to stop publishing.
    #[arg(value_name = "GUESTPORT")]
    pub guest_port: u16,
}

/// `sbx net ...`.
#[derive(Debug, Subcommand)]
pub enum NetCommand {
    /// Print a sandbox's egress policy.
    Show(NetSandboxArg),
    /// Change a sandbox's egress rules; new connections follow them at once.
    #[command(after_help = "Each list given replaces the current one; a list not given is kept.\n\n\
                            Examples:\n  sbx net set dev --allow-out pypi.org,files.pythonhosted.org\n  \
                            sbx net set dev --deny-out 0.0.0.0/0,::/0 --allow-out github.com\n  \
                            sbx net set dev --reset               (back to the default policy)")]
    Set(SetArgs),
    /// Print a sandbox's audit log: every connection attempt and DNS query, with its
    /// verdict and the rule that decided it.
    #[command(after_help = "Examples:\n  sbx net log dev\n  sbx net log dev --verdict deny --limit 20\n  \
                            sbx net log dev --follow --json")]
    Log(LogArgs),
}

/// A subcommand taking one sandbox.
#[derive(Debug, Args)]
pub struct NetSandboxArg {
    /// Sandbox name or id.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
}

/// `sbx net set`.
#[derive(Debug, Args)]
pub struct SetArgs {
    /// Sandbox name or id.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
    /// The new allow rules (repeatable or comma-separated): domain, *.pattern, IP or CIDR,
    /// optionally :PORT.
    #[arg(long, value_name = "RULE", value_delimiter = ',', num_args = 1)]
    pub allow_out: Option<Vec<Rule>>,
    /// The new deny rules (same forms).
    #[arg(long, value_name = "RULE", value_delimiter = ',', num_args = 1)]
    pub deny_out: Option<Vec<Rule>>,
    /// Clear both lists first (the default policy), then apply the lists given.
    #[arg(long)]
    pub reset: bool,
}

/// Which verdict to keep.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum VerdictArg {
    /// Allowed attempts.
    Allow,
    /// Denied attempts.
    Deny,
}

/// `sbx net log`.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Sandbox name or id.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
    /// Keep printing new records until the sandbox is killed (or Ctrl-C).
    #[arg(short, long)]
    pub follow: bool,
    /// Only allowed or only denied attempts.
    #[arg(long, value_enum)]
    pub verdict: Option<VerdictArg>,
    /// Only the last N records.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
}

/// `sbx net-helper` (hidden; `sbx create` runs it; [`crate::app`] parses it on its own).
#[derive(Debug, Clone, Args)]
pub struct HelperArgs {
    /// The sandbox directory (holding sandbox.json and net.json).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
}
