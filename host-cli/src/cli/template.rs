//! The arguments of `atoll template build|snapshot|save|ls|rm`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

/// `atoll template ...`.
#[derive(Debug, Subcommand)]
pub enum TemplateCommand {
    /// Bake the agent into your own root filesystem and install it as a template.
    #[command(after_help = "Examples:\n  \
        sudo atoll template build --from ./rootfs --name mine\n  \
        docker export $(docker create ubuntu:24.04) > ubuntu.tar\n  \
        sudo atoll template build --from ubuntu.tar --name ubuntu\n  \
        sudo atoll template build --from debian-systemd.tar.gz --name deb --init systemd\n  \
        sudo atoll template build --image registry.example:5000/team/base:1 --name base\n  \
        sudo atoll template build --image docker-archive:saved.tar --name saved\n  \
        sudo atoll template build --dockerfile ./Dockerfile . --name app --build-arg V=2\n  \
        atoll create --template mine\n\n\
        At the end it makes the template's snapshot for the default machine shape (see\n\
        `atoll template snapshot`) unless --no-snapshot or ATOLL_TEMPLATE_SNAPSHOT=off. Under\n\
        sudo it does not (it would land in root's state directory, not yours): run\n\
        `atoll template snapshot NAME` as yourself afterwards.")]
    Build(BuildArgs),
    /// Make a template's snapshot, which plain `atoll create` restores instead of booting.
    ///
    /// It boots a sandbox of the machine shape, saves it, and removes it. One is kept per template and machine shape (--memory, --cpus, --net, and the
    /// accelerator) in $ATOLL_STATE_DIR/.template-snapshots/. An up-to-date one is kept; one
    /// that cannot be used (the template rebuilt, atoll or QEMU changed, saved by an older
    /// atoll, damaged) is replaced. Without it, the first `atoll create` of a shape boots and saves one.
    #[command(after_help = "Examples:\n  \
        atoll template snapshot minimal\n  \
        atoll template snapshot debian --memory 1024 --cpus 2\n  \
        atoll template snapshot debian --rm   (removes its snapshots, every shape; the template stays)\n  \
        atoll create --template debian --memory 1024 --cpus 2   (restores it; atoll inspect: started_from)")]
    Snapshot(TemplateSnapshotArgs),
    /// Save a sandbox's current disk as a new template (disk templates such as `debian`).
    #[command(after_help = "Examples:\n  \
        atoll create --template debian --name setup\n  \
        atoll -s setup exec --sh 'apt-get update && apt-get install -y git'\n  \
        atoll template save setup --name debian-git\n  \
        atoll create --template debian-git\n\n\
        The guest's files are flushed (sync) and the VM is frozen while its disk is copied,\n\
        then it runs on. Sandboxes of an initramfs template (`minimal`) have no disk and are\n\
        refused.")]
    Save(SaveArgs),
    /// List the installed templates.
    Ls,
    /// Remove templates and their snapshots (refused while a sandbox made from one exists).
    Rm(TemplateRmArgs),
}

/// `atoll image ...`: the cache of image layers `atoll template build --image` fills.
#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// List the images fetched and the cache's size.
    Ls,
    /// Empty the cache (templates keep working: their disk holds the files).
    Prune,
}

/// `atoll template save`.
#[derive(Debug, Args)]
pub struct SaveArgs {
    /// The sandbox, by name or id.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
    /// The new template's name (letters, digits, `-`, `_`, `.`).
    #[arg(long, short = 'n')]
    pub name: String,
    /// Replace a template of the same name (refused while a sandbox uses it).
    #[arg(long)]
    pub replace: bool,
}

/// What runs as PID 1 in the new template.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum InitArg {
    /// atoll-agent is PID 1 (fast; no services start).
    Agent,
    /// systemd is PID 1 and starts atoll-agent.service (the tree must have systemd).
    Systemd,
}

/// `atoll template build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The root filesystem: a directory, or a tarball (.tar, .tar.gz, .tar.xz, .tar.zst).
    #[arg(
        long,
        value_name = "DIR|TARBALL",
        required_unless_present_any = ["image", "dockerfile"],
        conflicts_with_all = ["image", "dockerfile"]
    )]
    pub from: Option<PathBuf>,
    /// An OCI/Docker image instead: a registry reference (`python:3.12-slim`,
    /// `registry.example:5000/team/base:tag`, `NAME@sha256:...`), `oci:DIR[:TAG]` (an OCI
    /// layout) or `docker-archive:FILE` (a `docker save` tarball); linux/amd64 is picked
    /// from a multi-platform index. Its Env, WorkingDir and User become the defaults of
    /// commands in the sandbox.
    #[arg(long, value_name = "REF", conflicts_with = "dockerfile")]
    pub image: Option<String>,
    /// A Dockerfile instead: FROM (an image reference as --image takes, or an installed
    /// disk template), RUN (in a build VM), COPY, ADD (local files; a local tar is
    /// unpacked), ENV, ARG, WORKDIR, USER, ENTRYPOINT, CMD, LABEL, EXPOSE.
    #[arg(long, value_name = "PATH")]
    pub dockerfile: Option<PathBuf>,
    /// The build context of --dockerfile (COPY/ADD sources); default: the Dockerfile's
    /// directory.
    #[arg(value_name = "CONTEXT", requires = "dockerfile")]
    pub context: Option<PathBuf>,
    /// `--build-arg NAME=VALUE` for an ARG of the Dockerfile (repeatable).
    #[arg(long, value_name = "NAME=VALUE", requires = "dockerfile", value_parser = parse_build_arg)]
    pub build_arg: Vec<(String, String)>,
    /// Use no cached Dockerfile step: run every step (their results are cached again).
    #[arg(long, requires = "dockerfile")]
    pub no_cache: bool,
    /// Memory of the Dockerfile build VM, in MiB.
    #[arg(long, value_name = "MiB", default_value_t = 1024, requires = "dockerfile")]
    pub build_memory: u32,
    /// Allow the --image registry over plain HTTP or with an unverified certificate.
    #[arg(long)]
    pub insecure_registry: bool,
    /// Registry credentials in ~/.docker/config.json form; default: skopeo's lookup
    /// ($REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json, ~/.docker/config.json).
    /// Under sudo, the invoking user's ~/.docker/config.json is used when it exists.
    #[arg(long, value_name = "FILE", env = "ATOLL_REGISTRY_AUTH")]
    pub registry_auth: Option<PathBuf>,
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
    /// Do not make the template's snapshot (the first `atoll create` of it then does).
    #[arg(long)]
    pub no_snapshot: bool,
    /// Start the image's ENTRYPOINT and CMD as a background job whenever the template
    /// boots; the template's snapshot then holds it running.
    #[arg(long)]
    pub start: bool,
    /// A shell command run every second at boot (after --start's job) until it exits 0;
    /// only then is the sandbox ready and the template's snapshot taken (at most 120 s).
    #[arg(long, value_name = "CMD")]
    pub ready_cmd: Option<String>,
}

/// `atoll template snapshot`.
#[derive(Debug, Args)]
pub struct TemplateSnapshotArgs {
    /// The template.
    #[arg(value_name = "TEMPLATE")]
    pub template: String,
    /// Guest memory in MiB of the machine shape (as `atoll create --memory`).
    #[arg(long, short = 'm', default_value_t = 512, value_name = "MiB")]
    pub memory: u32,
    /// Guest vCPUs of the machine shape (as `atoll create --cpus`).
    #[arg(long, default_value_t = 1)]
    pub cpus: u32,
    /// `default` (with a NIC) or `none` (as `atoll create --net`).
    #[arg(long, default_value = "default", value_name = "NET")]
    pub net: crate::sandbox::network::NetworkMode,
    /// How long to wait for the agent to come up, e.g. 120s, 5m.
    #[arg(long, default_value = "120s", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Remove the template's snapshots (every machine shape) instead of making one; the
    /// template stays, and the next `atoll create` of a shape boots and saves one again.
    #[arg(long, conflicts_with_all = ["memory", "cpus", "net", "timeout"])]
    pub rm: bool,
}

/// `atoll template rm`.
#[derive(Debug, Args)]
pub struct TemplateRmArgs {
    /// Template names.
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<String>,
}

/// `NAME=VALUE` of `--build-arg`.
fn parse_build_arg(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("`{s}` is not NAME=VALUE")),
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
