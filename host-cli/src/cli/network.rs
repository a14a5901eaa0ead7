//! The arguments of a sandbox's network: `atoll port publish|ls|unpublish`, `atoll net
//! show|allow|deny|rm|set|log`, and the hidden `atoll net-helper` that `atoll create` starts.

use std::net::IpAddr;
use std::path::PathBuf;

use atoll_net::policy::Rule;
use clap::{Args, Subcommand, ValueEnum};

use crate::sandbox::network::PortSpec;
use crate::sandbox::network::spec::DEFAULT_BIND;

/// `atoll port ...`.
#[derive(Debug, Subcommand)]
pub enum PortCommand {
    /// Make a guest TCP port reachable on the host (127.0.0.1 unless --bind); prints its URL.
    #[command(
        after_help = "Examples:\n  atoll port publish dev 8000          (a free host port, printed)\n  \
                            atoll port publish dev 8080:8000     (host port 8080 to guest port 8000)\n  \
                            atoll port publish dev 3000 --bind 0.0.0.0\n\n\
                            The guest side is the guest's own 127.0.0.1 (or ::1), so a server that\n\
                            listens only on loopback is reached too; it works with --net none."
    )]
    Publish(PublishArgs),
    /// List a sandbox's published ports.
    Ls(PortSandboxArg),
    /// Stop publishing a guest port; its listener and open connections are closed.
    Unpublish(UnpublishArgs),
}

/// `atoll port publish`.
#[derive(Debug, Args)]
pub struct PublishArgs {
    /// Sandbox name or id.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
    /// GUESTPORT (on a free host port), or HOSTPORT:GUESTPORT as Docker writes it.
    #[arg(value_name = "[HOSTPORT:]GUESTPORT")]
    pub port: PortSpec,
    /// Host address to listen on.
    #[arg(long, value_name = "ADDR", default_value_t = DEFAULT_BIND)]
    pub bind: IpAddr,
}

/// `atoll port ls`.
#[derive(Debug, Args)]
pub struct PortSandboxArg {
    /// Sandbox name or id.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
}

/// `atoll port unpublish`.
#[derive(Debug, Args)]
pub struct UnpublishArgs {
    /// Sandbox name or id.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
    /// The guest port to stop publishing.
    #[arg(value_name = "GUESTPORT")]
    pub guest_port: u16,
}

/// `atoll net ...`.
#[derive(Debug, Subcommand)]
pub enum NetCommand {
    /// Print a sandbox's egress policy.
    Show(NetSandboxArg),
    /// Add rules to a sandbox's allow list (taking them out of its deny list); the other
    /// rules stay. New connections follow them at once.
    #[command(after_help = "Examples:\n  atoll net allow dev pypi.org files.pythonhosted.org\n  \
                            atoll net allow dev 10.0.0.5:5432     (a private address needs an IP rule)")]
    Allow(RulesArgs),
    /// Add rules to a sandbox's deny list (taking them out of its allow list); the other
    /// rules stay.
    #[command(after_help = "Examples:\n  atoll net deny dev '*.example.com'\n  \
                            atoll net deny dev 0.0.0.0/0 ::/0     (then only allowed names are reached)")]
    Deny(RulesArgs),
    /// Remove rules, as written in `atoll net show`, from whichever list holds them.
    #[command(visible_alias = "remove", after_help = "Examples:\n  atoll net rm dev pypi.org")]
    Rm(RulesArgs),
    /// Replace a sandbox's allow and/or deny list; new connections follow them at once.
    /// To add or remove one rule, use `atoll net allow`, `deny` or `rm`.
    #[command(after_help = "Each list given REPLACES the current one (rules not named are dropped; \
                            the output says which); a list not given is kept.\n\n\
                            Examples:\n  atoll net set dev --allow-out pypi.org,files.pythonhosted.org\n  \
                            atoll net set dev --deny-out 0.0.0.0/0,::/0 --allow-out github.com\n  \
                            atoll net set dev --reset               (back to the default policy)")]
    Set(SetArgs),
    /// Print a sandbox's audit log: every connection attempt and DNS query, with its
    /// verdict and the rule that decided it.
    #[command(
        after_help = "Examples:\n  atoll net log dev\n  atoll net log dev --verdict deny --limit 20\n  \
                            atoll net log dev --follow --json"
    )]
    Log(LogArgs),
}

/// A subcommand taking one sandbox.
#[derive(Debug, Args)]
pub struct NetSandboxArg {
    /// Sandbox name or id.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
}

/// `atoll net allow|deny|rm`.
#[derive(Debug, Args)]
pub struct RulesArgs {
    /// Sandbox name or id.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
    /// Rules (space- or comma-separated): domain, *.pattern, IP or CIDR, optionally :PORT.
    #[arg(value_name = "RULE", required = true, value_delimiter = ',')]
    pub rules: Vec<Rule>,
}

/// `atoll net set`.
#[derive(Debug, Args)]
pub struct SetArgs {
    /// Sandbox name or id.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
    /// The new allow list, replacing the current one (repeatable or comma-separated):
    /// domain, *.pattern, IP or CIDR, optionally :PORT.
    #[arg(long, value_name = "RULE", value_delimiter = ',', num_args = 1)]
    pub allow_out: Option<Vec<Rule>>,
    /// The new deny list, replacing the current one (same forms).
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

/// `atoll net log`.
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

/// `atoll net-helper` (hidden; `atoll create` runs it; [`crate::app`] parses it on its own).
#[derive(Debug, Clone, Args)]
pub struct HelperArgs {
    /// The sandbox directory (holding sandbox.json and net.json).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Its end of the socket pair to the secret command runner (started beside it).
    #[arg(long, value_name = "FD")]
    pub runner_fd: Option<i32>,
    /// The listening socket QEMU's serial console connects to (`vm/wire/tty.sock`),
    /// bound by atoll (`jail::wire`).
    #[arg(long, value_name = "FD")]
    pub tty_fd: i32,
    /// The listening socket atoll connects QEMU's stdout and stderr to (`net/stderr.sock`).
    #[arg(long, value_name = "FD")]
    pub stderr_fd: i32,
    /// The listening socket QEMU's NIC connects to (`vm/wire/net.sock`), with a network.
    #[arg(long, value_name = "FD")]
    pub frames_fd: Option<i32>,
}
