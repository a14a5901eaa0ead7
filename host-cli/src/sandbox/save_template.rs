//! `atoll template save SANDBOX --name T` (MCP `sandbox_template_create`): a sandbox's
//! current disk as a new template that others are created from.
//!
//! Only disk templates can be saved: the sandbox's disk is a qcow2 overlay on the
//! template's raw ext4 image, and `qemu-img convert` flattens the two into the new
//! template's own raw image (sparse; the new template does not depend on the old one).
//! A sandbox booted from an initramfs template (`minimal`) has no disk: its files live
//! in guest RAM, and it is refused with the disk templates installed.
//!
//! Consistency: the guest's page cache is written out first (`sync` through the agent,
//! which also makes QEMU write its qcow2 metadata to the file, even with
//! `cache=unsafe`), then QEMU is frozen (SIGSTOP, as `atoll pause`) while the overlay is
//! read, and let go after. The copy has everything written before the save began;
//! a write racing the save itself may or may not be in it, as with a power cut. A
//! paused sandbox is let run for the `sync` and frozen again; a parked one's overlay
//! was flushed when it was parked and is read as it is.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::control::live;
use super::{SandboxError, agent_address};
use crate::client::{Client, ExecSpec};
use crate::template::bake::{self, BakeError, Staging};
use crate::template::{self as store, TemplateStoreError};
use crate::vmm::launcher::QEMU_IMG;
use crate::vmm::process::{ProcRef, find_in_path};
use crate::vmm::state::StateLock;
use crate::vmm::template::{self, TemplateFile};
use crate::vmm::{dirs, now_unix_ms};

/// How long the guest's `sync` may take.
const SYNC_TIMEOUT: Duration = Duration::from_secs(120);
/// How long QEMU's threads get to stop.
const FREEZE_GRACE: Duration = Duration::from_secs(5);

/// What to save.
#[derive(Debug, Clone)]
pub struct SaveOptions {
    /// The new template's name.
    pub name: String,
    /// Replace a template of that name (refused while a sandbox uses it).
    pub replace: bool,
    /// Which MCP identity saves it (`None`: the CLI). An MCP identity may replace only a
    /// template it saved itself, never a built-in or another's.
    pub by: Option<String>,
}

/// A template saved from a sandbox.
#[derive(Debug, Clone, Serialize)]
pub struct SavedTemplate {
    /// Its name.
    pub name: String,
    /// Its directory.
    pub path: PathBuf,
    /// The sandbox it was saved from.
    pub from_sandbox: String,
    /// The template that sandbox had booted from.
    pub from_template: String,
    /// Bytes its image occupies on disk (sparse).
    pub disk_usage_bytes: u64,
    /// Whether a template of that name was replaced.
    pub replaced: bool,
}

/// Why a sandbox could not be saved as a template.
#[derive(Debug, thiserror::Error)]
pub enum SaveTemplateError {
    /// The sandbox.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The template store (bad name, in use...).
    #[error(transparent)]
    Store(#[from] TemplateStoreError),
    /// Staging or installing the template.
    #[error(transparent)]
    Stage(#[from] BakeError),
    /// The sandbox boots from an initramfs: it has no disk to save.
    #[error(
        "sandbox `{sandbox}` runs template `{template}`, which boots from an initramfs: its files live in guest memory, with no disk to save. Only sandboxes of disk templates can be saved{}",
        if disk_templates.is_empty() { "; none is installed (rootfs/setup.sh --with-debian builds `debian`, `atoll template build` makes others)".to_owned() } else { format!(" (installed: {}); create one with `atoll create --template NAME` (MCP sandbox_create), set it up, and save that", disk_templates.join(", ")) }
    )]
    NoDisk {
        /// The sandbox.
        sandbox: String,
        /// Its template.
        template: String,
        /// Installed templates that boot from a disk.
        disk_templates: Vec<String>,
    },
    /// A template of that name exists and replacing was not asked for.
    #[error(
        "template `{0}` already exists; pick another name, or replace it (`atoll template save --replace`, MCP replace: true)"
    )]
    Exists(String),
    /// An MCP client asked to replace a template it did not save.
    #[error(
        "template `{0}` was not saved by this MCP client (it is built in, or saved by the CLI or another \
         client), so MCP may not replace it; save under a new name, or the operator replaces it with \
         `atoll template save SANDBOX {0} --replace`"
    )]
    NotYours(String),
    /// The guest's `sync` failed.
    #[error("could not flush sandbox `{sandbox}`'s disk before saving it ({why}); nothing was saved")]
    Sync {
        /// The sandbox.
        sandbox: String,
        /// Why.
        why: String,
    },
    /// QEMU would not stop.
    #[error("sandbox `{0}` could not be frozen to read its disk (its QEMU did not stop); nothing was saved")]
    Freeze(String),
    /// `qemu-img convert` failed.
    #[error("qemu-img could not copy the sandbox's disk: {0}; check free space in the data directory")]
    Convert(String),
}

/// Saves sandbox `name_or_id`'s disk as template `opts.name`; see the module docs.
pub async fn save_template(name_or_id: &str, opts: &SaveOptions) -> Result<SavedTemplate, SaveTemplateError> {
    store::check_name(&opts.name)?;
    if let Some(by) = &opts.by {
        refuse_foreign_replace(&opts.name, by)?;
    }
    let state = dirs::state_dir().map_err(SandboxError::from)?;
    let _lock = StateLock::lock(&state).await.map_err(SandboxError::from)?;
    let record = live(&state, name_or_id)?;
    let templates = dirs::templates_dir().map_err(SandboxError::from)?;
    let source_dir = templates.join(&record.template);
    let source = template::load(&templates, &record.template).map_err(SandboxError::from)?;
    let (Some(base), Some(overlay)) = (&source.rootfs, &record.paths.overlay) else {
        return Err(SaveTemplateError::NoDisk {
            sandbox: record.name,
            template: record.template,
            disk_templates: disk_templates(&templates),
        });
    };
    let dest = templates.join(&opts.name);
    let replaced = dest.join("template.json").is_file();
    if replaced && !opts.replace {
        return Err(SaveTemplateError::Exists(opts.name.clone()));
    }
    if replaced {
        store::refuse_if_in_use(&opts.name)?;
    }
    // The new image holds the template's and the sandbox's blocks: at most both.
    let need = allocated(base) + allocated(overlay);
    super::quota::check_snapshot(&state, need).map_err(SandboxError::Quota)?;
    let source_file: TemplateFile = std::fs::read_to_string(source_dir.join("template.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .ok_or_else(|| {
            SandboxError::from(template::TemplateError::MissingFile {
                name: record.template.clone(),
                path: source_dir.join("template.json"),
            })
        })?;

    let stage = Staging::new(templates.join(format!(".{}.save-{}", opts.name, std::process::id())))?;
    let image = stage.path.join("rootfs.ext4");
    // The overlay is in QEMU's `vm/`, and QEMU writes it: its header must still name
    // only the template's image as backing file, or `qemu-img` (run by atoll, perhaps
    // as root) would read whatever file a compromised QEMU named into the template.
    let checked = || crate::vmm::qcow2::check_backing(overlay, base).map_err(SandboxError::from);
    if record.parked {
        checked()?;
        convert(overlay, &image).await?;
    } else {
        let qemu = record.qemu.ok_or_else(|| SandboxError::Dead(record.name.clone()))?;
        let _thaw = Thaw { qemu, refreeze: record.paused };
        qemu.thaw();
        sync_guest(&record).await?;
        if !qemu.freeze(FREEZE_GRACE).await {
            return Err(SaveTemplateError::Freeze(record.name.clone()));
        }
        // Frozen: nothing changes the header between the check and the read.
        checked()?;
        convert(overlay, &image).await?;
    }
    for rel in [Some(&source_file.kernel), source_file.initrd.as_ref()].into_iter().flatten() {
        bake::link_or_copy(&source_dir.join(rel), &stage.path.join(rel))?;
    }
    let file = TemplateFile {
        name: opts.name.clone(),
        rootfs: Some("rootfs.ext4".into()),
        created_unix: u64::try_from(now_unix_ms() / 1000).unwrap_or(0),
        from_sandbox: Some(record.name.clone()),
        from_template: Some(record.template.clone()),
        saved_by: opts.by.clone(),
        ..source_file
    };
    let json = serde_json::to_string_pretty(&file).expect("a TemplateFile always serializes");
    bake::write_file(&stage.path.join("template.json"), json.as_bytes(), 0o644)?;
    let disk_usage_bytes = allocated(&image);
    stage.commit(&dest)?;
    Ok(SavedTemplate {
        name: opts.name.clone(),
        path: dest,
        from_sandbox: record.name,
        from_template: record.template,
        disk_usage_bytes,
        replaced,
    })
}

/// Refuses MCP identity `by` a template `name` that exists and that it did not save.
pub(crate) fn refuse_foreign_replace(name: &str, by: &str) -> Result<(), SaveTemplateError> {
    let templates = dirs::templates_dir().map_err(SandboxError::from)?;
    let file = templates.join(name).join("template.json");
    let Ok(text) = std::fs::read_to_string(&file) else { return Ok(()) };
    let saved_by = serde_json::from_str::<TemplateFile>(&text).ok().and_then(|t| t.saved_by);
    if saved_by.as_deref() == Some(by) { Ok(()) } else { Err(SaveTemplateError::NotYours(name.to_owned())) }
}

/// Lets QEMU run again when dropped (also when the save fails or is cancelled); a
/// sandbox that was paused is frozen again instead.
struct Thaw {
    qemu: ProcRef,
    refreeze: bool,
}

impl Drop for Thaw {
    fn drop(&mut self) {
        if self.refreeze {
            // SIGSTOP again; the kernel stops the threads within moments.
            self.qemu.signal(rustix::process::Signal::STOP);
        } else {
            self.qemu.thaw();
        }
    }
}

async fn sync_guest(record: &crate::vmm::state::Record) -> Result<(), SaveTemplateError> {
    let failed = |why: String| SaveTemplateError::Sync { sandbox: record.name.clone(), why };
    let client = Client::connect(&agent_address(record), Duration::from_secs(10))
        .await
        .map_err(|e| failed(e.to_string()))?;
    let mut spec = ExecSpec::argv(["sync"]);
    spec.timeout = Some(SYNC_TIMEOUT);
    let result = client.exec(&spec).await.map_err(|e| failed(e.to_string()))?;
    if result.status.success() {
        Ok(())
    } else {
        Err(failed(format!("`sync` ended with {:?}", result.status.code)))
    }
}

/// Flattens the qcow2 overlay (and its backing image) into a sparse raw image. `-U`:
/// QEMU holds the overlay's lock; it is frozen (or gone) meanwhile.
async fn convert(overlay: &Path, image: &Path) -> Result<(), SaveTemplateError> {
    let qemu_img = find_in_path(QEMU_IMG).map_err(|e| SaveTemplateError::Convert(e.to_string()))?;
    let out = tokio::process::Command::new(qemu_img)
        .args(["convert", "-U", "-f", "qcow2", "-O", "raw"])
        .arg(overlay)
        .arg(image)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| SaveTemplateError::Convert(e.to_string()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(SaveTemplateError::Convert(String::from_utf8_lossy(&out.stderr).trim().to_owned()))
    }
}

fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map_or(0, |m| m.blocks() * 512)
}

fn disk_templates(templates: &Path) -> Vec<String> {
    template::installed(templates)
        .into_iter()
        .filter(|n| template::load(templates, n).is_ok_and(|t| t.rootfs.is_some()))
        .collect()
}
