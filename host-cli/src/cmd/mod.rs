//! The CLI face: one module per group of subcommands, each a thin adapter that takes its
//! arguments from [`crate::cli`], calls the use-case layer ([`crate::sandbox`],
//! [`crate::template`]) or the typed client ([`crate::client::Client`]), and prints the
//! result through [`crate::output`]. Commands never import [`crate::app`], nor [`crate::mcp`]
//! (except `mcp`, which only starts that face), nor [`crate::vmm`].
//!
//! - `exec` lives in `exec`; `shell`, and the terminal session `exec -t` shares, in
//!   `shell` (the host terminal itself is [`crate::tty`]);
//! - `run`, `jobs`, `job status|wait|kill|logs` in `jobs`;
//! - `cat`, `write`, `ls`, `stat`, `rm`, `mv`, `mkdir` in `files` (with `file_sink`,
//!   where a download lands);
//! - `cp` (both directions, files and directories) and `download` in `cp`, with the
//!   `:/path` / `NAME:/path` grammar in `location`;
//! - `info` and `completions` in `system`;
//! - `mcp`, the MCP server, in `mcp` (see [`crate::mcp`]);
//! - `create`, `inspect`, `pause`, `resume`, `kill` (the sandbox lifecycle) in `sandbox`,
//!   and `stats` (what sandboxes use) in `stats`;
//! - `snapshot create|ls|rm|restore` in `snapshot`;
//! - `template build|save|ls|rm` in `template`;
//! - `port publish|ls|unpublish` (published ports) in `port`, `net show|set|log` (egress
//!   policy and audit log) in `net` (the hidden `net-helper` is dispatched in [`crate::app`]);
//! - [`UsageError`] (in `error`): a command line that parsed but makes no sense; [`next_step`]:
//!   what to do about an agent's refusal, in `atoll` commands.

mod cp;
mod desktop;
mod error;
mod exec;
mod file_sink;
mod files;
mod jobs;
mod location;
mod mcp;
mod net;
mod port;
mod sandbox;
mod secret;
mod shell;
mod snapshot;
mod staging;
mod stats;
mod system;
mod template;

use anyhow::Result;

pub use error::{UsageError, next_step};

use crate::cli::{Cli, Command, GlobalArgs};
use crate::client::Client;
use crate::output::Output;
use crate::sandbox::target;

/// What every subcommand gets: the global options and where to print.
pub(crate) struct Ctx {
    pub(crate) global: GlobalArgs,
    pub(crate) out: Output,
}

impl Ctx {
    /// Connects to the agent named by `--agent` / `--sandbox`.
    pub(crate) async fn client(&self) -> Result<Client> {
        let (env_agent, env_sandbox) =
            (std::env::var("ATOLL_AGENT").ok(), std::env::var("ATOLL_SANDBOX").ok());
        let (agent, sandbox) = target::flags_over_env(
            self.global.agent.as_deref(),
            self.global.sandbox.as_deref(),
            env_agent.as_deref(),
            env_sandbox.as_deref(),
        );
        let addr = target::resolve_target(agent, sandbox).await?;
        tracing::debug!("connecting to {addr}");
        let defaults = crate::sandbox::command_defaults(&addr);
        Ok(Client::open(&addr, self.global.connect_timeout).await?.with_defaults(defaults))
    }

    /// Connects to the named sandbox, or to the global target when `sandbox` is `None`.
    pub(crate) async fn client_for(&self, sandbox: Option<&str>) -> Result<Client> {
        match sandbox {
            None => self.client().await,
            Some(name) => {
                let addr = target::sandbox_address(name).await?;
                let defaults = crate::sandbox::command_defaults(&addr);
                Ok(Client::open(&addr, self.global.connect_timeout).await?.with_defaults(defaults))
            }
        }
    }
}

/// Runs one parsed command line; returns the process exit code.
pub async fn run(cli: Cli) -> Result<u8> {
    let q = &cli.global.quotas;
    crate::sandbox::quota::set_flags(crate::sandbox::quota::Flags {
        sandboxes: q.max_sandboxes,
        memory_mib: q.max_memory_mib,
        vcpus: q.max_vcpus,
        disk: q.max_disk,
        snapshot_disk: q.max_snapshot_disk,
    });
    let ctx = Ctx { out: Output { json: cli.global.json }, global: cli.global };
    match cli.command {
        Command::Exec(args) => exec::exec(&ctx, args).await,
        Command::Shell(args) => shell::shell(&ctx, args).await,
        Command::Run(args) => jobs::run(&ctx, args).await,
        Command::Jobs => jobs::list(&ctx).await,
        Command::Job(cmd) => jobs::job(&ctx, cmd).await,
        Command::Cat(args) => files::cat(&ctx, args).await,
        Command::Write(args) => files::write(&ctx, args).await,
        Command::Ls(args) => files::ls(&ctx, args).await,
        Command::Stat(args) => files::stat(&ctx, args).await,
        Command::Rm(args) => files::rm(&ctx, args).await,
        Command::Mv(args) => files::mv(&ctx, args).await,
        Command::Mkdir(args) => files::mkdir(&ctx, args).await,
        Command::Cp(args) => cp::cp(&ctx, args).await,
        Command::Download(args) => cp::download(&ctx, args).await,
        Command::Info(args) => match args.name {
            Some(name) => sandbox::inspect(&ctx, &name).await,
            None => system::info(&ctx).await,
        },
        Command::Completions(args) => system::completions(&ctx, args),
        Command::Mcp(args) => mcp::mcp(&ctx, args).await,
        Command::Sandbox(cmd) => sandbox::run(&ctx, cmd).await,
        Command::Snapshot(cmd) => snapshot::run(&ctx, cmd).await,
        Command::Template(cmd) => template::run(&ctx, cmd).await,
        Command::Image(cmd) => template::image(&ctx, cmd),
        Command::Port(cmd) => port::run(&ctx, cmd).await,
        Command::Net(cmd) => net::run(&ctx, cmd).await,
        Command::Secret(cmd) => secret::run(&ctx, cmd).await,
        Command::Screenshot(args) => desktop::screenshot(&ctx, args).await,
        Command::Input(args) => desktop::input(&ctx, args).await,
        Command::Desktop(args) => desktop::view(&ctx, args).await,
        Command::Browser(cmd) => desktop::browser(&ctx, cmd).await,
    }
}

/// Prints `value` as JSON with `--json`, else `text`; exit code 0.
fn print<T: serde::Serialize>(ctx: &Ctx, value: &T, text: &str) -> Result<u8> {
    ctx.out.json_or_text(value, text)?;
    Ok(0)
}
