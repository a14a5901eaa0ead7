//! Template snapshots: a plain `sbx create` restores a snapshot of its template, taken
//! right after a guest booted from it answered, instead of booting (a fraction of a
//! boot's time; the restored guest is made its own machine as a fork is).
//!
//! The first `sbx create` of a template that has none boots as usual, then saves one
//! (the new sandbox runs on). One is kept per machine shape: template, memory, vCPUs,
//! NIC or not, and accelerator (`<state>/.template-snapshots/<key>/`), since a restore
//! cannot change any of them. One that cannot be used (damaged, its template rebuilt,
//! `sbx` or QEMU changed, or its restore failed) is removed: that create boots, says
//! why with `-v`, and saves a new one. `SBX_TEMPLATE_SNAPSHOT=off` turns all of this
//! off (always boot, save nothing).

use std::path::{Path, PathBuf};

use super::create::CreateOptions;
use super::network::config::NetConfig;
use super::network::lifecycle::RestoredNet;
use super::{SandboxError, SandboxInfo, fork, snapshot};
use crate::vmm::snapfile::{self, Snapshot};
use crate::vmm::state::{self, StateLock};
use crate::vmm::template::{self, Template};
use crate::vmm::{dirs, launcher};

/// What `sbx inspect` shows as `started_from` for such a sandbox.
const STARTED_FROM: &str = "template snapshot";

/// The directory of template snapshots.
fn root(state: &Path) -> PathBuf {
    state.join(".template-snapshots")
}

/// Whether template snapshots are used (`SBX_TEMPLATE_SNAPSHOT=off` says no).
fn enabled() -> bool {
    !matches!(std::env::var("SBX_TEMPLATE_SNAPSHOT").as_deref(), Ok("off" | "0" | "no"))
}

/// The options a template snapshot is keyed on or applies itself (the rest of a create's
/// options must be at their defaults for one to be used).
const HANDLED: [&str; 8] =
    ["template", "memory_mib", "cpus", "network", "name", "timeout", "publish", "policy"];

/// The key of the machine `opts` asks for, or `None` when template snapshots are off or
/// `opts` asks for something a snapshot's machine may not have: any option other than
/// those in [`HANDLED`] (disks or mounts, say) set away from its default.
pub(super) fn key(opts: &CreateOptions) -> Option<String> {
    let given = serde_json::to_value(opts).ok()?;
    let default = serde_json::to_value(CreateOptions::default()).ok()?;
    let other = given
        .as_object()?
        .iter()
        .find(|(k, v)| !HANDLED.contains(&k.as_str()) && default.get(k.as_str()) != Some(*v));
    if let Some((option, _)) = other {
        tracing::info!("`{option}` is set: booting without a template snapshot");
        return None;
    }
    enabled().then(|| {
        format!(
            "{}-{}m-{}c-{}-{}",
            opts.template,
            opts.memory_mib,
            opts.cpus,
            opts.network.as_str(),
            launcher::probe_accel().as_str()
        )
    })
}

/// Starts the sandbox `opts` asks for from the template snapshot `key`: `Ok(Some)`
/// when it did; `Ok(None)` when there is none or it cannot be used (then it is removed,
/// and the caller boots and saves a new one); `Err` for a failure that a boot would
/// meet too (a name taken, a host port in use), which leaves the snapshot alone.
pub(super) async fn try_restore(
    key: &str,
    opts: &CreateOptions,
) -> Result<Option<SandboxInfo>, SandboxError> {
    let state = dirs::ensure_state_dir()?;
    let dir = root(&state).join(key);
    if !dir.is_dir() {
        tracing::info!(
            "template `{}` has no snapshot for this machine shape yet; booting, then saving one",
            opts.template
        );
        return Ok(None);
    }
    let (snap, tpl) = match open(&dir) {
        Ok(found) => found,
        Err(why) => {
            discard(&dir, &opts.template, &why);
            return Ok(None);
        }
    };
    let net = RestoredNet {
        config: NetConfig {
            network: opts.network,
            policy: opts.policy.clone(),
            ..RestoredNet::of(snap.meta.network.as_ref()).config
        },
        ports: opts.publish.clone(),
        ports_required: true,
    };
    match fork::start(&snap, &tpl, opts, &net, STARTED_FROM.into()).await {
        Ok(info) => Ok(Some(info)),
        Err(e) if boot_meets_it_too(&e) => Err(e),
        Err(e) => {
            discard(&dir, &opts.template, &format!("restoring it failed: {e}"));
            Ok(None)
        }
    }
}

/// The snapshot in `dir` and its template, when both can be used here.
fn open(dir: &Path) -> Result<(Snapshot, Template), String> {
    let snap = snapfile::open(dir).map_err(|e| e.to_string())?;
    let tpl = snapshot::usable(&snap).map_err(|e| e.to_string())?;
    if snap.meta.programs != snapfile::programs_fingerprint() {
        return Err("sbx or QEMU changed since it was saved".into());
    }
    Ok((snap, tpl))
}

fn discard(dir: &Path, template: &str, why: &str) {
    tracing::info!(
        "the snapshot of template `{template}` is not used ({why}); booting, then saving a new one"
    );
    if let Err(e) = std::fs::remove_dir_all(dir) {
        tracing::warn!("could not remove {}: {e}", dir.display());
    }
}

/// Errors about the request rather than the snapshot.
fn boot_meets_it_too(e: &SandboxError) -> bool {
    matches!(
        e,
        SandboxError::State(state::StateError::NameTaken(_) | state::StateError::BadName(_))
            | SandboxError::BadResources(_)
            | SandboxError::Publish { .. }
    )
}

/// Saves the sandbox `info`, just booted and answering, as the template snapshot
/// `key`; it runs on. A failure is only warned about: the sandbox is fine either way.
pub(super) async fn save_after_boot(key: &str, info: &SandboxInfo) {
    if let Err(e) = save(key, &info.id).await {
        tracing::warn!(
            "could not save a snapshot of template `{}` for the next sbx create: {e}",
            info.template
        );
    }
}

async fn save(key: &str, id: &str) -> Result<(), SandboxError> {
    let state = dirs::state_dir()?;
    let _lock = StateLock::acquire(&state)?;
    let mut record = state::find(&state, id)?;
    let tpl = template::load(&dirs::templates_dir()?, &record.template)?;
    let target = root(&state).join(key);
    if target.exists() {
        // Another create saved one meanwhile.
        return Ok(());
    }
    snapshot::save_into(&mut record, &target, key, &tpl, true, true).await?;
    tracing::info!("saved a snapshot of template `{}`: the next sbx create restores it", record.template);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_the_machine_shape_and_other_options_mean_none() {
        let opts = CreateOptions { memory_mib: 256, cpus: 2, ..CreateOptions::default() };
        let key = key(&opts).expect("a key");
        assert!(key.starts_with("minimal-256m-2c-default-"), "{key}");
        let named = CreateOptions { name: Some("x".into()), ..opts.clone() };
        assert_eq!(super::key(&named).as_deref(), Some(key.as_str()), "the name is not part of it");
        let fork = CreateOptions { from_snapshot: Some("s".into()), ..opts };
        assert_eq!(super::key(&fork), None, "an option it does not handle");
    }
}
