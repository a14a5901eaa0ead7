//! `atoll template build`: a user's root filesystem (a directory or a tarball) plus the
//! agent, as a bootable template.
//!
//! The tree is copied (or unpacked) into a staging directory next to the templates, so
//! the user's files are never touched and a failed build leaves nothing behind. The
//! agent goes in as `/sbin/atoll-agent`; with `--init agent` the shared initramfs
//! switch_roots to it, with `--init systemd` it switch_roots to systemd, which starts the
//! `atoll-agent.service` unit written here. `mkfs.ext4 -d` turns the tree into the image:
//! no loop mounts. Symlinks in the tree are followed as the guest would follow them
//! (absolute targets stay inside the tree), so a link like `/sbin -> /usr/sbin` never
//! makes us write outside it.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use crate::vmm::dirs;
use crate::vmm::template::{InitKind, TemplateFile};

use super::{TemplateStoreError, agent_binary, check_name};

/// Where the user's root filesystem comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A directory holding the tree.
    Dir(PathBuf),
    /// A tar archive of the tree (plain, gzip, xz, bzip2 or zstd; `tar` detects which).
    Tarball(PathBuf),
    /// An OCI image in the cache ([`super::image::fetch`]): its layers are applied in
    /// order and its config becomes the template's command defaults.
    Image(Box<super::image::Fetched>),
}

impl Source {
    /// A directory, or a file with a tar-like name.
    pub fn detect(path: &Path) -> Result<Source, BakeError> {
        let meta = std::fs::metadata(path)
            .map_err(|source| BakeError::SourceUnreadable { path: path.into(), source })?;
        if meta.is_dir() {
            return Ok(Source::Dir(path.into()));
        }
        let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
        const TAR: [&str; 9] =
            [".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tar.zst", ".tzst"];
        if meta.is_file() && TAR.iter().any(|ext| name.ends_with(ext)) {
            Ok(Source::Tarball(path.into()))
        } else {
            Err(BakeError::NotATree(path.into()))
        }
    }
}

/// What to build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// The template's name.
    pub name: String,
    /// The user's root filesystem.
    pub source: Source,
    /// What runs as PID 1.
    pub init: InitKind,
    /// The image's size in bytes; `None`: the tree's size plus room to work.
    pub size: Option<u64>,
    /// Replace an existing template of the same name.
    pub force: bool,
}

/// A template that was built.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Built {
    /// Its directory.
    pub path: PathBuf,
    /// Its `template.json`.
    pub template: TemplateFile,
    /// The ext4 image's size (sparse).
    pub image_bytes: u64,
}

/// Why a template could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BakeError {
    /// Name or data-directory problem.
    #[error(transparent)]
    Store(#[from] TemplateStoreError),
    /// A layer of the image could not be applied.
    #[error(transparent)]
    Layer(#[from] super::layer::LayerError),
    /// The data directory is unknown.
    #[error(transparent)]
    Dirs(#[from] dirs::DirsError),
    /// Building from a directory or a tarball needs root.
    #[error(
        "`atoll template build --from` must run as root: the image must keep the tree's file owners \
         (run it with sudo); --image and --dockerfile builds need no root"
    )]
    NotRoot,
    /// A template of that name exists.
    #[error("template `{0}` already exists; pick another --name, or pass --force to replace it")]
    AlreadyExists(String),
    /// The snapshot quota is reached (the message says what to remove).
    #[error("{0}")]
    Quota(String),
    /// `--from` cannot be read.
    #[error("cannot read {}; check the --from path", path.display())]
    SourceUnreadable {
        /// The path given.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// `--from` is neither a directory nor a tarball.
    #[error(
        "{} is neither a directory nor a tar archive (.tar, .tar.gz, .tgz, .tar.xz, .tar.zst, .tar.bz2)",
        .0.display()
    )]
    NotATree(PathBuf),
    /// The kernel or the shared initramfs is missing.
    #[error("{} is missing; run rootfs/fetch-kernel.sh (or rootfs/setup.sh) first", .0.display())]
    KernelMissing(PathBuf),
    /// No agent binary was found.
    #[error(
        "no atoll-agent binary to bake (looked at {}); build it with `cargo build --release \
         --target x86_64-unknown-linux-musl -p atoll-agent -p atoll` or set ATOLL_AGENT_BIN",
        .0.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    AgentMissing(Vec<PathBuf>),
    /// The agent binary is dynamically linked.
    #[error("{} is not a static binary, so it cannot run in any image; build it for x86_64-unknown-linux-musl", .0.display())]
    AgentNotStatic(PathBuf),
    /// A host program is missing.
    #[error("`{tool}` is not installed; install the `{package}` package (rootfs/setup.sh does)")]
    ToolMissing {
        /// The program.
        tool: &'static str,
        /// The Debian package providing it.
        package: &'static str,
    },
    /// A host program failed.
    #[error("`{tool}` failed: {stderr}")]
    ToolFailed {
        /// The program.
        tool: &'static str,
        /// Its last stderr lines.
        stderr: String,
    },
    /// `mkfs.ext4 -d` failed, most often because the image is too small.
    #[error(
        "mkfs.ext4 could not make a {} image of the tree ({} used): {stderr}; if it ran out of \
         space, pass a larger --size",
        crate::output::human_bytes(*size),
        crate::output::human_bytes(*used)
    )]
    Mkfs {
        /// The image size asked for.
        size: u64,
        /// What the tree occupies.
        used: u64,
        /// mkfs.ext4's last stderr lines.
        stderr: String,
    },
    /// `--init systemd` on a tree without systemd.
    #[error(
        "--init systemd needs systemd in the image (no /usr/lib/systemd/systemd or /lib/systemd/systemd); use --init agent"
    )]
    NoSystemd,
    /// Symlinks in the tree loop.
    #[error("following /{0} inside the tree loops through more than 40 symlinks; fix the tree")]
    SymlinkLoop(String),
    /// Writing into the staging tree or the template directory failed.
    #[error("could not write {}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// The systemd unit that starts the agent in `--init systemd` templates.
const AGENT_UNIT: &str = "\
[Unit]
Description=atoll guest agent (gRPC over virtio-vsock)
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target

[Service]
ExecStart=/sbin/atoll-agent --announce vsock://2:1025
Restart=always
RestartSec=1

[Install]
WantedBy=multi-user.target
";

/// Builds template `opts.name`; see the module docs.
pub fn build(opts: &BuildOptions) -> Result<Built, BakeError> {
    check_name(&opts.name)?;
    let rootless = !rustix::process::geteuid().is_root();
    if rootless && !matches!(opts.source, Source::Image(_)) {
        return Err(BakeError::NotRoot);
    }
    let data = dirs::data_dir()?;
    let kernel_dir = data.join("kernel/current");
    let (vmlinux, initrd) = (kernel_dir.join("vmlinux"), kernel_dir.join("initrd.cpio"));
    for f in [&vmlinux, &initrd] {
        if !f.is_file() {
            return Err(BakeError::KernelMissing(f.clone()));
        }
    }
    let agent = agent_binary().map_err(BakeError::AgentMissing)?;
    if !is_static_elf(&agent) {
        return Err(BakeError::AgentNotStatic(agent));
    }
    require_tool("mkfs.ext4", "e2fsprogs")?;
    let templates = data.join("templates");
    let dest = templates.join(&opts.name);
    if dest.exists() && !opts.force {
        return Err(BakeError::AlreadyExists(opts.name.clone()));
    }

    // Refused at once when the snapshot quota is reached already.
    drop(crate::sandbox::quota::check_snapshot_locked(0).map_err(BakeError::Quota)?);
    let stage = Staging::new(templates.join(format!(".{}.build-{}", opts.name, std::process::id())))?;
    let root = stage.path.join("root");
    let mut owners = rootless.then(super::layer::Owners::new);
    fill_tree(&opts.source, &root, owners.as_mut())?;
    let init_path = bake_agent(&root, &agent, opts.init)?;

    let used = tree_usage(&root);
    let size = opts.size.unwrap_or_else(|| default_size(used));
    let image = stage.path.join("rootfs.ext4");
    let size_arg = format!("{}k", size.div_ceil(1024));
    let mut mkfs = Command::new("mkfs.ext4");
    mkfs.args(["-q", "-F", "-L", "atoll-root", "-d"]).arg(&root).arg(&image).arg(size_arg);
    run_tool("mkfs.ext4", &mut mkfs).map_err(|e| match e {
        BakeError::ToolFailed { stderr, .. } => BakeError::Mkfs { size, used, stderr },
        other => other,
    })?;
    if let Some(owners) = &owners {
        require_tool("debugfs", "e2fsprogs")?;
        super::owners::apply(&image, &root, owners)?;
    }
    std::fs::remove_dir_all(&root).map_err(|source| BakeError::Write { path: root.clone(), source })?;

    link_or_copy(&vmlinux, &stage.path.join("vmlinux"))?;
    link_or_copy(&initrd, &stage.path.join("initrd.cpio"))?;
    let template = TemplateFile {
        name: opts.name.clone(),
        kernel: "vmlinux".into(),
        initrd: Some("initrd.cpio".into()),
        rootfs: Some("rootfs.ext4".into()),
        cmdline: match opts.init {
            InitKind::Agent => "root=/dev/vda rootfstype=ext4 quiet".into(),
            InitKind::Systemd => format!("root=/dev/vda rootfstype=ext4 atoll.init={init_path} quiet"),
        },
        init: opts.init,
        agent_version: agent_version(&agent),
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        from_sandbox: None,
        from_template: None,
        display: None,
        defaults: match &opts.source {
            Source::Image(image) => Some(image.defaults.clone()),
            _ => None,
        },
        from_image: match &opts.source {
            Source::Image(image) => Some(format!("{}@{}", image.reference, image.digest)),
            _ => None,
        },
        saved_by: None,
    };
    let json = serde_json::to_string_pretty(&template).expect("a TemplateFile always serializes");
    write_file(&stage.path.join("template.json"), json.as_bytes(), 0o644)?;
    let image_bytes = size;
    // The staged template is counted now (it is beside the templates): committed under
    // the lock only within the snapshot quota.
    let _lock = crate::sandbox::quota::check_snapshot_locked(0).map_err(BakeError::Quota)?;
    stage.commit(&dest)?;
    Ok(Built { path: dest, template, image_bytes })
}

/// A staging directory next to the templates, removed on drop unless committed.
pub(crate) struct Staging {
    pub(crate) path: PathBuf,
    committed: bool,
}

impl Staging {
    pub(crate) fn new(path: PathBuf) -> Result<Staging, BakeError> {
        if let Some(parent) = path.parent() {
            super::leftovers::sweep(parent);
        }
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).map_err(|source| BakeError::Write { path: path.clone(), source })?;
        Ok(Staging { path, committed: false })
    }

    /// Moves the staging directory to `dest`, replacing what is there, unless a sandbox
    /// uses the template there (its disk is backed by that template's image).
    pub(crate) fn commit(mut self, dest: &Path) -> Result<(), BakeError> {
        let old = self.path.with_extension("old");
        let had_old = dest.exists();
        if had_old {
            let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            super::refuse_if_in_use(&name)?;
            std::fs::rename(dest, &old).map_err(|source| BakeError::Write { path: dest.into(), source })?;
        }
        std::fs::rename(&self.path, dest).map_err(|source| BakeError::Write { path: dest.into(), source })?;
        self.committed = true;
        if had_old {
            let _ = std::fs::remove_dir_all(&old);
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Copies or unpacks the user's tree into `root`, keeping owners, modes and links.
/// Rootless (`owners` given: only for images), owners and modes are recorded there.
fn fill_tree(
    source: &Source,
    root: &Path,
    mut owners: Option<&mut super::layer::Owners>,
) -> Result<(), BakeError> {
    std::fs::create_dir_all(root).map_err(|source| BakeError::Write { path: root.into(), source })?;
    match source {
        Source::Dir(dir) => {
            require_tool("cp", "coreutils")?;
            let mut from = dir.clone().into_os_string();
            from.push("/.");
            run_tool("cp", Command::new("cp").args(["-a", "--reflink=auto"]).arg(from).arg(root))
        }
        Source::Tarball(tar) => {
            require_tool("tar", "tar")?;
            run_tool(
                "tar",
                Command::new("tar").arg("-xf").arg(tar).arg("-C").arg(root).args([
                    "--numeric-owner",
                    "--same-owner",
                    "--same-permissions",
                ]),
            )
        }
        Source::Image(image) => {
            for layer in &image.layers {
                match owners.as_deref_mut() {
                    Some(owners) => super::layer::apply_rootless(root, layer, owners)?,
                    None => super::layer::apply(root, layer)?,
                }
            }
            // As docker does, the image's WorkingDir exists even when no layer made it.
            if let Some(cwd) = &image.defaults.cwd {
                let dir = resolve_in_root(root, cwd)?;
                std::fs::create_dir_all(&dir).map_err(|source| BakeError::Write { path: dir, source })?;
            }
            Ok(())
        }
    }
}

/// Puts the agent at `/sbin/atoll-agent` and, for systemd, its unit; returns the path
/// the initramfs execs (`/sbin/atoll-agent` or systemd's).
fn bake_agent(root: &Path, agent: &Path, init: InitKind) -> Result<String, BakeError> {
    for dir in ["sbin", "proc", "sys", "dev", "run", "tmp"] {
        let path = resolve_in_root(root, dir)?;
        if !path.exists() {
            std::fs::create_dir_all(&path)
                .map_err(|source| BakeError::Write { path: path.clone(), source })?;
        }
    }
    let target = resolve_in_root(root, "sbin/atoll-agent")?;
    let bytes = std::fs::read(agent).map_err(|source| BakeError::Write { path: agent.into(), source })?;
    let _ = std::fs::remove_file(&target);
    write_file(&target, &bytes, 0o755)?;
    match init {
        InitKind::Agent => Ok("/sbin/atoll-agent".into()),
        InitKind::Systemd => {
            let systemd = ["usr/lib/systemd/systemd", "lib/systemd/systemd"]
                .into_iter()
                .find(|p| resolve_in_root(root, p).is_ok_and(|h| h.is_file()))
                .ok_or(BakeError::NoSystemd)?;
            let unit = resolve_in_root(root, "etc/systemd/system/atoll-agent.service")?;
            write_file(&unit, AGENT_UNIT.as_bytes(), 0o644)?;
            let wants = resolve_in_root(root, "etc/systemd/system/multi-user.target.wants")?;
            std::fs::create_dir_all(&wants)
                .map_err(|source| BakeError::Write { path: wants.clone(), source })?;
            let link = wants.join("atoll-agent.service");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink("/etc/systemd/system/atoll-agent.service", &link)
                .map_err(|source| BakeError::Write { path: link, source })?;
            Ok(format!("/{systemd}"))
        }
    }
}

/// The host path of guest path `rel` in the tree at `root`, following symlinks the way
/// the guest will (absolute targets start again at `root`; `..` stops at `root`).
pub fn resolve_in_root(root: &Path, rel: &str) -> Result<PathBuf, BakeError> {
    let mut pending: VecDeque<OsString> = components(Path::new(rel));
    let mut cur = PathBuf::new();
    let mut hops = 0;
    while let Some(part) = pending.pop_front() {
        if part == ".." {
            cur.pop();
            continue;
        }
        let candidate = cur.join(&part);
        let host = root.join(&candidate);
        match std::fs::symlink_metadata(&host) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > 40 {
                    return Err(BakeError::SymlinkLoop(rel.into()));
                }
                let target =
                    std::fs::read_link(&host).map_err(|source| BakeError::Write { path: host, source })?;
                if target.is_absolute() {
                    cur = PathBuf::new();
                }
                for c in components(&target).into_iter().rev() {
                    pending.push_front(c);
                }
            }
            _ => cur = candidate,
        }
    }
    Ok(root.join(cur))
}

/// Normal and `..` components of `p`; root and `.` dropped.
fn components(p: &Path) -> VecDeque<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

/// Allocated bytes of the tree (files and directories), not following links.
fn tree_usage(root: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            total += meta.blocks() * 512 + 256;
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}

/// The tree plus half again and 512 MiB to work in, at least 1 GiB (the file is sparse).
fn default_size(used: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    (used + used / 2 + 512 * MIB).max(1024 * MIB).div_ceil(MIB) * MIB
}

/// True when `path` is an ELF file without a `PT_INTERP` program header.
fn is_static_elf(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else { return false };
    let u16_at = |o: usize| bytes.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |o: usize| bytes.get(o..o + 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    let u64_at = |o: usize| bytes.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    // 64-bit little-endian ELF only: the agent is built for x86_64.
    if bytes.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38)) else {
        return false;
    };
    const PT_INTERP: u32 = 3;
    let Ok(phoff) = usize::try_from(phoff) else { return false };
    (0..phnum).all(|i| u32_at(phoff + i * phentsize) != Some(PT_INTERP))
}

/// The agent's own idea of its version (`atoll-agent --version` prints `atoll-agent X.Y.Z`);
/// it is static, so it runs on the host too.
fn agent_version(agent: &Path) -> String {
    Command::new(agent)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

fn require_tool(tool: &'static str, package: &'static str) -> Result<(), BakeError> {
    let found = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .chain(["/sbin".into(), "/usr/sbin".into()])
                .any(|d| d.join(tool).is_file())
        })
        .unwrap_or(false);
    if found { Ok(()) } else { Err(BakeError::ToolMissing { tool, package }) }
}

/// Runs a host tool; a failure carries the last lines of its stderr.
fn run_tool(tool: &'static str, cmd: &mut Command) -> Result<(), BakeError> {
    let out = super::tools::output(cmd.stdin(std::process::Stdio::null()))
        .map_err(|e| BakeError::ToolFailed { tool, stderr: e.to_string() })?;
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(5)..].join("\n");
    Err(BakeError::ToolFailed { tool, stderr: if tail.is_empty() { out.status.to_string() } else { tail } })
}

pub(crate) fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), BakeError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |source| BakeError::Write { path: path.into(), source };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    std::fs::write(path, bytes).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(err)
}

pub(crate) fn link_or_copy(from: &Path, to: &Path) -> Result<(), BakeError> {
    if std::fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    std::fs::copy(from, to).map(drop).map_err(|source| BakeError::Write { path: to.into(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolving_follows_links_but_never_leaves_the_tree() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("usr/sbin")).unwrap();
        std::os::unix::fs::symlink("/usr/sbin", root.join("sbin")).unwrap();
        std::os::unix::fs::symlink("../../../../etc", root.join("usr/escape")).unwrap();
        std::os::unix::fs::symlink("loop2", root.join("loop1")).unwrap();
        std::os::unix::fs::symlink("loop1", root.join("loop2")).unwrap();
        assert_eq!(resolve_in_root(root, "sbin/atoll-agent").unwrap(), root.join("usr/sbin/atoll-agent"));
        assert_eq!(resolve_in_root(root, "/usr/escape/passwd").unwrap(), root.join("etc/passwd"));
        assert_eq!(resolve_in_root(root, "../../x").unwrap(), root.join("x"));
        assert!(matches!(resolve_in_root(root, "loop1/x"), Err(BakeError::SymlinkLoop(_))));
    }

    #[test]
    fn detects_sources_and_refuses_other_files() {
        let d = tempfile::tempdir().unwrap();
        assert!(matches!(Source::detect(d.path()), Ok(Source::Dir(_))));
        let tgz = d.path().join("root.tar.gz");
        std::fs::write(&tgz, b"x").unwrap();
        assert!(matches!(Source::detect(&tgz), Ok(Source::Tarball(_))));
        let other = d.path().join("root.img");
        std::fs::write(&other, b"x").unwrap();
        assert!(Source::detect(&other).unwrap_err().to_string().contains("neither a directory nor a tar"));
        assert!(matches!(Source::detect(&d.path().join("nope")), Err(BakeError::SourceUnreadable { .. })));
    }

    #[test]
    fn static_elf_check_reads_program_headers() {
        assert!(!is_static_elf(Path::new("/bin/sh")), "/bin/sh is dynamically linked on Debian");
        let d = tempfile::tempdir().unwrap();
        let junk = d.path().join("junk");
        std::fs::write(&junk, b"#!/bin/sh\n").unwrap();
        assert!(!is_static_elf(&junk));
    }

    #[test]
    fn default_size_leaves_room() {
        const MIB: u64 = 1 << 20;
        assert_eq!(default_size(0), 1024 * MIB);
        assert_eq!(default_size(1000 * MIB), 2012 * MIB);
    }
}
