//! Sandbox lifecycle: `sandbox_create`, `sandbox_list`, `sandbox_pause`,
//! `sandbox_resume` and `sandbox_kill`, each one call into [`crate::sandbox`].

use std::time::Duration;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::service::RequestContext;
use rmcp::{Json, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::mcp::error::ToolError;
use crate::mcp::progress::run_with_progress;
use crate::mcp::server::AtollMcp;
use crate::mcp::shape::rfc3339_ms;
use crate::sandbox::mounts::{self, Mount, Storage};
use crate::sandbox::{self, CreateOptions, RemoveOptions, SandboxInfo};

/// Arguments of `sandbox_create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    /// A unique name for the sandbox. Default: a generated one.
    #[serde(default)]
    pub name: Option<String>,
    /// Template (base image) to boot. Default: the default template.
    #[serde(default)]
    pub template: Option<String>,
    /// Guest memory in MiB (128 to 262144). Default: 512.
    #[serde(default)]
    #[schemars(range(min = 128, max = 262_144))]
    pub memory_mib: Option<u32>,
    /// Guest vCPUs (1 to 64). Default: 1.
    #[serde(default)]
    #[schemars(range(min = 1, max = 64))]
    pub cpus: Option<u32>,
    /// Seconds to wait for the sandbox to boot (1 to 600). Default: 120.
    #[serde(default)]
    #[schemars(range(min = 1, max = 600))]
    pub boot_timeout_s: Option<u64>,
    /// "default": a network reaching the public internet by policy (private ranges,
    /// loopback, link-local and the host are denied); "none": no network at all.
    /// Default: "default".
    #[serde(default)]
    pub network: Option<crate::sandbox::network::NetworkMode>,
    /// Destinations to allow on top of the default: domains ("pypi.org"), patterns
    /// ("*.githubusercontent.com"), IPs or CIDRs, each optionally ":PORT".
    #[serde(default)]
    pub allow_out: Option<Vec<String>>,
    /// Destinations to deny (same forms). ["0.0.0.0/0", "::/0"] with allow_out makes a
    /// strict allowlist; the most specific matching rule wins.
    #[serde(default)]
    pub deny_out: Option<Vec<String>>,
    /// Start from this snapshot instead of booting (a fork: its files and running
    /// processes, its own disk and network); template, memory_mib, cpus, network and the
    /// egress rules then come from it.
    #[serde(default)]
    pub from_snapshot: Option<String>,
    /// Host folders to share into the sandbox. Only folders under `atoll mcp --allow-mount
    /// DIR` (and, over stdio, under the roots this client declares) can be mounted.
    /// Changes show on both sides at once. A sandbox with mounts cannot be snapshotted.
    #[serde(default)]
    pub mounts: Option<Vec<MountArg>>,
    /// Size of the sandbox's writable disk, e.g. "8G" or "512M" (K, M, G, T; 64M to
    /// 16T). Default: the template's. On `minimal` the disk lives in guest memory: at most
    /// memory_mib less 192 MiB or a quarter of it, whichever is more.
    #[serde(default)]
    pub disk: Option<String>,
    /// Stored secrets to bind, as {"ENV_VAR": "secret-name"}: the variable holds a
    /// placeholder, swapped for the value only in HTTPS request headers to the secret's
    /// hosts (secret_list shows the secrets this server may bind).
    #[serde(default)]
    pub secrets: Option<std::collections::BTreeMap<String, String>>,
    /// The screen of a desktop sandbox (template "desktop"), e.g. "1280x800" (640x480 to
    /// 2560x1600). Default: the template's (1280x800). Another size boots rather than
    /// restoring the template's snapshot.
    #[serde(default)]
    pub display: Option<String>,
    /// Boot an OCI/Docker image from a registry instead of a template (e.g.
    /// "python:3.12-slim", "ghcr.io/org/img:tag"; linux/amd64). Its template is built on
    /// first use (minutes; progress is reported) and reused while the image's digest is
    /// the same. Pulled anonymously (public images) unless the server was started with
    /// --registry-credentials. Not with template or from_snapshot.
    #[serde(default)]
    pub image: Option<String>,
}

/// One host folder shared into a sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MountArg {
    /// The host folder (absolute; it must exist).
    pub host_path: String,
    /// Where it appears in the sandbox (absolute, e.g. "/work").
    pub guest_path: String,
    /// Writes fail in the sandbox. Default: true (read-only); give false only when the
    /// sandbox must write the folder (it can then plant files host tools read).
    #[serde(default = "read_only_default")]
    pub read_only: bool,
}

/// Shared folders are read-only unless asked otherwise.
fn read_only_default() -> bool {
    true
}

/// Arguments of `sandbox_pause`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseArgs {
    /// The sandbox, by id or name (sandbox_list shows them).
    pub sandbox_id: String,
    /// Save it to disk and end its VM (parked): no host memory is held. Default: false.
    #[serde(default)]
    pub to_disk: bool,
}

/// Arguments of the tools that act on one named sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxRef {
    /// The sandbox, by id or name (sandbox_list shows them).
    pub sandbox_id: String,
}

/// Arguments of `sandbox_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSandboxesArgs {}

/// A sandbox as a model sees it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(inline)]
pub struct SandboxView {
    /// Short id; pass it (or the name) as sandbox_id.
    pub id: String,
    /// Unique name.
    pub name: String,
    /// "starting", "running", "paused", "parked" (saved to disk; guest tools bring it
    /// back), "stopped" (its VM stopped from outside; guest tools fail until it is
    /// resumed) or "dead".
    pub state: String,
    /// Template it booted from.
    pub template: String,
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// Guest vCPUs.
    pub cpus: u32,
    /// "kvm" (hardware) or "tcg" (software emulation, slower).
    pub accel: String,
    /// When it was created (RFC 3339, UTC).
    pub created_at: String,
    /// The agent's address, for `atoll --agent`.
    pub address: String,
    /// What its VM started from: "boot", "template snapshot" (its template's snapshot,
    /// restored instead of booting) or "snapshot NAME" (a fork of snapshot NAME).
    pub started_from: String,
    /// The agent version it announced at boot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// Host folders shared into it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<MountView>,
    /// Its writable disk in MiB, when set at create (else the template's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_mib: Option<u64>,
    /// Secrets bound to it: variable, secret name, placeholder (never a value).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<crate::secrets::Binding>,
}

/// A host folder as a model sees it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(inline)]
pub struct MountView {
    /// The host folder.
    pub host_path: String,
    /// Where it is in the sandbox.
    pub guest_path: String,
    /// Read-only in the sandbox.
    pub read_only: bool,
}

/// Result of `sandbox_list`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SandboxList {
    /// Every sandbox, oldest first.
    pub sandboxes: Vec<SandboxView>,
}

/// Result of `sandbox_resume`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ResumeOutput {
    /// The sandbox, now running.
    pub sandbox: SandboxView,
    /// How far the guest clock was moved to catch up with the host, in milliseconds.
    pub clock_adjusted_ms: i64,
}

/// Result of `sandbox_kill`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct KillOutput {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The state it was in.
    pub was: String,
}

impl From<SandboxInfo> for SandboxView {
    fn from(info: SandboxInfo) -> Self {
        SandboxView {
            id: info.id,
            name: info.name,
            state: info.state.as_str().to_owned(),
            template: info.template,
            memory_mib: info.memory_mib,
            cpus: info.cpus,
            accel: info.accel,
            created_at: rfc3339_ms(info.created_unix_ms),
            address: info.address,
            started_from: info.started_from,
            agent_version: info.agent_version,
            mounts: info
                .mounts
                .into_iter()
                .map(|m| MountView {
                    host_path: m.host.display().to_string(),
                    guest_path: m.guest,
                    read_only: m.read_only,
                })
                .collect(),
            disk_mib: info.disk_bytes.map(|b| b >> 20),
            secrets: info.secrets,
        }
    }
}

impl CreateArgs {
    fn options(self) -> Result<CreateOptions, ToolError> {
        let defaults = CreateOptions::default();
        let policy = atoll_net::policy::Policy::from_lists(
            self.allow_out.as_deref().unwrap_or_default(),
            self.deny_out.as_deref().unwrap_or_default(),
        )
        .map_err(ToolError::BadRule)?;
        Ok(CreateOptions {
            template: self.template.filter(|t| !t.is_empty()).unwrap_or(defaults.template),
            name: self.name.filter(|n| !n.is_empty()),
            memory_mib: self.memory_mib.unwrap_or(defaults.memory_mib),
            cpus: self.cpus.unwrap_or(defaults.cpus),
            timeout: self.boot_timeout_s.map_or(defaults.timeout, Duration::from_secs),
            network: self.network.unwrap_or_default(),
            policy,
            from_snapshot: self.from_snapshot.filter(|s| !s.is_empty()),
            ..defaults
        })
    }
}

impl AtollMcp {
    /// The folders and disk size asked for, checked: each folder exists, has a good guest
    /// path and lies under a root of the client or an `--allow-mount` folder.
    async fn storage(
        &self,
        mounts: Vec<MountArg>,
        disk: Option<String>,
        peer: &rmcp::service::Peer<RoleServer>,
    ) -> Result<Storage, ToolError> {
        let disk_bytes = disk.filter(|d| !d.is_empty()).map(|d| mounts::parse_disk(&d)).transpose()?;
        if mounts.is_empty() {
            return Ok(Storage { mounts: Vec::new(), disk_bytes, display: None });
        }
        let mut allowed = self.allowed_mounts().to_vec();
        if self.trusts_roots() {
            allowed.extend(crate::mcp::roots::client_roots(peer).await);
        }
        let mut out = Vec::new();
        for m in mounts {
            let host = mounts::canonical_dir(std::path::Path::new(&m.host_path))?;
            mounts::check_allowed(&host, &allowed, self.trusts_roots())?;
            out.push(Mount { host, guest: mounts::guest_path(&m.guest_path)?, read_only: m.read_only });
        }
        mounts::check(&out)?;
        Ok(Storage { mounts: out, disk_bytes, display: None })
    }
}

#[tool_router(router = sandboxes_router, vis = "pub(crate)")]
impl AtollMcp {
    /// Boots a new sandbox.
    #[tool(
        name = "sandbox_create",
        description = "Create and boot a new sandbox (a Linux microVM) and return its id once its \
            agent answers. Pass that id as sandbox_id to the other tools. Booting takes seconds \
            with KVM and up to a minute or two under software emulation; progress is sent \
            meanwhile. It reaches the public internet over TCP (and DNS) unless network is \
            \"none\"; allow_out and deny_out shape that (sandbox_update changes them later), \
            and every attempt is logged (sandbox_network_log). A template's first sandbox of a \
            given memory, cpus and network boots and saves a snapshot of it; later ones restore \
            that snapshot instead (faster; started_from in the result says which). image boots \
            a registry image: its template is built the first time (minutes, with progress) \
            and reused after. Remove it with sandbox_kill when done.",
        annotations(
            title = "Create a sandbox",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn sandbox_create(
        &self,
        Parameters(mut args): Parameters<CreateArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<SandboxView>, ToolError> {
        if let Some(crate::sandbox::Target::Sandbox(pinned)) = self.pinned() {
            return Err(ToolError::PinnedCreate { pinned: pinned.clone() });
        }
        if let Some(got) = args.boot_timeout_s.filter(|s| !(1..=600).contains(s)) {
            return Err(ToolError::TimeoutOutOfRange { field: "boot_timeout_s", got, max: 600 });
        }
        let mounts = args.mounts.take().unwrap_or_default();
        let disk = args.disk.take();
        // Every binding is checked before anything is made.
        let secrets = args.secrets.take().unwrap_or_default();
        for (env, secret) in &secrets {
            if !self.secret_grant().allows(secret) {
                return Err(ToolError::SecretNotAllowed(secret.clone()));
            }
            crate::secrets::check_binding(secret, env)?;
        }
        let display = args.display.take().filter(|d| !d.is_empty());
        let display = display
            .map(|d| d.parse::<crate::desktop::Size>())
            .transpose()
            .map_err(|e| ToolError::from(crate::desktop::DesktopError::BadRequest(e.to_string())))?;
        let image = args.image.take().filter(|i| !i.is_empty());
        if image.is_some() && (args.template.is_some() || args.from_snapshot.is_some()) {
            return Err(ToolError::BadBuild("give image, or template, or from_snapshot, not several".into()));
        }
        let mut opts = args.options()?;
        opts.created_by = Some(self.identity());
        self.check_private_egress(&opts.policy.allow_out)?;
        // A fork runs under its snapshot's egress rules, which must be ones this server may
        // grant now (a snapshot outlives the grant it was taken under).
        if let Some(snap) = &opts.from_snapshot {
            self.check_private_egress(&sandbox::snapshot::egress_allowed(snap)?)?;
        }
        opts.storage = self.storage(mounts, disk, &context.peer).await?;
        opts.storage.display = display;
        let mut info = match image {
            Some(image) => {
                let since = std::time::Instant::now();
                opts.template = self.image_template(&image, &context, since).await?;
                crate::mcp::progress::run_phase(
                    &context,
                    Some(opts.timeout),
                    "booting",
                    since,
                    sandbox::create(&opts),
                )
                .await??
            }
            None => {
                run_with_progress(&context, Some(opts.timeout), "booting", sandbox::create(&opts)).await??
            }
        };
        for (env, secret) in &secrets {
            if let Err(e) = self.attach_secret(&info.id, secret, Some(env)).await {
                let _ = sandbox::remove(
                    std::slice::from_ref(&info.id),
                    RemoveOptions { all: false, force: true },
                )
                .await;
                return Err(e);
            }
        }
        if !secrets.is_empty() {
            info = sandbox::get(&info.id)?;
        }
        Ok(Json(info.into()))
    }

    /// Lists the sandboxes.
    #[tool(
        name = "sandbox_list",
        description = "List the sandboxes on this machine, oldest first, with id, name, state \
            (running, paused, parked, starting, dead), template, CPUs and memory.",
        annotations(
            title = "List sandboxes",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_list(
        &self,
        Parameters(_args): Parameters<ListSandboxesArgs>,
    ) -> Result<Json<SandboxList>, ToolError> {
        let sandboxes = sandbox::list()?;
        let mine = sandboxes.into_iter().filter(|s| self.may_see(s));
        Ok(Json(SandboxList { sandboxes: mine.map(SandboxView::from).collect() }))
    }

    /// Pauses a sandbox.
    #[tool(
        name = "sandbox_pause",
        description = "Pause a sandbox: the whole VM is frozen; its memory, files and processes are kept. \
            With to_disk: true it is parked instead: saved to disk and its VM ended, so it holds \
            no host memory. Guest tools resume it automatically; so does sandbox_resume.",
        annotations(
            title = "Pause a sandbox",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_pause(
        &self,
        Parameters(args): Parameters<PauseArgs>,
    ) -> Result<Json<SandboxView>, ToolError> {
        let info = if args.to_disk {
            sandbox::park::park(&args.sandbox_id).await?
        } else {
            sandbox::pause(&args.sandbox_id).await?
        };
        Ok(Json(info.into()))
    }

    /// Resumes a sandbox.
    #[tool(
        name = "sandbox_resume",
        description = "Resume a paused sandbox and set its clock to the host's. Rarely needed: \
            guest tools resume a paused sandbox by themselves.",
        annotations(
            title = "Resume a sandbox",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_resume(
        &self,
        Parameters(args): Parameters<SandboxRef>,
    ) -> Result<Json<ResumeOutput>, ToolError> {
        let resumed = sandbox::resume(&args.sandbox_id).await?;
        Ok(Json(ResumeOutput {
            sandbox: resumed.sandbox.into(),
            clock_adjusted_ms: resumed.clock_adjusted_ms,
        }))
    }

    /// Destroys a sandbox.
    #[tool(
        name = "sandbox_kill",
        description = "Permanently delete a sandbox: its VM is stopped and its disk, files and \
            processes are gone. This cannot be undone.",
        annotations(
            title = "Delete a sandbox",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_kill(
        &self,
        Parameters(args): Parameters<SandboxRef>,
    ) -> Result<Json<KillOutput>, ToolError> {
        let removed =
            sandbox::remove(std::slice::from_ref(&args.sandbox_id), RemoveOptions::default()).await?;
        let Some(gone) = removed.into_iter().next() else {
            return Err(ToolError::NoSuchSandbox { name: args.sandbox_id });
        };
        Ok(Json(KillOutput { id: gone.id, name: gone.name, was: gone.was.as_str().to_owned() }))
    }
}
