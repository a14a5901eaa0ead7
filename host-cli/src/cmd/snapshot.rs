//! `atoll snapshot create|ls|rm|restore`: thin callers of [`crate::sandbox::snapshot`].

use super::print;
use std::fmt::Write as _;

use anyhow::Result;

use super::{Ctx, UsageError};
use crate::cli::SnapshotCommand;
use crate::output::human_bytes;
use crate::sandbox::snapshot::{self, SnapshotOptions};

/// Runs one `atoll snapshot` subcommand.
pub(crate) async fn run(ctx: &Ctx, cmd: SnapshotCommand) -> Result<u8> {
    match cmd {
        SnapshotCommand::Create(a) => {
            let Some(sandbox) = a.sandbox.or_else(|| ctx.global.sandbox.clone()) else {
                return Err(UsageError("name the sandbox: `atoll snapshot create SANDBOX`".into()).into());
            };
            let info =
                snapshot::create(&sandbox, &SnapshotOptions { name: a.name, stop: a.stop, created_by: None })
                    .await?;
            let text = format!("{}\n", info.name);
            print(ctx, &info, &text)
        }
        SnapshotCommand::Ls => {
            let all = snapshot::list()?;
            let mut t = String::new();
            if !all.is_empty() {
                let _ = writeln!(
                    t,
                    "{:<24} {:<20} {:<10} {:>8} {:>10} {:>8}",
                    "NAME", "SANDBOX", "TEMPLATE", "MEMORY", "SIZE", "AGE"
                );
            }
            for s in &all {
                let _ = writeln!(
                    t,
                    "{:<24} {:<20} {:<10} {:>8} {:>10} {:>8}",
                    s.name,
                    s.source_sandbox,
                    s.template,
                    format!("{}M", s.memory_mib),
                    human_bytes(s.size_bytes),
                    format!("{}s", s.age_secs)
                );
            }
            print(ctx, &all, &t)
        }
        SnapshotCommand::Rm(a) => {
            let removed = snapshot::remove(&a.names).await?;
            let text: String = removed.iter().map(|n| format!("{n}\n")).collect();
            print(ctx, &removed, &text)
        }
        SnapshotCommand::Restore(a) => {
            let info = snapshot::restore(&a.sandbox, &a.snapshot, a.timeout).await?;
            let text = format!("{} {} (restored from {})\n", info.name, info.state.as_str(), a.snapshot);
            print(ctx, &info, &text)
        }
    }
}
