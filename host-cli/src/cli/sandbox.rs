//! The arguments of the sandbox lifecycle: `atoll create`, `inspect`, `pause`, `resume`,
//! `kill`, flattened into the top level of the command line.

use std::time::Duration;

use clap::{Args, Subcommand};

use atoll_net::policy::Rule;

use crate::sandbox::DEFAULT_TEMPLATE;
use crate::sandbox::mounts::Mount;
use crate::sandbox::network::{NetworkMode, PortSpec};

/// The sandbox lifecycle subcommands, flattened into the top level.
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Boot a new sandbox (a microVM running atoll-agent) and print its id.
    ///
    /// A create restores its template's snapshot for its memory, vCPUs and network
    /// instead of booting when there is one (`atoll inspect` shows `started_from`): `atoll
    /// template snapshot` makes one ahead, else the first create of that shape boots and
    /// saves it once its agent answers. One that cannot be used is replaced, and -v says
    /// why; ATOLL_TEMPLATE_SNAPSHOT=off always boots.
    #[command(after_help = "Examples:\n  atoll create\n  atoll create --name dev --memory 1024 --cpus 2\n  \
                            atoll create --template debian --name web --publish 8000\n  \
                            atoll create --net none\n  \
                            mkdir -p src && atoll create --mount ./src:/work:rw   (the folder must exist)\n  \
                            atoll create --template debian --disk 8G\n  \
                            atoll create --deny-out 0.0.0.0/0,::/0 --allow-out pypi.org,files.pythonhosted.org\n  \
                            atoll create --from clean --name try1   (a fork of snapshot `clean`)\n  \
                            atoll -s dev exec -- uname -a")]
    Create(Box<CreateArgs>),
    /// Show a sandbox: state, template, resources, pids, age and its agent's Info.
    Inspect(SandboxArg),
    /// Freeze a sandbox (its whole VM stops); it keeps its memory and continues where it
    /// stopped. With --to-disk, park it: saved to disk, no host memory held.
    #[command(
        after_help = "Examples:\n  atoll pause dev\n  atoll pause --to-disk dev   (atoll ls shows it parked)\n  \
                            atoll -s dev exec -- uptime   (brings it back first)"
    )]
    Pause(PauseArgs),
    /// Resume a paused or parked sandbox and set its clock to the host's.
    Resume(SandboxArg),
    /// Stop sandboxes and delete everything they started and wrote (dead ones too).
    #[command(visible_alias = "destroy")]
    Kill(KillArgs),
    /// One reading of what sandboxes use, like `docker stats --no-stream`: CPU % over one
    /// second (the guest's own, from its /proc/stat, and its VM process's on the host;
    /// 100 = one CPU), guest memory used of its limit, guest disk used, network bytes
    /// received/sent, uptime.
    #[command(after_help = "Examples:\n  atoll stats\n  atoll stats dev web\n  atoll stats --json dev")]
    Stats(StatsArgs),
}

/// `atoll stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Sandboxes by name or id; default: all.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
}

/// `atoll create`.
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
    /// `default`: a NIC reaching the public internet by policy; `none`: no NIC at all.
    #[arg(long, default_value = "default", value_name = "NET")]
    pub net: NetworkMode,
    /// Publish a guest TCP port on the host's 127.0.0.1 (repeatable): GUESTPORT (on a
    /// free host port), or HOSTPORT:GUESTPORT as Docker writes it. The host ports are
    /// printed (and `atoll port ls` lists them).
    #[arg(long, short = 'p', value_name = "[HOSTPORT:]GUESTPORT")]
    pub publish: Vec<PortSpec>,
    /// Allow destinations (repeatable, or comma-separated): a domain (pypi.org), a pattern
    /// (*.example.com), an IP or CIDR, each optionally :PORT. Adds to the default (the
    /// public internet); private ranges open only to IP rules inside them.
    #[arg(long, value_name = "RULE", value_delimiter = ',')]
    pub allow_out: Vec<Rule>,
    /// Deny destinations (same forms). A strict allowlist is
    /// `--deny-out 0.0.0.0/0,::/0 --allow-out pypi.org`; the most specific rule wins.
    #[arg(long, value_name = "RULE", value_delimiter = ',')]
    pub deny_out: Vec<Rule>,
    /// Start from a snapshot instead of booting (a fork: same files and running
    /// processes, its own disk and network helper; guest memory it has not changed is
    /// shared with the snapshot's other forks); its template, memory, vCPUs, network
    /// and egress rules are the snapshot's. Ports are published only with --publish.
    #[arg(
        long,
        value_name = "SNAPSHOT",
        conflicts_with_all = ["template", "memory", "cpus", "mount", "disk", "display", "net", "allow_out", "deny_out"]
    )]
    pub from: Option<String>,
    /// Share a host folder (repeatable): HOSTDIR:GUESTDIR is read-only in the guest;
    /// add `:rw` to let the guest write it. Changes show on both sides at once; files the
    /// guest creates belong to you with plain modes (0644, dirs 0755: the guest's
    /// owners, modes, setuid bits and device nodes stay in extended attributes, never on
    /// your files); nothing outside HOSTDIR is reachable. Such a sandbox cannot be
    /// snapshotted.
    #[arg(long, value_name = "HOSTDIR:GUESTDIR[:rw]", value_parser = parse_mount)]
    pub mount: Vec<Mount>,
    /// The writable disk's size, e.g. 8G or 512M: the disk of a disk template (at least
    /// the template's own), the root tmpfs of `minimal` (which lives in guest memory: at
    /// most --memory less 192 MiB or a quarter of it, whichever is more).
    #[arg(long, value_name = "SIZE", value_parser = parse_disk)]
    pub disk: Option<u64>,
    /// Bind a stored secret (repeatable): the guest's VAR holds a placeholder, swapped
    /// for the value only on HTTPS requests to the secret's hosts (`atoll secret`).
    #[arg(long = "secret", value_name = "VAR=NAME", value_parser = crate::cli::parse_env)]
    pub secrets: Vec<(String, String)>,
    /// The screen of a template with one (`desktop`), e.g. 1280x800 (640x480 to
    /// 2560x1600); default: the template's. A size other than the template's boots
    /// (no template snapshot).
    #[arg(long, value_name = "WxH")]
    pub display: Option<crate::desktop::Size>,
    /// Boot an OCI/Docker image instead of a template: a registry reference
    /// (`python:3.12-slim`, `registry.example:5000/team/base:tag`, `NAME@sha256:...`),
    /// `oci:DIR[:TAG]` or `docker-archive:FILE`. Its template (`image-<digest>`) is built
    /// on first use and reused while the image's digest is the same.
    #[arg(long, value_name = "REF", conflicts_with_all = ["template", "from"])]
    pub image: Option<String>,
    /// Allow the --image registry over plain HTTP or with an unverified certificate.
    #[arg(long, requires = "image")]
    pub insecure_registry: bool,
    /// Registry credentials for --image in ~/.docker/config.json form; default: skopeo's
    /// lookup ($REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json,
    /// ~/.docker/config.json).
    #[arg(long, value_name = "FILE", env = "ATOLL_REGISTRY_AUTH", requires = "image")]
    pub registry_auth: Option<std::path::PathBuf>,
}

fn parse_mount(s: &str) -> Result<Mount, String> {
    crate::sandbox::mounts::parse_mount(s).map_err(|e| e.to_string())
}

fn parse_disk(s: &str) -> Result<u64, String> {
    crate::sandbox::mounts::parse_disk(s).map_err(|e| e.to_string())
}

/// `atoll pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The sandbox.
    #[command(flatten)]
    pub sandbox: SandboxArg,
    /// Save it to disk and end its VM (parked): no host memory held; any command aimed
    /// at it brings it back.
    #[arg(long)]
    pub to_disk: bool,
}

/// A subcommand taking one sandbox.
#[derive(Debug, Args)]
pub struct SandboxArg {
    /// Sandbox name, id, or unique id prefix; default: the global --sandbox.
    #[arg(value_name = "SANDBOX")]
    pub name: Option<String>,
}

/// `atoll kill`.
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
