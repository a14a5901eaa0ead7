//! `atoll info` and `atoll completions`.

use anyhow::Result;
use clap::CommandFactory;

use super::Ctx;
use crate::cli::{Cli, CompletionsArgs};
use crate::output::{escape_controls, human_bytes};

/// `atoll info`: the agent's version and its machine.
pub(super) async fn info(ctx: &Ctx) -> Result<u8> {
    let state = crate::vmm::dirs::state_dir()?;
    let quotas = crate::sandbox::quota::report(&state).map_err(anyhow::Error::msg)?;
    let client = match ctx.client().await {
        Ok(c) => c,
        Err(e) => {
            // No sandbox to ask: the host's quotas are still worth showing.
            if ctx.out.json {
                ctx.out.json(&serde_json::json!({ "quotas": quotas }))?;
            } else {
                ctx.out.text(&quota_text(&quotas))?;
            }
            return Err(e);
        }
    };
    let i = client.info().await?;
    if ctx.out.json {
        let mut doc = serde_json::to_value(&i)?;
        doc["quotas"] = serde_json::to_value(&quotas)?;
        ctx.out.json(&doc)?;
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
    ctx.out.text(&format!("{text}\n{}", quota_text(&quotas)))?;
    Ok(0)
}

/// The host quotas, one a line: use, limit, where the limit came from.
fn quota_text(quotas: &[crate::sandbox::quota::QuotaUse]) -> String {
    let mut text = String::from("quotas:   (in use / limit, where the limit is set)");
    for q in quotas {
        let (used, limit) = match q.unit {
            "bytes" => (human_bytes(q.used), human_bytes(q.limit)),
            "MiB" => (human_bytes(q.used << 20), human_bytes(q.limit << 20)),
            _ => (q.used.to_string(), q.limit.to_string()),
        };
        text.push_str(&format!("\n  {:<18} {used} / {limit}  ({})", q.key, escape_controls(&q.source)));
    }
    text
}

/// `atoll completions SHELL`: a completion script on stdout.
pub(super) fn completions(_ctx: &Ctx, args: CompletionsArgs) -> Result<u8> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "atoll", &mut buf);
    crate::output::write_stdout(&buf)?;
    Ok(0)
}
