//! The steps snapshots, forks and parking share: saving a sandbox's VM into a
//! snapshot, letting the saved VM run on, and bringing a VM up from a snapshot as a
//! machine of its own (clock, hostname, randomness: [`own`]).

use std::path::Path;
use std::time::{Duration, Instant};

use super::network::lifecycle::{self, RestoredNet};
use super::{SandboxError, agent_address, own};
use crate::client::{Client, ClientError};
use crate::vmm::launcher::{self, Accel, QEMU, VHOST_VSOCK, VmSpec};
use crate::vmm::process::{ProcRef, find_in_path, spawn_detached};
use crate::vmm::qmp::Qmp;
use crate::vmm::snapfile::{Snapshot, Staging};
use crate::vmm::state::Record;
use crate::vmm::template::Template;
use crate::vmm::{guest_ram, migrate};

/// How long writing the VM state may take.
const SAVE_LIMIT: Duration = Duration::from_secs(300);
/// How long one try to reach the agent may take.
const AGENT_TRY: Duration = Duration::from_secs(2);
/// How long one Info to a booting agent may take: the call waits in the agent link
/// until the guest agent opens its port.
const BOOT_TRY: Duration = Duration::from_secs(10);
/// The pause before connecting again to an agent that refused a connection.
const RETRY_PAUSE: Duration = Duration::from_millis(20);
/// How long vhost-device-vsock gets after SIGTERM.
const VHOST_GRACE: Duration = Duration::from_secs(2);

/// What [`save`] wrote, for the snapshot's description.
pub(super) struct SavedVm {
    /// QEMU's version.
    pub qemu_version: String,
    /// Guest RAM is in `ram.bin`, not in the stream.
    pub ram_file: bool,
    /// The stream was saved with `x-ignore-shared`.
    pub ignore_shared: bool,
}

/// Whether guest RAM is kept out of the stream; `SBX_SNAPSHOT_RAM=stream` keeps it in,
/// as a QEMU that cannot leave it out does (tests use it for that path).
fn ram_outside_stream() -> bool {
    std::env::var("SBX_SNAPSHOT_RAM").as_deref() != Ok("stream")
}

/// Saves the VM of `record` (running, not frozen) into `staging`: the vsock device is
/// unplugged, the guest stopped, its device state written, its RAM copied into
/// `ram.bin` (see [`guest_ram`]; the source's zero pages are handed back on the way),
/// and its disk overlay copied when `copy_disk`. QEMU is left stopped; [`run_on`] lets
/// it continue.
pub(super) async fn save(
    record: &Record,
    staging: &Staging,
    copy_disk: bool,
) -> Result<SavedVm, SandboxError> {
    let mut qmp = Qmp::connect(&record.paths.qmp_socket).await?;
    let qemu_version = qemu_version(&mut qmp).await?;
    migrate::unplug_vsock(&mut qmp).await?;
    let ignore_shared = ram_outside_stream();
    let guest_bytes = u64::from(record.memory_mib) << 20;
    let saved = migrate::save(&mut qmp, &staging.memory(), ignore_shared, guest_bytes, SAVE_LIMIT).await?;
    if !saved.ram_in_stream {
        let pid = record.qemu.map_or(0, |p| p.pid);
        let ram = staging.ram();
        let pages = off_thread(move || guest_ram::save(pid, &ram)).await?;
        tracing::debug!(
            "save: {} MiB of guest RAM copied, {} MiB of zero pages handed back",
            pages.data >> 20,
            pages.zero >> 20
        );
    } else if ignore_shared {
        tracing::info!(
            "QEMU {qemu_version} kept guest RAM in the migration stream (x-ignore-shared leaves out only RAM in a named file there): restores of this snapshot load it from the stream, which is slower"
        );
    }
    if let (true, Some(overlay)) = (copy_disk, &record.paths.overlay) {
        // QEMU flushed and released the disk when the save completed.
        copy_file(overlay, &staging.disk())?;
    }
    Ok(SavedVm { qemu_version, ram_file: !saved.ram_in_stream, ignore_shared })
}

/// Runs a blocking pass over guest RAM ([`guest_ram`]) off the async threads; a panic
/// in it goes on in the caller.
async fn off_thread<T: Send + 'static>(
    pass: impl FnOnce() -> Result<T, guest_ram::GuestRamError> + Send + 'static,
) -> Result<T, guest_ram::GuestRamError> {
    tokio::task::spawn_blocking(pass).await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// Lets a VM that was saved run on: a fresh vhost-device-vsock (the old one served the
/// unplugged device), the vsock device plugged in again, `cont`, the agent reached.
/// `persist` records each new process as it starts.
pub(super) async fn run_on(
    record: &mut Record,
    persist: &mut (dyn FnMut(&Record) -> Result<(), SandboxError> + Send),
    limit: Duration,
) -> Result<(), SandboxError> {
    let mut qmp = Qmp::connect(&record.paths.qmp_socket).await?;
    if migrate::vsock_plugged(&mut qmp).await? {
        // The save failed before the device went: only the CPUs may need to run.
        qmp.execute("cont").await?;
        return Ok(());
    }
    if let Some(old) = record.vhost.take() {
        old.terminate(VHOST_GRACE).await;
    }
    start_vhost(record, persist).await?;
    plug_and_reach(record, &mut qmp, limit, Hello::Info).await?;
    Ok(())
}

/// Brings a VM up from `snap` for `record`, whose directory (and disk overlay, copied
/// from the snapshot by the caller) is in place: vhost-device-vsock, QEMU waiting for
/// the state, guest RAM written from `ram.bin` (or, for a stream that holds it, the
/// zero pages its load allocated handed back), the load, the vsock device, the agent
/// link's port replugged as the guest starts ([`migrate::replug_agent_port`]), the agent,
/// and then the guest is made its own machine ([`own`]). Its network helper, which
/// QEMU's NIC connects to, starts first, as `net` says. `persist` records each process
/// as it starts, so that whoever undoes a failure finds them. Returns the agent's
/// version.
pub(super) async fn bring_up(
    record: &mut Record,
    persist: &mut (dyn FnMut(&Record) -> Result<(), SandboxError> + Send),
    snap: &Snapshot,
    template: &Template,
    net: &RestoredNet,
    limit: Duration,
) -> Result<String, SandboxError> {
    let started = Instant::now();
    let step =
        |what: &str| tracing::debug!("restore: {what} at {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
    let qemu = find_in_path(QEMU).map_err(launcher::LaunchError::from)?;
    start_vhost(record, persist).await?;
    step("vhost-device-vsock up");
    let mut helper = lifecycle::spawn_with(&record.paths.dir, &net.config)?;
    record.net_helper = helper.id().and_then(ProcRef::of);
    persist(record)?;
    lifecycle::wait_ready(&mut helper, &record.paths.dir).await?;
    lifecycle::publish_restored(&record.paths.dir, net).await?;
    step("network helper up");
    let accel = if snap.meta.accel == Accel::Kvm.as_str() { Accel::Kvm } else { Accel::Tcg };
    let spec = VmSpec {
        id: &record.id,
        name: &record.name,
        template,
        memory_mib: snap.meta.memory_mib,
        cpus: snap.meta.cpus,
        accel,
        paths: &record.paths,
        network: snap.meta.network.is_some(),
        storage: &record.storage,
    };
    let args = migrate::restore_args(&launcher::qemu_args(&spec));
    let _ = std::fs::remove_file(&record.paths.qmp_socket);
    let mut child =
        spawn_detached(&qemu, &args, &record.paths.qemu_log).map_err(launcher::LaunchError::from)?;
    record.qemu = child.id().and_then(ProcRef::of);
    persist(record)?;
    let mut qmp = connect_new(record, &mut child, limit).await?;
    step("QEMU answers");
    let pid = record.qemu.map_or(0, |p| p.pid);
    migrate::prepare_load(&mut qmp, snap.meta.ignore_shared).await?;
    if let Some(ram) = snap.ram() {
        // Before the load: loading virtio devices reads their rings in guest RAM.
        let bytes = off_thread(move || guest_ram::load(&ram, pid)).await?;
        step(&format!("{} MiB of guest RAM written", bytes >> 20));
    }
    match migrate::load(&mut qmp, &snap.memory(), limit).await {
        // QEMU ends on a stream it cannot read; its log says why.
        Err(migrate::MigrateError::Qmp(e)) => {
            let exited = tokio::time::timeout(Duration::from_secs(2), child.wait()).await.is_ok();
            let reason = if exited {
                format!("QEMU exited: {}", launcher::tail(&record.paths.qemu_log, 3))
            } else {
                e.to_string()
            };
            return Err(migrate::MigrateError::Failed { what: "load", reason }.into());
        }
        other => other?,
    }
    step("state loaded");
    if snap.ram().is_none() {
        // QEMU's load of RAM from the stream allocated every zero page.
        match off_thread(move || guest_ram::release(pid)).await {
            Ok(pages) => step(&format!("{} MiB of zero pages released", pages.zero >> 20)),
            Err(e) => tracing::warn!("{e}; the restored guest holds all its memory"),
        }
    }
    let name = record.name.clone();
    let reached = plug_and_reach(record, &mut qmp, limit, Hello::Restored(&name)).await?;
    step("agent answers");
    if !reached.made_own {
        own::by_hand(&reached.client, &name).await.map_err(|e| revive(record, e))?;
    }
    step("clock, hostname and randomness set");
    Ok(reached.version)
}

/// Starts vhost-device-vsock for `record` on its usual sockets (stale ones removed)
/// and waits for its socket.
async fn start_vhost(
    record: &mut Record,
    persist: &mut (dyn FnMut(&Record) -> Result<(), SandboxError> + Send),
) -> Result<(), SandboxError> {
    let program = find_in_path(VHOST_VSOCK).map_err(launcher::LaunchError::from)?;
    for stale in [&record.paths.vhost_socket, &record.paths.vsock] {
        let _ = std::fs::remove_file(stale);
    }
    let mut child = launcher::spawn_vhost(&program, record.cid, &record.paths)?;
    record.vhost = child.id().and_then(ProcRef::of);
    persist(record)?;
    launcher::wait_vhost_socket(&mut child, &record.paths).await?;
    Ok(())
}

/// The first call on a reached agent, which shows it answers.
#[derive(Clone, Copy)]
enum Hello<'a> {
    /// Info: the VM is the one that was saved, running on.
    Info,
    /// Restored: the VM was brought up from a snapshot and becomes the machine named so
    /// ([`own::greet`]).
    Restored(&'a str),
}

/// A reached agent.
struct Reached {
    client: Client,
    version: String,
    /// False when [`own::by_hand`] is still to be done (see [`own::Greeted`]).
    made_own: bool,
}

/// Plugs the vsock device into the stopped VM, lets the VM run (so the guest finds the
/// device the moment it runs), replugs the agent link's port of a restored VM (before
/// anything connects to it), waits for the guest driver, then for the agent over its
/// link.
///
/// The vsock device is still plugged in (a save unplugs it, and `hvsock://` reaches the
/// agent through it), but sbx no longer reaches the agent through it: the call of
/// [`Hello`] goes over the agent link (`agent.sock`, see [`super::agent_address`]).
async fn plug_and_reach(
    record: &Record,
    qmp: &mut Qmp,
    limit: Duration,
    hello: Hello<'_>,
) -> Result<Reached, SandboxError> {
    let deadline = Instant::now() + limit;
    let started = Instant::now();
    let step =
        |what: &str| tracing::debug!("reach: {what} at {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
    migrate::plug_vsock(qmp, &record.paths.vhost_socket).await?;
    step("vsock device plugged in");
    qmp.execute("cont").await?;
    step("guest running");
    if matches!(hello, Hello::Restored(_)) {
        migrate::replug_agent_port(qmp).await?;
        step("agent port replugged");
    }
    migrate::wait_vsock_driver(qmp, limit).await?;
    step("guest vsock driver up");
    let reached = reach_agent(record, deadline.saturating_duration_since(Instant::now()), hello).await?;
    step("agent answers");
    Ok(reached)
}

/// Calls the agent over its link until its first call ([`Hello`]) answers: right after
/// the VM runs, the link is still being made (the guest agent reopens its replugged
/// port). Gives up at once, without waiting out `limit`, when the agent answered with
/// an error (no retry would change it).
async fn reach_agent(record: &Record, limit: Duration, hello: Hello<'_>) -> Result<Reached, SandboxError> {
    let deadline = Instant::now() + limit;
    let addr = agent_address(record);
    loop {
        let tried = async {
            let client = Client::connect(&addr, AGENT_TRY).await?;
            let (version, made_own) = match hello {
                Hello::Info => (client.info().await?.agent_version, true),
                Hello::Restored(name) => {
                    let greeted = own::greet(&client, name).await?;
                    (greeted.version, greeted.made_own)
                }
            };
            Ok::<_, ClientError>(Reached { client, version, made_own })
        };
        match tokio::time::timeout(AGENT_TRY, tried).await {
            Ok(Ok(reached)) => return Ok(reached),
            Ok(Err(e)) if !e.is_unreachable() => return Err(revive(record, e)),
            Ok(Err(e)) if Instant::now() >= deadline => {
                let console = launcher::tail(&record.paths.console_log, 5);
                return Err(revive(record, format!("{e} (the guest console said: {console})")));
            }
            Err(_) if Instant::now() >= deadline => {
                return Err(revive(record, "the agent did not answer over its link"));
            }
            Ok(Err(e)) => {
                tracing::debug!("the agent did not answer yet: {e}");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(_) => {
                tracing::debug!("the agent did not answer within {} s", AGENT_TRY.as_secs());
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

/// The version of the agent at `addr` once it answers Info: a booting sandbox is ready
/// when this returns (its link's handshake done, a call answered). Retries until the
/// caller gives up on it.
pub(super) async fn wait_for_agent(addr: &sbx_proto::Address) -> String {
    loop {
        let tried = async { Client::connect(addr, AGENT_TRY).await?.info().await };
        match tokio::time::timeout(BOOT_TRY, tried).await {
            Ok(Ok(info)) => return info.agent_version,
            Ok(Err(e)) => tracing::debug!("the booting agent did not answer yet: {e}"),
            Err(_) => tracing::debug!("the booting agent did not answer within {} s", BOOT_TRY.as_secs()),
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

fn revive(record: &Record, e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Revive { name: record.name.clone(), reason: e.to_string() }
}

/// Connects to the QMP socket of a QEMU that just started.
async fn connect_new(
    record: &Record,
    child: &mut tokio::process::Child,
    limit: Duration,
) -> Result<Qmp, SandboxError> {
    let socket = &record.paths.qmp_socket;
    let deadline = Instant::now() + limit;
    loop {
        if socket.exists()
            && let Ok(qmp) = Qmp::connect(socket).await
        {
            return Ok(qmp);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(SandboxError::BootExited {
                status: status.to_string(),
                qemu_log: launcher::tail(&record.paths.qemu_log, 5),
                console: String::new(),
            });
        }
        if Instant::now() >= deadline {
            return Err(revive(record, "QEMU never opened its control socket"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// QEMU's version, `major.minor.micro`.
pub(super) async fn qemu_version(qmp: &mut Qmp) -> Result<String, SandboxError> {
    let v = qmp.execute("query-version").await?;
    let n = |k: &str| v.pointer(&format!("/qemu/{k}")).and_then(serde_json::Value::as_u64).unwrap_or(0);
    Ok(format!("{}.{}.{}", n("major"), n("minor"), n("micro")))
}

/// Copies `from` to `to` through a temporary file, so `to` is never seen half-written.
pub(super) fn copy_file(from: &Path, to: &Path) -> Result<(), SandboxError> {
    let tmp = to.with_extension("partial");
    let err = |source| SandboxError::Copy { from: from.to_path_buf(), to: to.to_path_buf(), source };
    std::fs::copy(from, &tmp).map_err(err)?;
    std::fs::rename(&tmp, to).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err(e)
    })
}
