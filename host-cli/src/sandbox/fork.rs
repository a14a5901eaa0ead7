//! `atoll create --from SNAPSHOT`: a new sandbox that continues from a named snapshot,
//! with its own id, name, guest CID, copy of the disk, clock, hostname, randomness and
//! network helper. [`start`] is shared with a plain `atoll create` that restores its
//! template's snapshot (`template_snap`). Any failure, timeout or cancellation removes
//! everything it started, as a boot does.

use super::create::{Cleanup, CreateOptions};
use super::network::lifecycle::RestoredNet;
use super::{SandboxError, SandboxInfo, machine, snapshot};
use crate::vmm::dirs;
use crate::vmm::snapfile::Snapshot;
use crate::vmm::state::{self, Paths, Record, StateLock};
use crate::vmm::template::{self, Template};

/// Starts a sandbox from snapshot `snap_name`; `opts` gives its name, timeout and
/// ports to publish (the template, memory, vCPUs, network and egress policy are the
/// snapshot's).
pub(super) async fn create_from(snap_name: &str, opts: &CreateOptions) -> Result<SandboxInfo, SandboxError> {
    if opts.policy != atoll_net::policy::Policy::default() {
        return Err(SandboxError::BadResources(
            "a fork runs under its snapshot's network and egress rules; leave out --allow-out/--deny-out (allow_out/deny_out) and change them afterwards with `atoll net set` (MCP: sandbox_update)".into(),
        ));
    }
    let state_dir = dirs::ensure_state_dir()?;
    let (snap, tpl) = snapshot::open_named(&state_dir, snap_name)?;
    // Published ports are the host's, not the guest's: a fork gets only those asked for.
    let net = RestoredNet {
        ports: opts.publish.clone(),
        ports_required: true,
        ..RestoredNet::of(snap.meta.network.as_ref())
    };
    start(&snap, &tpl, opts, &net, format!("snapshot {snap_name}")).await
}

/// Starts a sandbox from `snap` (checked usable, with its template `tpl`), named and
/// timed by `opts`, with the network helper `net`; `started_from` is what `atoll inspect`
/// shows.
pub(super) async fn start(
    snap: &Snapshot,
    tpl: &Template,
    opts: &CreateOptions,
    net: &RestoredNet,
    started_from: String,
) -> Result<SandboxInfo, SandboxError> {
    if opts.timeout.is_zero() {
        return Err(SandboxError::BadResources("--timeout must be more than 0 s".into()));
    }
    if let Some(name) = opts.name.as_deref().filter(|n| !template::is_plain_name(n)) {
        return Err(state::StateError::BadName(name.to_string()).into());
    }
    // A disk that would make QEMU open another file is refused before anything is made.
    if let Some(disk) = snap.disk() {
        snapshot::check_snapshot_disk(snap, &disk, tpl)?;
    }
    let state_dir = dirs::ensure_state_dir()?;
    let lock = StateLock::lock(&state_dir).await?;
    let disk_bytes = snap.disk().and_then(|d| super::quota::usage::qcow2_virtual_size(&d)).unwrap_or(0);
    let ask = super::quota::Ask {
        memory_mib: snap.meta.memory_mib,
        cpus: snap.meta.cpus,
        disk_bytes,
        ram_copy_bytes: super::quota::ram_copy_bytes(&snap.ram()),
    };
    let admitted = super::quota::check(&state_dir, ask, None).map_err(SandboxError::Quota)?;
    let alloc = state::allocate(&state_dir, opts.name.as_deref())?;
    let paths = Paths::in_dir(&alloc.dir, snap.meta.disk);
    let machine = &snap.meta;
    let record = Record {
        disk_reserved: ask.disk_bytes,
        ram_copy: ask.ram_copy_bytes,
        started_from: Some(started_from),
        created_by: opts.created_by.clone(),
        ..Record::starting(
            alloc,
            machine.template.clone(),
            machine.memory_mib,
            machine.cpus,
            machine.accel.clone(),
            paths,
        )
    };
    // From here on, dropping `guard` undoes everything.
    let mut guard = Cleanup { record, armed: true };
    guard.save()?;
    drop(lock);
    if let (Some(disk), Some(overlay)) = (snap.disk(), &guard.record.paths.overlay) {
        snapshot::copy_snapshot_disk(snap, &disk, overlay, tpl)?;
    }
    let mut record = guard.record.clone();
    let version = {
        let mut persist = |r: &Record| {
            guard.record = r.clone();
            Ok(r.save()?)
        };
        machine::bring_up(admitted, &mut record, &mut persist, snap, tpl, net, opts.timeout).await?
    };
    guard.set(|r| {
        r.ready = true;
        r.agent_version = Some(version);
    });
    guard.save()?;
    Ok(SandboxInfo::of(&guard.disarm()))
}
