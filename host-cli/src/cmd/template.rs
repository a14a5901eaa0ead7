//! `sbx template build|save|ls|rm`: thin callers of [`crate::template`] (and of
//! [`crate::sandbox::save_template`] for `save`).

use std::fmt::Write as _;

use anyhow::Result;

use super::Ctx;
use crate::cli::{BuildArgs, InitArg, SaveArgs, TemplateCommand};
use crate::output::human_bytes;
use crate::sandbox::save_template::{SaveOptions, save_template};
use crate::template::InitKind;
use crate::template::{self, BuildOptions, Source};

/// Runs one `sbx template` subcommand.
pub(crate) async fn run(ctx: &Ctx, cmd: TemplateCommand) -> Result<u8> {
    match cmd {
        TemplateCommand::Build(a) => build(ctx, a).await,
        TemplateCommand::Save(a) => save(ctx, a).await,
        TemplateCommand::Ls => ls(ctx),
        TemplateCommand::Rm(a) => rm(ctx, &a.names),
    }
}

async fn build(ctx: &Ctx, a: BuildArgs) -> Result<u8> {
    template::check_name(&a.name)?;
    let opts = BuildOptions {
        name: a.name,
        source: Source::detect(&a.from)?,
        init: match a.init {
            InitArg::Agent => InitKind::Agent,
            InitArg::Systemd => InitKind::Systemd,
        },
        size: a.size,
        force: a.force,
    };
    eprintln!("sbx: building template `{}` from {}", opts.name, a.from.display());
    let built = tokio::task::spawn_blocking(move || template::build(&opts)).await??;
    if ctx.out.json {
        ctx.out.json(&built)?;
    } else {
        ctx.out.text(&format!(
            "template `{}` built at {} ({} image, init: {})\nboot it with: sbx create --template {}",
            built.template.name,
            built.path.display(),
            human_bytes(built.image_bytes),
            init_name(built.template.init),
            built.template.name
        ))?;
    }
    Ok(0)
}

async fn save(ctx: &Ctx, a: SaveArgs) -> Result<u8> {
    let saved = save_template(&a.sandbox, &SaveOptions { name: a.name, replace: a.replace }).await?;
    if ctx.out.json {
        ctx.out.json(&saved)?;
    } else {
        ctx.out.text(&format!(
            "template `{}` {} from sandbox `{}` ({} on disk)\ncreate sandboxes from it with: sbx create --template {}",
            saved.name,
            if saved.replaced { "replaced" } else { "saved" },
            saved.from_sandbox,
            human_bytes(saved.disk_usage_bytes),
            saved.name
        ))?;
    }
    Ok(0)
}

fn ls(ctx: &Ctx) -> Result<u8> {
    let templates = template::list()?;
    if ctx.out.json {
        ctx.out.json(&templates)?;
        return Ok(0);
    }
    if templates.is_empty() {
        eprintln!("sbx: no templates installed; build `minimal` with rootfs/setup.sh");
        return Ok(0);
    }
    let mut text = format!("{:<20} {:<8} {:<5} {:>10}  {}\n", "NAME", "INIT", "DISK", "SIZE", "AGENT");
    for t in &templates {
        let init = t.init.map_or("?", init_name);
        let disk = if t.disk { "ext4" } else { "-" };
        let _ = writeln!(
            text,
            "{:<20} {:<8} {:<5} {:>10}  {}",
            t.name,
            init,
            disk,
            human_bytes(t.disk_usage_bytes),
            t.problem.as_deref().unwrap_or(&t.agent_version)
        );
    }
    ctx.out.text(&text)?;
    Ok(0)
}

fn rm(ctx: &Ctx, names: &[String]) -> Result<u8> {
    // Every name is checked first, so one in use removes nothing.
    for name in names {
        template::check_name(name)?;
        template::refuse_if_in_use(name)?;
    }
    let mut removed = Vec::new();
    for name in names {
        template::remove(name)?;
        removed.push(name.clone());
    }
    if ctx.out.json {
        ctx.out.json(&serde_json::json!({ "removed": removed }))?;
    } else {
        ctx.out.text(
            &removed.iter().map(|n| format!("removed template `{n}`")).collect::<Vec<_>>().join("\n"),
        )?;
    }
    Ok(0)
}

fn init_name(init: InitKind) -> &'static str {
    match init {
        InitKind::Agent => "agent",
        InitKind::Systemd => "systemd",
    }
}
