//! Parking: `atoll pause --to-disk` saves a sandbox into its own directory and ends its
//! QEMU and its network helper, so it holds no host memory; `atoll resume`, and any
//! command aimed at it, brings it back from there first (`unpark`).

use std::time::Duration;

use super::control::{live, stop_processes};
use super::network::config::NetAuthority;
use super::network::lifecycle::RestoredNet;
use super::{SandboxError, SandboxInfo, machine, snapshot};
use crate::vmm::snapfile;
use crate::vmm::state::{Record, StateLock};
use crate::vmm::{dirs, template};

/// How long a parked sandbox gets to come back.
const UNPARK_LIMIT: Duration = Duration::from_secs(120);

/// Saves sandbox `name_or_id` to disk and ends its processes. Parking a parked sandbox
/// does nothing. If the save fails, the sandbox runs on as before.
pub async fn park(name_or_id: &str) -> Result<SandboxInfo, SandboxError> {
    let state = dirs::state_dir()?;
    let _lock = StateLock::lock(&state).await?;
    let mut record = live(&state, name_or_id)?;
    if record.parked {
        return Ok(SandboxInfo::of(&record));
    }
    let tpl = template::load(&dirs::templates_dir()?, &record.template)?;
    let target = record.paths.parked();
    let _ = std::fs::remove_dir_all(&target);
    let name = record.name.clone();
    // The disk overlay stays where it is: nothing writes it while the VM is gone.
    snapshot::save_into(&mut record, &target, &name, &tpl, false, false, None).await?;
    // The network helper goes too (its published ports close until it comes back).
    stop_processes(&record, false).await;
    record.qemu = None;
    record.vhost = None;
    record.net_helper = None;
    record.secret_runner = None;
    record.ram_copy = 0;
    record.paused = false;
    record.parked = true;
    record.save()?;
    Ok(SandboxInfo::of(&record))
}

/// Brings parked `record` back from its directory; call under the state lock. On
/// failure it stays parked, with nothing left running.
pub(super) async fn unpark(record: &mut Record) -> Result<(), SandboxError> {
    // Judged as a start for its memory and vCPUs; on disk it takes nothing more (its
    // QEMU maps its parked memory, not a copy: `machine::bring_up`).
    let ask = super::quota::Ask { memory_mib: record.memory_mib, cpus: record.cpus, ..Default::default() };
    let admitted =
        super::quota::check(&dirs::state_dir()?, ask, Some(&record.id)).map_err(SandboxError::Quota)?;
    let snap = snapfile::open(&record.paths.parked())?;
    let tpl = snapshot::usable(&snap)?;
    // Its QEMU wrote the overlay's header until it was parked: a taken-over one could
    // have named another file there for the next QEMU to open. Checked while nothing of
    // it runs, so nothing changes it before that QEMU opens it.
    if let Some(overlay) = &record.paths.overlay {
        let base = snapshot::template_image(&record.name, &tpl)?;
        crate::vmm::qcow2::check_backing(overlay, base)
            .map_err(|source| SandboxError::AlteredParkedDisk { name: record.name.clone(), source })?;
    }
    // Its own policy and published ports (at the same host ports) come back with it.
    let mut net = RestoredNet::of(snap.meta.network.as_ref()).with_own_ports(&record.paths.dir);
    if let Ok(own) = NetAuthority::load(&record.paths.dir) {
        net.config.policy = own.policy;
    }
    let mut persist = |r: &Record| Ok(r.save()?);
    if let Err(e) = machine::bring_up(admitted, record, &mut persist, &snap, &tpl, &net, UNPARK_LIMIT).await {
        stop_processes(record, true).await;
        record.qemu = None;
        record.vhost = None;
        record.net_helper = None;
        record.secret_runner = None;
        // The next try publishes the same ports again (the helper that failed to come
        // up may have recorded some of them only).
        let ports = own_ports(&net);
        if let Err(e) = NetAuthority::update(&record.paths.dir, |a| a.ports = Some(ports)) {
            tracing::warn!("{e}");
        }
        record.save()?;
        return Err(e);
    }
    // Its QEMU keeps the parked memory's blocks once the parked files are gone.
    record.ram_copy = super::quota::ram_copy_bytes(&snap.ram());
    record.parked = false;
    record.save()?;
    let _ = std::fs::remove_dir_all(record.paths.parked());
    Ok(())
}

/// Brings sandbox `name_or_id` back if it is parked; returns its record either way.
pub(super) async fn unpark_if_parked(name_or_id: &str) -> Result<Record, SandboxError> {
    let state = dirs::state_dir()?;
    let _lock = StateLock::lock(&state).await?;
    let mut record = live(&state, name_or_id)?;
    if record.parked {
        unpark(&mut record).await?;
    }
    Ok(record)
}

/// The ports `net` publishes again, as atoll's own record keeps them.
fn own_ports(net: &RestoredNet) -> Vec<super::network::PublishedPort> {
    net.ports
        .iter()
        .map(|p| {
            let host = std::net::SocketAddr::new(p.bind, p.host_port.unwrap_or(0));
            super::network::PublishedPort::new(p.guest_port, host)
        })
        .collect()
}
