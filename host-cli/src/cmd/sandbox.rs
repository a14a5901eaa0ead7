//! The sandbox lifecycle subcommands: `sbx create`, `sbx inspect`, `sbx pause`,
//! `sbx resume`, `sbx kill` (`sbx ls` without a path lives with the file commands).
//! Thin callers of [`crate::sandbox`].

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};

use super::Ctx;
use crate::app::UsageError;
use crate::sandbox::{self, CreateOptions, RemoveOptions, SandboxError};
use crate::vmm::template::DEFAULT_TEMPLATE;

/// The sandbox lifecycle subcommands, flattened into the top level.
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Boot a new sandbox (a microVM running sbx-agent) and print its id.
    #[command(after_help = "Examples:\n  sbx create\n  sbx create --name dev --memory 1024 --cpus 2\n  \
                            sbx -s dev exec -- uname -a")]
    Create(CreateArgs),
    /// Show a sandbox: state, template, resources, pids, age and its agent's Info.
    Inspect(SandboxArg),
    /// Freeze a sandbox (its whole VM stops); it keeps its memory and continues where it stopped.
    Pause(SandboxArg),
    /// Resume a paused sandbox and set its clock to the host's.
    Resume(SandboxArg),
    /// Stop sandboxes and delete everything they started and wrote (dead ones too).
    #[command(visible_alias = "destroy")]
    Kill(KillArgs),
}

/// `sbx create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Template to boot: `minimal` (built by rootfs/setup.sh), `debian`, or your own.
    #[arg(long, short = 't', default_value = DEFAULT_TEMPLATE)]
    pub template: String,
    /// Name for the sandbox (letters, digits, `-`, `_`, `.`); default: a generated one.
    #[arg(long, short = 'n')]
    pub name: Option<String>,
    /// Guest memory in MiB.
    #[arg(long, short = 'm', default_value_t = 512, value_name = "MiB")]
    pub memory: u32,
    /// Guest vCPUs.
    #[arg(long, default_value_t = 1)]
    pub cpus: u32,
    /// How long to wait for the agent to come up, e.g. 120s, 5m.
    #[arg(long, default_value = "120s", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// A subcommand taking one sandbox.
#[derive(Debug, Args)]
pub struct SandboxArg {
    /// Sandbox name, id, or unique id prefix; default: the global --sandbox.
    #[arg(value_name = "SANDBOX")]
    pub name: Option<String>,
}

impl SandboxArg {
    /// The sandbox named here, else the one from `-s` / `SBX_SANDBOX`.
    fn pick(&self, ctx: &Ctx, verb: &str) -> Result<String> {
        match self.name.clone().or_else(|| ctx.global.sandbox.clone()) {
            Some(name) => Ok(name),
            None => {
                Err(UsageError(format!("name the sandbox: `sbx {verb} NAME` (`sbx ls` lists them)")).into())
            }
        }
    }
}

/// `sbx kill`.
#[derive(Debug, Args)]
pub struct KillArgs {
    /// Sandbox names or ids.
    #[arg(value_name = "SANDBOX", required_unless_present = "all")]
    pub sandboxes: Vec<String>,
    /// Remove every sandbox.
    #[arg(long)]
    pub all: bool,
    /// Kill at once instead of asking QEMU to quit, and skip names that do not exist.
    #[arg(long, short = 'f')]
    pub force: bool,
}

/// Runs one lifecycle subcommand.
pub(crate) async fn run(ctx: &Ctx, cmd: SandboxCommand) -> Result<u8> {
    match cmd {
        SandboxCommand::Create(a) => create(ctx, a).await,
        SandboxCommand::Inspect(a) => inspect(ctx, &a.pick(ctx, "inspect")?).await,
        SandboxCommand::Pause(a) => {
            let info = sandbox::pause(&a.pick(ctx, "pause")?).await?;
            print(ctx, &info, &format!("{} {}\n", info.name, info.state.as_str()))
        }
        SandboxCommand::Resume(a) => {
            let r = sandbox::resume(&a.pick(ctx, "resume")?).await?;
            let text = format!(
                "{} {} (clock moved {} ms)\n",
                r.sandbox.name,
                r.sandbox.state.as_str(),
                r.clock_adjusted_ms
            );
            print(ctx, &r, &text)
        }
        SandboxCommand::Kill(a) => remove(ctx, &a.sandboxes, a.all, a.force).await,
    }
}

/// `sbx create`: boots and prints the id; Ctrl-C undoes everything it started.
async fn create(ctx: &Ctx, args: CreateArgs) -> Result<u8> {
    let opts = CreateOptions {
        template: args.template,
        name: args.name,
        memory_mib: args.memory,
        cpus: args.cpus,
        timeout: args.timeout,
    };
    // Dropping the create future on Ctrl-C kills what it started and removes its files.
    let info = tokio::select! {
        r = sandbox::create(&opts) => r?,
        _ = tokio::signal::ctrl_c() => return Err(SandboxError::Interrupted.into()),
    };
    if !ctx.out.json {
        eprintln!("sandbox `{}` is running; try: sbx -s {} exec -- uname -a", info.name, info.name);
    }
    print(ctx, &info, &format!("{}\n", info.id))
}

pub(crate) async fn inspect(ctx: &Ctx, name: &str) -> Result<u8> {
    let i = sandbox::inspect(name).await?;
    let s = &i.sandbox;
    let pid = |p: Option<u32>| p.map_or_else(|| "-".to_string(), |p| p.to_string());
    let mut t = String::new();
    let _ = writeln!(t, "id:        {}", s.id);
    let _ = writeln!(t, "name:      {}", s.name);
    let _ = writeln!(t, "state:     {}", s.state.as_str());
    let _ = writeln!(t, "template:  {}", s.template);
    let _ =
        writeln!(t, "resources: {} MiB, {} vCPU, {} (guest CID {})", s.memory_mib, s.cpus, s.accel, s.cid);
    let _ = writeln!(t, "age:       {} s", s.age_secs);
    let _ = writeln!(t, "pids:      qemu {}, vhost-device-vsock {}", pid(s.qemu_pid), pid(s.vhost_pid));
    let _ = writeln!(t, "address:   {}", s.address);
    let _ = writeln!(t, "directory: {}", s.dir.display());
    match (&i.agent, &i.agent_error) {
        (Some(a), _) => {
            let _ = writeln!(
                t,
                "agent:     sbx-agent {} (pid 1: {}), up {} s",
                a.agent_version,
                a.pid1,
                a.uptime_ms / 1000
            );
            let _ = writeln!(
                t,
                "guest:     {} {}, {} CPUs, {} MiB memory",
                a.hostname,
                a.kernel,
                a.cpus,
                a.memory_total_bytes >> 20
            );
        }
        (None, Some(e)) => {
            let _ = writeln!(t, "agent:     unavailable: {e}");
        }
        (None, None) => {}
    }
    print(ctx, &i, &t)
}

/// Removes sandboxes (`sbx kill`); prints the ids removed.
pub(crate) async fn remove(ctx: &Ctx, names: &[String], all: bool, force: bool) -> Result<u8> {
    let removed = sandbox::remove(names, RemoveOptions { all, force }).await?;
    let text: String = removed.iter().map(|r| format!("{}\n", r.id)).collect();
    print(ctx, &removed, &text)
}

fn print<T: serde::Serialize>(ctx: &Ctx, value: &T, text: &str) -> Result<u8> {
    if ctx.out.json {
        ctx.out.json(value)?;
    } else {
        ctx.out.text(text)?;
    }
    Ok(0)
}
