//! `atoll template build|snapshot|save|ls|rm`: thin callers of [`crate::template`] (and
//! of [`crate::sandbox::save_template`] for `save`, [`crate::sandbox::template_snap`]
//! for `snapshot` and the end of `build`).

use std::fmt::Write as _;

use anyhow::Result;

use super::{Ctx, print};
use crate::cli::{BuildArgs, InitArg, SaveArgs, TemplateCommand, TemplateSnapshotArgs};
use crate::output::human_bytes;
use crate::sandbox::save_template::{SaveOptions, save_template};
use crate::sandbox::template_snap::{self, TemplateSnapshotInfo};
use crate::sandbox::{CreateOptions, SandboxError};
use crate::template::InitKind;
use crate::template::{self, BuildOptions, Source};

/// Runs one `atoll template` subcommand.
pub(crate) async fn run(ctx: &Ctx, cmd: TemplateCommand) -> Result<u8> {
    match cmd {
        TemplateCommand::Build(a) => build(ctx, a).await,
        TemplateCommand::Snapshot(a) => snapshot(ctx, a).await,
        TemplateCommand::Save(a) => save(ctx, a).await,
        TemplateCommand::Ls => ls(ctx),
        TemplateCommand::Rm(a) => rm(ctx, &a.names),
    }
}

/// Runs one `atoll image` subcommand.
pub(crate) fn image(ctx: &Ctx, cmd: crate::cli::ImageCommand) -> Result<u8> {
    match cmd {
        crate::cli::ImageCommand::Ls => {
            let listing = template::image::cached()?;
            let mut text = String::new();
            for i in &listing.images {
                let _ = writeln!(
                    text,
                    "{}  {}  {} layer{}  {}",
                    template::image::escape_controls(&i.reference),
                    i.digest,
                    i.layers.len(),
                    if i.layers.len() == 1 { "" } else { "s" },
                    human_bytes(i.bytes)
                );
            }
            let _ = writeln!(text, "cache: {}", human_bytes(listing.total_bytes));
            print(ctx, &listing, &text)
        }
        crate::cli::ImageCommand::Prune => {
            let freed = template::image::prune()?;
            print(
                ctx,
                &serde_json::json!({ "freed_bytes": freed }),
                &format!("freed {}\n", human_bytes(freed)),
            )
        }
    }
}

async fn build(ctx: &Ctx, a: BuildArgs) -> Result<u8> {
    template::check_name(&a.name)?;
    if a.dockerfile.is_some() {
        return build_dockerfile(ctx, a).await;
    }
    let mut image_config = None;
    let (source, from) = match (&a.from, &a.image) {
        (Some(from), _) => (Source::detect(from)?, from.display().to_string()),
        (None, Some(reference)) => {
            let fetch = template::image::FetchOptions {
                insecure: a.insecure_registry,
                auth: a
                    .registry_auth
                    .clone()
                    .map_or(template::image::RegistryAuth::Lookup, template::image::RegistryAuth::File),
            };
            eprintln!("atoll: fetching image {reference}");
            let r = reference.clone();
            let fetched = tokio::task::spawn_blocking(move || template::image::fetch(&r, &fetch)).await??;
            let from = format!("image {reference} ({})", fetched.digest);
            image_config = Some(fetched.config.clone());
            (Source::Image(Box::new(fetched)), from)
        }
        (None, None) => unreachable!("clap requires --from or --image"),
    };
    let opts = BuildOptions {
        name: a.name.clone(),
        source,
        init: match a.init {
            InitArg::Agent => InitKind::Agent,
            InitArg::Systemd => InitKind::Systemd,
        },
        size: a.size,
        force: a.force,
    };
    eprintln!("atoll: building template `{}` from {from}", opts.name);
    let built = tokio::task::spawn_blocking(move || template::build(&opts)).await??;
    let name = built.template.name.clone();
    if let Some(config) = &image_config {
        template::dockerfile::write_image_config(&built.path, config)?;
    }
    record_start(&name, &a)?;
    let mut text = format!(
        "template `{name}` built at {} ({} image, init: {})\nboot it with: atoll create --template {name}",
        built.path.display(),
        human_bytes(built.image_bytes),
        init_name(built.template.init),
    );
    let snapshot = if a.no_snapshot { None } else { snapshot_after_build(&name).await };
    if let Some(made) = &snapshot {
        text.push('\n');
        text.push_str(&snapshot_line(made));
    }
    #[derive(serde::Serialize)]
    struct BuildOutput {
        #[serde(flatten)]
        built: template::bake::Built,
        snapshot: Option<TemplateSnapshotInfo>,
    }
    print(ctx, &BuildOutput { built, snapshot }, &format!("{text}\n"))
}

/// `atoll template build --dockerfile`: RUN output goes to stderr as it comes, the
/// result to stdout.
async fn build_dockerfile(ctx: &Ctx, a: BuildArgs) -> Result<u8> {
    use std::io::Write as _;
    use template::dockerfile::{self, DockerfileOptions, Progress};
    let dockerfile = a.dockerfile.clone().expect("checked by the caller");
    let context = a.context.clone().unwrap_or_else(|| {
        dockerfile.parent().filter(|p| !p.as_os_str().is_empty()).map_or_else(|| ".".into(), Into::into)
    });
    let opts = DockerfileOptions {
        name: a.name.clone(),
        dockerfile,
        context,
        build_args: a.build_arg.iter().cloned().collect(),
        fetch: template::image::FetchOptions {
            insecure: a.insecure_registry,
            auth: a
                .registry_auth
                .clone()
                .map_or(template::image::RegistryAuth::Lookup, template::image::RegistryAuth::File),
        },
        force: a.force,
        size: a.size,
        memory_mib: a.build_memory,
        by: None,
        no_cache: a.no_cache,
    };
    let progress = |p: Progress| {
        let mut err = std::io::stderr().lock();
        let _ = match p {
            Progress::Step { index, total, line, text, cached } => writeln!(
                err,
                "atoll: step {index}/{total} (line {line}): {}{}",
                template::image::escape_controls(&text),
                if cached { " (cached)" } else { "" }
            ),
            Progress::Output { bytes, .. } => err.write_all(&bytes),
            Progress::Note(n) => writeln!(err, "atoll: {}", template::image::escape_controls(&n)),
        };
    };
    // Ctrl-C drops the build, which kills its VM and removes its base.
    let mut built = tokio::select! {
        r = dockerfile::build(&opts, &progress) => r?,
        _ = tokio::signal::ctrl_c() => return Err(SandboxError::Interrupted.into()),
    };
    let name = built.template.name.clone();
    record_start(&name, &a)?;
    if let Some(image) = dockerfile::image_config(&name) {
        built.image = image;
    }
    let mut text = format!(
        "template `{name}` built from {} at {} ({} RUN step{} ran, {} step{} from the cache)\nboot it with: atoll create --template {name}",
        a.dockerfile.as_deref().map(|p| p.display().to_string()).unwrap_or_default(),
        built.path.display(),
        built.run_steps,
        if built.run_steps == 1 { "" } else { "s" },
        built.cached_steps,
        if built.cached_steps == 1 { "" } else { "s" },
    );
    let snapshot = if a.no_snapshot { None } else { snapshot_after_build(&name).await };
    if let Some(made) = &snapshot {
        text.push('\n');
        text.push_str(&snapshot_line(made));
    }
    #[derive(serde::Serialize)]
    struct DockerfileOutput {
        #[serde(flatten)]
        built: dockerfile::DockerfileBuilt,
        snapshot: Option<TemplateSnapshotInfo>,
    }
    print(ctx, &DockerfileOutput { built, snapshot }, &format!("{text}\n"))
}

/// Records `--start` and `--ready-cmd` for template `name` just built; on failure the
/// template is removed (nothing half-made).
fn record_start(name: &str, a: &BuildArgs) -> Result<()> {
    if !a.start && a.ready_cmd.is_none() {
        return Ok(());
    }
    if let Err(why) = template::start::record(name, a.start, a.ready_cmd.clone()) {
        let _ = template::remove(name);
        anyhow::bail!("{why}; the template was not kept");
    }
    Ok(())
}

/// The snapshot of template `name` just built, for the default machine shape; `None`
/// when template snapshots are off, under sudo, or when it could not be made (said on
/// stderr: the template is built either way, and `atoll create` boots without one).
async fn snapshot_after_build(name: &str) -> Option<TemplateSnapshotInfo> {
    if !template_snap::enabled() {
        return None;
    }
    if under_sudo() {
        eprintln!(
            "atoll: not making the template's snapshot under sudo (it would go to root's state \
             directory); run `atoll template snapshot {name}` as yourself, or let the first \
             `atoll create --template {name}` make it"
        );
        return None;
    }
    eprintln!("atoll: making the snapshot of template `{name}` (boots it once)");
    let opts = CreateOptions { template: name.to_owned(), ..CreateOptions::default() };
    match interruptible(template_snap::make(&opts)).await {
        Ok(made) => Some(made),
        Err(e) => {
            eprintln!(
                "atoll: warning: the template was built, but its snapshot could not be made: {:#}\n\
                 atoll: `atoll create --template {name}` boots it and makes one, or run `atoll template snapshot {name}`",
                anyhow::Error::from(e)
            );
            None
        }
    }
}

async fn snapshot(ctx: &Ctx, a: TemplateSnapshotArgs) -> Result<u8> {
    if a.rm {
        let removed = template_snap::forget(&a.template)?;
        let doc = serde_json::json!({ "template": a.template, "removed": removed });
        return print(ctx, &doc, &format!("removed {removed} snapshot(s) of template `{}`\n", a.template));
    }
    let opts = CreateOptions {
        template: a.template,
        memory_mib: a.memory,
        cpus: a.cpus,
        network: a.net,
        timeout: a.timeout,
        ..CreateOptions::default()
    };
    let made = interruptible(template_snap::make(&opts)).await?;
    print(ctx, &made, &format!("{}\n", snapshot_line(&made)))
}

/// Runs `work`; Ctrl-C drops it, which undoes what it started.
async fn interruptible<T>(
    work: impl std::future::Future<Output = Result<T, SandboxError>>,
) -> Result<T, SandboxError> {
    tokio::select! {
        r = work => r,
        _ = tokio::signal::ctrl_c() => Err(SandboxError::Interrupted),
    }
}

/// One line saying what became of a template snapshot.
fn snapshot_line(s: &TemplateSnapshotInfo) -> String {
    let what = match (s.outcome, &s.replaced_because) {
        (template_snap::Outcome::Replaced, Some(why)) => format!("replaced ({why})"),
        (outcome, _) => outcome.as_str().to_owned(),
    };
    let net = if s.network == crate::sandbox::network::NetworkMode::None { " --net none" } else { "" };
    format!(
        "snapshot of template `{}` ({} MiB, {} vCPU, network {}, {}): {what}, {} at {}\n\
         `atoll create --template {} --memory {} --cpus {}{net}` restores it",
        s.template,
        s.memory_mib,
        s.cpus,
        s.network.as_str(),
        s.accel,
        human_bytes(s.size_bytes),
        s.path.display(),
        s.template,
        s.memory_mib,
        s.cpus,
    )
}

/// Root by way of sudo: `$HOME` (so the state directory) may be root's, not the user's.
fn under_sudo() -> bool {
    rustix::process::geteuid().is_root() && std::env::var_os("SUDO_USER").is_some()
}

async fn save(ctx: &Ctx, a: SaveArgs) -> Result<u8> {
    let saved =
        save_template(&a.sandbox, &SaveOptions { name: a.name, replace: a.replace, by: None }).await?;
    if ctx.out.json {
        ctx.out.json(&saved)?;
    } else {
        ctx.out.text(&format!(
            "template `{}` {} from sandbox `{}` ({} on disk)\ncreate sandboxes from it with: atoll create --template {}",
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
    use template::building::BuildState;
    let templates = template::list()?;
    // Background builds (MCP) not installed yet: building, or failed and why. A build
    // replacing an installed template shows as that template's status.
    let builds = template::building::list()?;
    let status = |name: &str| match builds.iter().find(|b| b.name == name) {
        Some(b) if b.state == BuildState::Building => "building",
        _ => "ready",
    };
    let pending: Vec<_> = builds.iter().filter(|b| !templates.iter().any(|t| t.name == b.name)).collect();
    let state_of = |b: &template::building::BuildRecord| match b.state {
        BuildState::Building => "building",
        BuildState::Failed => "failed",
    };
    if ctx.out.json {
        let mut all = Vec::with_capacity(templates.len() + pending.len());
        for t in &templates {
            let mut v = serde_json::to_value(t)?;
            v["status"] = status(&t.name).into();
            all.push(v);
        }
        for b in &pending {
            let mut v = serde_json::json!({ "name": b.name, "status": state_of(b) });
            // As sandbox_template_list says it: why in `problem`.
            if let Some(reason) = &b.reason {
                v["problem"] = reason.as_str().into();
            }
            all.push(v);
        }
        ctx.out.json(&all)?;
        return Ok(0);
    }
    if templates.is_empty() && pending.is_empty() {
        eprintln!("atoll: no templates installed; build `minimal` with rootfs/setup.sh");
        return Ok(0);
    }
    let mut text = format!("{:<20} {:<8} {:<5} {:>10}  {}\n", "NAME", "INIT", "DISK", "SIZE", "AGENT");
    for t in &templates {
        let init = t.init.map_or("?", init_name);
        let disk = if t.disk { "ext4" } else { "-" };
        let agent = t.problem.as_deref().unwrap_or(&t.agent_version);
        let rebuilding = if status(&t.name) == "building" { " (rebuilding)" } else { "" };
        let _ = writeln!(
            text,
            "{:<20} {:<8} {:<5} {:>10}  {agent}{rebuilding}",
            t.name,
            init,
            disk,
            human_bytes(t.disk_usage_bytes),
        );
    }
    for b in pending {
        let state = match b.state {
            BuildState::Building => "building".to_owned(),
            BuildState::Failed => {
                format!("failed: {}", template::image::escape_controls(b.reason.as_deref().unwrap_or("")))
            }
        };
        let _ = writeln!(text, "{:<20} {:<8} {:<5} {:>10}  {state}", b.name, "-", "-", "-");
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
        // Its snapshots (in this state directory) could never be used again.
        if let Err(e) = template_snap::forget(name) {
            eprintln!(
                "atoll: warning: template `{name}` was removed, but not its snapshots: {:#}",
                anyhow::Error::from(e)
            );
        }
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
