//! `sbx template build|ls|rm`: thin callers of [`crate::template`].

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};

use super::Ctx;
use crate::output::human_bytes;
use crate::template::{self, BuildOptions, Source};
use crate::vmm::template::InitKind;

/// `sbx template ...`.
#[derive(Debug, Subcommand)]
pub enum TemplateCommand {
    /// Bake the agent into your own root filesystem and install it as a template.
    #[command(after_help = "Examples:\n  \
        sudo sbx template build --from ./rootfs --name mine\n  \
        docker export $(docker create ubuntu:24.04) > ubuntu.tar\n  \
        sudo sbx template build --from ubuntu.tar --name ubuntu\n  \
        sudo sbx template build --from debian-systemd.tar.gz --name deb --init systemd\n  \
        sbx create --template mine")]
    Build(BuildArgs),
    /// List the installed templates.
    Ls,
    /// Remove templates (running sandboxes made from them keep running).
    Rm(RmArgs),
}

/// What runs as PID 1 in the new template.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum InitArg {
    /// sbx-agent is PID 1 (fast; no services start).
    Agent,
    /// systemd is PID 1 and starts sbx-agent.service (the tree must have systemd).
    Systemd,
}

/// `sbx template build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The root filesystem: a directory, or a tarball (.tar, .tar.gz, .tar.xz, .tar.zst).
    #[arg(long, value_name = "DIR|TARBALL")]
    pub from: PathBuf,
    /// The template's name (letters, digits, `-`, `_`, `.`).
    #[arg(long, short = 'n')]
    pub name: String,
    /// What runs as PID 1.
    #[arg(long, value_enum, default_value = "agent")]
    pub init: InitArg,
    /// Size of the ext4 image, e.g. 4G or 512M (sparse); default: the tree plus room.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub size: Option<u64>,
    /// Replace a template of the same name.
    #[arg(long, short = 'f')]
    pub force: bool,
}

/// `sbx template rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// Template names.
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<String>,
}

/// Runs one `sbx template` subcommand.
pub(crate) async fn run(ctx: &Ctx, cmd: TemplateCommand) -> Result<u8> {
    match cmd {
        TemplateCommand::Build(a) => build(ctx, a).await,
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

/// `4G`, `512M`, `1048576`: a size in bytes (K, M, G, T are powers of 1024).
fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, shift) = match s.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&s[..s.len() - 1], 10),
        Some('M') => (&s[..s.len() - 1], 20),
        Some('G') => (&s[..s.len() - 1], 30),
        Some('T') => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    let n: u64 =
        digits.parse().map_err(|_| format!("`{s}` is not a size; use e.g. 4G, 512M or a byte count"))?;
    let bytes = n.checked_mul(1 << shift).ok_or_else(|| format!("`{s}` is too large"))?;
    if bytes < 64 << 20 {
        return Err(format!("`{s}` is too small for an ext4 root filesystem; use at least 64M"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes() {
        assert_eq!(super::parse_size("4G"), Ok(4 << 30));
        assert_eq!(super::parse_size("512m"), Ok(512 << 20));
        assert!(super::parse_size("1K").unwrap_err().contains("at least 64M"));
        assert!(super::parse_size("lots").unwrap_err().contains("not a size"));
    }
}
