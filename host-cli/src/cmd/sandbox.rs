//! The sandbox lifecycle subcommands: `atoll create`, `atoll inspect`, `atoll pause`,
//! `atoll resume`, `atoll kill` (`atoll ls` without a path lives with the file commands).
//! Thin callers of [`crate::sandbox`].

use super::print;
use std::fmt::Write as _;

use anyhow::Result;

use super::Ctx;
use super::UsageError;
use crate::cli::{CreateArgs, SandboxArg, SandboxCommand};
use crate::sandbox::{self, CreateOptions, RemoveOptions, SandboxError};

/// The sandbox named here, else the one from `-s` / `ATOLL_SANDBOX`.
fn pick(arg: &SandboxArg, ctx: &Ctx, verb: &str) -> Result<String> {
    match arg.name.clone().or_else(|| ctx.global.sandbox.clone()) {
        Some(name) => Ok(name),
        None => {
            Err(UsageError(format!("name the sandbox: `atoll {verb} NAME` (`atoll ls` lists them)")).into())
        }
    }
}

/// Runs one lifecycle subcommand.
pub(crate) async fn run(ctx: &Ctx, cmd: SandboxCommand) -> Result<u8> {
    match cmd {
        SandboxCommand::Create(a) => create(ctx, *a).await,
        SandboxCommand::Inspect(a) => inspect(ctx, &pick(&a, ctx, "inspect")?).await,
        SandboxCommand::Pause(a) => {
            let name = pick(&a.sandbox, ctx, "pause")?;
            let info =
                if a.to_disk { sandbox::park::park(&name).await? } else { sandbox::pause(&name).await? };
            print(ctx, &info, &format!("{} {}\n", info.name, info.state.as_str()))
        }
        SandboxCommand::Resume(a) => {
            let r = sandbox::resume(&pick(&a, ctx, "resume")?).await?;
            let text = format!(
                "{} {} (clock moved {} ms)\n",
                r.sandbox.name,
                r.sandbox.state.as_str(),
                r.clock_adjusted_ms
            );
            print(ctx, &r, &text)
        }
        SandboxCommand::Kill(a) => remove(ctx, &a.sandboxes, a.all, a.force).await,
        SandboxCommand::Stats(a) => super::stats::stats(ctx, &a.names).await,
    }
}

/// `atoll create`: boots and prints the id; Ctrl-C undoes everything it started.
async fn create(ctx: &Ctx, args: CreateArgs) -> Result<u8> {
    let publishes = !args.publish.is_empty();
    // Every binding is checked before anything is made.
    for (var, name) in &args.secrets {
        crate::secrets::check_binding(name, var)?;
    }
    let secrets = args.secrets.clone();
    let storage =
        crate::sandbox::mounts::Storage { mounts: args.mount, disk_bytes: args.disk, display: args.display };
    crate::sandbox::mounts::check(&storage.mounts).map_err(|e| UsageError(e.to_string()))?;
    let template = match &args.image {
        Some(reference) => {
            image_template(reference, args.insecure_registry, args.registry_auth.clone()).await?
        }
        None => args.template,
    };
    let opts = CreateOptions {
        template,
        name: args.name,
        memory_mib: args.memory,
        cpus: args.cpus,
        timeout: args.timeout,
        network: args.net,
        publish: args.publish,
        policy: atoll_net::policy::Policy { allow_out: args.allow_out, deny_out: args.deny_out },
        from_snapshot: args.from,
        storage,
        created_by: None,
        no_start: false,
    };
    // Dropping the create future on Ctrl-C kills what it started and removes its files.
    let info = tokio::select! {
        r = sandbox::create(&opts) => r?,
        _ = tokio::signal::ctrl_c() => return Err(SandboxError::Interrupted.into()),
    };
    for (var, name) in &secrets {
        if let Err(e) = crate::secrets::attach(&info.id, name, Some(var)).await {
            let _ =
                sandbox::remove(std::slice::from_ref(&info.id), RemoveOptions { all: false, force: true })
                    .await;
            return Err(anyhow::anyhow!("{e}; the sandbox was removed"));
        }
    }
    // The host ports picked for --publish: stdout keeps only the id (scripts read it),
    // so they go to stderr, and into the JSON result as `ports`.
    let ports = if publishes { crate::sandbox::network::ports(&info.name).await?.ports } else { Vec::new() };
    if !ctx.out.json {
        eprintln!("sandbox `{}` is running; try: atoll -s {} exec -- uname -a", info.name, info.name);
        for p in &ports {
            match &p.browser_url {
                Some(b) => {
                    eprintln!("guest port {} is published at {} (in a browser: {b})", p.guest_port, p.url)
                }
                None => eprintln!("guest port {} is published at {}", p.guest_port, p.url),
            }
        }
    }
    let created = Created { info, ports };
    print(ctx, &created, &format!("{}\n", created.info.id))
}

/// `atoll create --image`: the image's template, fetched and built (or reused), said on
/// stderr; Ctrl-C drops the wait (the build stages aside, so nothing half-made stays).
async fn image_template(
    reference: &str,
    insecure: bool,
    registry_auth: Option<std::path::PathBuf>,
) -> Result<String> {
    use crate::template::image::{FetchOptions, RegistryAuth};
    let fetch =
        FetchOptions { insecure, auth: registry_auth.map_or(RegistryAuth::Lookup, RegistryAuth::File) };
    eprintln!("atoll: fetching image {}", crate::template::image::escape_controls(reference));
    let r = reference.to_owned();
    let work = tokio::task::spawn_blocking(move || {
        crate::template::from_image::ensure(&r, &fetch, &|f| {
            eprintln!("atoll: image {} is {}; preparing its template", f.reference, f.digest);
        })
    });
    let made = tokio::select! {
        r = work => r??,
        _ = tokio::signal::ctrl_c() => {
            crate::template::leftovers::remove_own();
            return Err(SandboxError::Interrupted.into());
        }
    };
    eprintln!(
        "atoll: template `{}` {} for {}",
        made.template,
        if made.built { "built" } else { "reused" },
        made.image
    );
    Ok(made.template)
}

/// What `atoll create --json` prints: the sandbox, and the ports `--publish` gave it.
#[derive(serde::Serialize)]
struct Created {
    #[serde(flatten)]
    info: sandbox::SandboxInfo,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ports: Vec<crate::sandbox::network::PublishedPort>,
}

pub(crate) async fn inspect(ctx: &Ctx, name: &str) -> Result<u8> {
    let i = sandbox::inspect(name, ctx.global.connect_timeout).await?;
    let s = &i.sandbox;
    let pid = |p: Option<u32>| p.map_or_else(|| "-".to_string(), |p| p.to_string());
    let mut t = String::new();
    let _ = writeln!(t, "id:        {}", s.id);
    let _ = writeln!(t, "name:      {}", s.name);
    let _ = writeln!(t, "state:     {}", s.state.as_str());
    let _ = writeln!(t, "template:  {}", s.template);
    let _ = writeln!(t, "resources: {} MiB, {} vCPU, {}", s.memory_mib, s.cpus, s.accel);
    let _ = writeln!(t, "age:       {} s", s.age_secs);
    let _ = writeln!(t, "started:   from {}", s.started_from);
    let _ = writeln!(t, "qemu pid:  {}", pid(s.qemu_pid));
    let _ = writeln!(t, "address:   {}", s.address);
    let _ = writeln!(t, "directory: {}", s.dir.display());
    if let Some(bytes) = s.disk_bytes {
        let _ = writeln!(t, "disk:      {} MiB", bytes >> 20);
    }
    for m in &s.mounts {
        let mode = if m.read_only { " (read-only)" } else { "" };
        let _ = writeln!(t, "mount:     {} -> {}{mode}", m.host.display(), m.guest);
    }
    let n = &i.network;
    let helper = match (n.helper.as_str(), n.helper_pid) {
        ("running", Some(pid)) => format!("helper pid {pid}"),
        ("dead", _) => format!(
            "helper DEAD: published ports and the network are gone; recreate it (`atoll kill {}`)",
            s.name
        ),
        _ => "no helper".to_string(),
    };
    let _ = writeln!(t, "network:   {} ({helper})", n.network.as_str());
    if !n.allow_out.is_empty() || !n.deny_out.is_empty() {
        let _ = writeln!(t, "allow_out: {}", n.allow_out.join(", "));
        let _ = writeln!(t, "deny_out:  {}", n.deny_out.join(", "));
    }
    for p in &n.ports {
        let _ = writeln!(t, "port:      {} -> {}", p.guest_port, p.browser_url.as_deref().unwrap_or(&p.url));
    }
    if let Some(e) = &n.audit_log_error {
        let _ = writeln!(t, "net log:   FAILING, egress refused until it can be written: {e}");
    } else if n.audit_log_failed_writes > 0 {
        let _ = writeln!(
            t,
            "net log:   {} lines could not be written earlier (writing again now)",
            n.audit_log_failed_writes
        );
    }
    match (&i.agent, &i.agent_error) {
        (Some(a), _) => {
            let _ = writeln!(
                t,
                "agent:     atoll-agent {} (pid 1: {}), up {} s",
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

/// Removes sandboxes (`atoll kill`); prints the ids removed.
pub(crate) async fn remove(ctx: &Ctx, names: &[String], all: bool, force: bool) -> Result<u8> {
    let removed = sandbox::remove(names, RemoveOptions { all, force }).await?;
    let text: String = removed.iter().map(|r| format!("{}\n", r.id)).collect();
    if all && !ctx.out.json {
        // Template snapshots are not sandboxes: say what stays and how to remove it.
        let (count, bytes) = crate::sandbox::template_snap::held();
        if count > 0 {
            eprintln!(
                "note: {count} template snapshot(s) stay ({}), kept so that `atoll create` restores \
                 instead of booting; `atoll template snapshot TEMPLATE --rm` removes a template's",
                crate::output::human_bytes(bytes)
            );
        }
    }
    print(ctx, &removed, &text)
}
