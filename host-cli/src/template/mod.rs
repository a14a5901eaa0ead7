//! Templates on disk: baking the agent into a user's root filesystem (`atoll template
//! build`), listing (`ls`) and removing (`rm`) them.
//!
//! A template is a self-contained directory `<data>/templates/<name>/` holding
//! `template.json` ([`crate::vmm::template::TemplateFile`]), a `vmlinux`, an initramfs and
//! usually a `rootfs.ext4`. The kernel and the shared initramfs of disk templates come
//! from `<data>/kernel/current/` (made by `rootfs/fetch-kernel.sh`); the agent binary from
//! [`agent_binary`].
//!
//! - [`bake`]: staging, copying or unpacking the user's tree, adding the agent (as PID 1
//!   or as a systemd unit), `mkfs.ext4 -d`, and the atomic move into place.
//! - [`image`]: `--image REF`, an OCI image fetched by skopeo into the content-addressed
//!   cache; [`layer`] applies its layers (whiteouts, opaque directories, no escapes).
//! - [`building`]: records of builds running in the background (MCP), shown by `ls`.
//! - [`from_image`]: the template of an image for `atoll create --image` and MCP
//!   `sandbox_create {image}`, one per manifest digest, built once and reused.
//! - [`probe`]: whether a template's image holds a program (which interpreters
//!   `sandbox_run_code` can find where), read from the image without booting it.
//! - Saving a sandbox's disk as a template is a sandbox use-case
//!   ([`crate::sandbox::save_template`]); it stages and installs through [`bake`].
//! - A template a sandbox uses ([`users`]) is neither removed nor replaced.

pub mod bake;
pub mod building;
pub mod dockerfile;
pub mod from_image;
pub mod image;
pub mod layer;
pub mod leftovers;
pub mod mcp_access;
pub mod owners;
pub mod probe;
pub mod start;
pub mod tools;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::vmm::dirs;
use crate::vmm::template::{TemplateFile, is_plain_name};

pub use crate::vmm::template::InitKind;
pub use bake::{BuildOptions, Source, build};

/// Why a template operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TemplateStoreError {
    /// Not a plain name.
    #[error("`{0}` is not a template name; use letters, digits, `-`, `_` and `.` (at most 64)")]
    BadName(String),
    /// The data directory is unknown.
    #[error(transparent)]
    Dirs(#[from] dirs::DirsError),
    /// `rm` of a template that is not there.
    #[error("template `{name}` does not exist{}", list_hint(available))]
    NotFound {
        /// The name asked for.
        name: String,
        /// Installed templates.
        available: Vec<String>,
    },
    /// Removing the directory failed.
    #[error("could not remove {}; check its permissions", path.display())]
    Remove {
        /// The template directory.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The template boots sandboxes that exist.
    #[error(
        "template `{name}` is in use by sandbox{} {}; remove {} first (`atoll kill {}`, MCP sandbox_kill)",
        if sandboxes.len() == 1 { "" } else { "es" },
        sandboxes.join(", "),
        if sandboxes.len() == 1 { "it" } else { "them" },
        sandboxes.join(" ")
    )]
    InUse {
        /// The template.
        name: String,
        /// The sandboxes made from it.
        sandboxes: Vec<String>,
    },
    /// The sandboxes could not be listed, so whether the template is in use is unknown.
    #[error("could not tell whether template `{name}` is in use: {why}")]
    UseUnknown {
        /// The template.
        name: String,
        /// Why the sandboxes could not be listed.
        why: String,
    },
    /// Listing the templates failed.
    #[error("could not list {}; check its permissions", path.display())]
    List {
        /// The templates directory.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

fn list_hint(available: &[String]) -> String {
    if available.is_empty() {
        "; no templates are installed (build `minimal` with rootfs/setup.sh)".into()
    } else {
        format!("; installed: {}", available.join(", "))
    }
}

/// One installed template, as `atoll template ls` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TemplateSummary {
    /// The name.
    pub name: String,
    /// Its directory.
    pub path: PathBuf,
    /// What runs as PID 1, or `None` when `template.json` is unreadable.
    pub init: Option<InitKind>,
    /// Whether it boots from an ext4 disk (else from its initramfs alone).
    pub disk: bool,
    /// The baked agent's version.
    pub agent_version: String,
    /// Bytes the template's files occupy on disk.
    pub disk_usage_bytes: u64,
    /// When it was built (Unix seconds).
    pub created_unix: u64,
    /// The sandbox it was saved from (`atoll template save`), if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_sandbox: Option<String>,
    /// Why `template.json` could not be read, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The MCP identity that saved it, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saved_by: Option<String>,
}

/// Checks that `name` can be a template directory name.
pub fn check_name(name: &str) -> Result<(), TemplateStoreError> {
    if is_plain_name(name) && !name.starts_with('.') {
        Ok(())
    } else {
        Err(TemplateStoreError::BadName(name.into()))
    }
}

/// Every installed template, sorted by name.
pub fn list() -> Result<Vec<TemplateSummary>, TemplateStoreError> {
    let root = dirs::templates_dir()?;
    let entries = match std::fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(TemplateStoreError::List { path: root, source }),
    };
    let mut out: Vec<TemplateSummary> = entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter(|e| e.path().join("template.json").is_file())
        .map(|e| summarize(&e.path()))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn summarize(dir: &Path) -> TemplateSummary {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let parsed = std::fs::read_to_string(dir.join("template.json"))
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str::<TemplateFile>(&t).map_err(|e| e.to_string()));
    let usage = disk_usage(dir);
    match parsed {
        Ok(f) => TemplateSummary {
            name,
            path: dir.to_owned(),
            init: Some(f.init),
            disk: f.rootfs.is_some(),
            agent_version: f.agent_version,
            disk_usage_bytes: usage,
            created_unix: f.created_unix,
            from_sandbox: f.from_sandbox,
            problem: None,
            saved_by: f.saved_by,
        },
        Err(e) => TemplateSummary {
            name,
            path: dir.to_owned(),
            init: None,
            disk: false,
            agent_version: String::new(),
            disk_usage_bytes: usage,
            created_unix: 0,
            from_sandbox: None,
            problem: Some(format!("template.json is unreadable ({e}); rebuild or remove it")),
            saved_by: None,
        },
    }
}

/// Allocated bytes of the files directly in `dir` (images are sparse, so not their length).
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.blocks() * 512)
        .sum()
}

/// The sandboxes (by name) booted from template `name` that are not dead: a running,
/// paused or parked sandbox's disk is a copy-on-write overlay on the template's image,
/// and its VM restarts from the template's kernel when it is brought back.
pub fn users(name: &str) -> Result<Vec<String>, TemplateStoreError> {
    let sandboxes = crate::sandbox::list()
        .map_err(|e| TemplateStoreError::UseUnknown { name: name.into(), why: e.to_string() })?;
    Ok(sandboxes
        .into_iter()
        .filter(|s| s.template == name && s.state != crate::sandbox::SandboxState::Dead)
        .map(|s| s.name)
        .collect())
}

/// Refuses with [`TemplateStoreError::InUse`] when a sandbox uses template `name`.
pub fn refuse_if_in_use(name: &str) -> Result<(), TemplateStoreError> {
    let sandboxes = users(name)?;
    if sandboxes.is_empty() {
        Ok(())
    } else {
        Err(TemplateStoreError::InUse { name: name.into(), sandboxes })
    }
}

/// Removes template `name` and everything in its directory; refused while a sandbox
/// uses it ([`users`]).
pub fn remove(name: &str) -> Result<PathBuf, TemplateStoreError> {
    check_name(name)?;
    let root = dirs::templates_dir()?;
    let dir = root.join(name);
    if !dir.join("template.json").is_file() {
        let available = list()?.into_iter().map(|t| t.name).collect();
        return Err(TemplateStoreError::NotFound { name: name.into(), available });
    }
    refuse_if_in_use(name)?;
    std::fs::remove_dir_all(&dir)
        .map_err(|source| TemplateStoreError::Remove { path: dir.clone(), source })?;
    Ok(dir)
}

/// Where the static agent to bake is: `$ATOLL_AGENT_BIN`, else the workspace's musl build
/// next to the running `atoll` (`target/x86_64-unknown-linux-musl/release/atoll-agent`), else
/// `<data>/bin/atoll-agent` (where `rootfs/setup.sh` puts it). The candidates looked at
/// are returned when none exists.
pub fn agent_binary() -> Result<PathBuf, Vec<PathBuf>> {
    if let Some(p) = std::env::var_os("ATOLL_AGENT_BIN").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(vec![p]) };
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        // target/<profile>/atoll -> target/x86_64-unknown-linux-musl/release/atoll-agent
        if let Some(target) = exe.parent().and_then(Path::parent) {
            candidates.push(target.join("x86_64-unknown-linux-musl/release/atoll-agent"));
        }
    }
    if let Ok(data) = dirs::data_dir() {
        candidates.push(data.join("bin/atoll-agent"));
    }
    candidates.iter().find(|p| p.is_file()).cloned().ok_or(candidates)
}
