//! `atoll info` and `atoll completions`.

use anyhow::Result;
use clap::CommandFactory;

use super::Ctx;
use crate::cli::{Cli, CompletionsArgs};
use crate::output::{escape_controls, human_bytes};

/// `atoll info`: the agent's version and its machine.
pub(super) async fn info(ctx: &Ctx) -> Result<u8> {
    let client = ctx.client().await?;
    let i = client.info().await?;
    if ctx.out.json {
        ctx.out.json(&i)?;
        return Ok(0);
    }
    let text = format!(
        "agent:    atoll-agent {} at {}{}\nhost:     {} ({})\nuptime:   {}\ncpus:     {}\nmemory:   {} available of {}\ndisk:     {} free of {}\nclock:    {} ms since the epoch\njail:     {}",
        escape_controls(&i.agent_version),
        client.address(),
        if i.pid1 { " (pid 1)" } else { "" },
        escape_controls(&i.hostname),
        escape_controls(&i.kernel),
        humantime::format_duration(std::time::Duration::from_secs(i.uptime_ms / 1000)),
        i.cpus,
        human_bytes(i.memory_available_bytes),
        human_bytes(i.memory_total_bytes),
        human_bytes(i.disk_free_bytes),
        human_bytes(i.disk_total_bytes),
        i.time_unix_ms,
        crate::sandbox::jail_status(),
    );
    ctx.out.text(&text)?;
    Ok(0)
}

/// `atoll completions SHELL`: a completion script on stdout.
pub(super) fn completions(_ctx: &Ctx, args: CompletionsArgs) -> Result<u8> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "atoll", &mut buf);
    crate::output::write_stdout(&buf)?;
    Ok(0)
}
