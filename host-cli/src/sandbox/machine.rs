//! The steps snapshots, forks and parking share: saving a sandbox's VM into a
//! snapshot, letting the saved VM run on, and bringing a VM up from a snapshot as a
//! machine of its own (clock, hostname, randomness: [`own`]).

use std::path::Path;
use std::time::{Duration, Instant};

use super::network::lifecycle::{self, RestoredNet};
use super::quota::Admission;
use super::{SandboxError, agent_address, own};
use crate::client::{Client, ClientError};
use crate::vmm::launcher::{self, Accel, GUEST_RAM, GuestRam, VmSpec};
use crate::vmm::migrate;
use crate::vmm::process::ProcRef;
use crate::vmm::qmp::Qmp;
use crate::vmm::snapfile::{Snapshot, Staging};
use crate::vmm::state::Record;
use crate::vmm::template::Template;

/// How long writing the VM state may take.
const SAVE_LIMIT: Duration = Duration::from_secs(300);
/// How long one try to reach the agent may take.
const AGENT_TRY: Duration = Duration::from_secs(2);
/// How long one Info to a booting agent may take: the call waits in the agent link
/// until the guest agent opens its port.
const BOOT_TRY: Duration = Duration::from_secs(10);
/// The pause before connecting again to an agent that refused a connection.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// What [`save`] wrote, for the snapshot's description.
pub(super) struct SavedVm {
    /// QEMU's version.
    pub qemu_version: String,
}

/// Saves the VM of `record` (running, not frozen) into `staging`: the guest stopped,
/// its whole state written by QEMU into a pipe and split, as it arrives, into the
/// device state (`memory.bin`) and guest RAM (`ram.bin`, see [`migrate::save_split`]), and
/// its disk overlay copied when `copy_disk`. QEMU is left stopped; [`run_on`] lets it
/// continue.
pub(super) async fn save(
    record: &Record,
    staging: &Staging,
    copy_disk: bool,
) -> Result<SavedVm, SandboxError> {
    let mut qmp = Qmp::connect(&record.paths.qmp_socket).await?;
    let qemu_version = qemu_version(&mut qmp).await?;
    let memory_ram = (staging.memory(), staging.ram());
    let split = migrate::save_split(&mut qmp, GUEST_RAM, memory_ram, SAVE_LIMIT).await?;
    tracing::debug!(
        "save: {} MiB of guest RAM in ram.bin, {} MiB of zero pages left as holes",
        split.data >> 20,
        split.zero >> 20
    );
    if let (true, Some(overlay)) = (copy_disk, &record.paths.overlay) {
        // QEMU flushed and released the disk when the save completed.
        copy_file(overlay, &staging.disk())?;
    }
    Ok(SavedVm { qemu_version })
}

/// Lets a VM that was saved run on: `cont`, and the agent reached over its link (the
/// port was not replugged: the link's session goes on).
pub(super) async fn run_on(record: &Record, limit: Duration) -> Result<(), SandboxError> {
    let mut qmp = Qmp::connect(&record.paths.qmp_socket).await?;
    run_and_reach(record, &mut qmp, limit, Hello::Info).await?;
    Ok(())
}

/// Brings a VM up from `snap` for `record`, whose directory (and disk overlay, copied
/// from the snapshot by the caller) is in place: QEMU with the snapshot's `ram.bin`
/// mapped privately as guest RAM, waiting for the state; the load; the agent link's
/// port replugged as the guest starts ([`migrate::replug_agent_port`]); the agent; and
/// then the guest is made its own machine ([`own`]). Its network helper, which QEMU's
/// NIC connects to and which serves the agent link, is started first, as `net` says;
/// QEMU starts beside it (the sockets it connects to are listening before either
/// starts: `jail::wire`), held while its guest RAM is copied (`jail::held`), and the
/// state is loaded only once the helper is ready and has published the ports, so no
/// guest runs before its network is there.
/// `persist` records each process as it starts, so that whoever undoes a failure finds
/// them (and ends both when either fails). Both start through the jail, which takes
/// the quotas' `admitted` for this start. Returns the agent's version.
pub(super) async fn bring_up(
    admitted: Admission,
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
    // QEMU 7.2 opens guest RAM's file read-write: it gets a private copy (holes stay
    // holes), so no restored QEMU can change the snapshot for later restores. A parked
    // sandbox's own memory (in its own directory, mapped by no other sandbox, removed
    // once it runs) is linked instead: what its QEMU could write there only its own
    // guest would find again, were the unpark to fail. While the copy is made, the
    // network helper is spawned and QEMU's jail is built, QEMU held before it runs
    // (`jail::held`); the copy is awaited before any failure is returned, so nothing is
    // left writing, and a held QEMU dropped on a failure is killed.
    let ram = record.paths.private_ram();
    // Its name goes however this ends: once QEMU answers, or on a failure before.
    let _unnamed = Unnamed(&ram);
    let (from, to) = (snap.ram(), ram.clone());
    let own = from.starts_with(&record.paths.dir);
    let copying =
        tokio::task::spawn_blocking(move || if own { link_file(&from, &to) } else { copy_file(&from, &to) });
    let spawned = spawn_both(admitted, record, persist, snap, template, net, &ram).await;
    let copied = copying.await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    let (mut helper, held) = spawned?;
    copied?;
    step("network helper spawned, QEMU held and guest RAM copied");
    let jailed = held.release()?;
    let mut child = jailed.child;
    let mut qemu_log = jailed.log;
    step("QEMU released");
    // Both are recorded: a helper that does not come up leaves QEMU to the caller too.
    lifecycle::wait_ready(&mut helper, &record.paths.dir).await?;
    lifecycle::publish_restored(&record.paths.dir, net).await?;
    step("network helper up");
    let mut qmp = connect_new(record, &mut child, &mut qemu_log, limit).await?;
    // QEMU has mapped guest RAM by the time it answers: the name can go (the space
    // is freed when QEMU ends).
    let _ = std::fs::remove_file(&ram);
    crate::jail::restrict_sockets(&record.paths);
    step("QEMU answers");
    match migrate::load(&mut qmp, &snap.memory(), limit).await {
        // QEMU ends on a stream it cannot read; its log says why.
        Err(migrate::MigrateError::Qmp(e)) => {
            let exited = tokio::time::timeout(Duration::from_secs(2), child.wait()).await.is_ok();
            let reason = if exited {
                format!("QEMU exited: {}", qemu_log.tail(&record.paths.qemu_log, 3).await)
            } else {
                e.to_string()
            };
            return Err(migrate::MigrateError::Failed { what: "load", reason }.into());
        }
        other => other?,
    }
    step("state loaded");
    let name = record.name.clone();
    let reached = run_and_reach(record, &mut qmp, limit, Hello::Restored(&name)).await?;
    step("agent answers");
    if !reached.made_own {
        own::by_hand(&reached.client, &name).await.map_err(|e| revive(record, e))?;
    }
    step("clock, hostname and randomness set");
    Ok(reached.version)
}

/// Starts the network helper of a restored `record` as `net` says, then QEMU held
/// before it runs ([`crate::jail::hold_qemu`], its guest RAM `ram` still being
/// copied), recording each (the helper with its secrets runner) with `persist` as it
/// starts; the caller releases QEMU, then waits until the helper is ready
/// ([`lifecycle::wait_ready`]) and publishes the ports.
async fn spawn_both(
    admitted: Admission,
    record: &mut Record,
    persist: &mut (dyn FnMut(&Record) -> Result<(), SandboxError> + Send),
    snap: &Snapshot,
    template: &Template,
    net: &RestoredNet,
    ram: &Path,
) -> Result<(crate::jail::JailedHelper, crate::jail::held::HeldQemu), SandboxError> {
    let helper = lifecycle::spawn_with(&admitted, &record.paths.dir, &net.config)?;
    record.net_helper = helper.id().and_then(ProcRef::of);
    record.secret_runner = helper.runner;
    persist(record)?;
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
        ram: GuestRam::Snapshot(ram),
    };
    let _ = std::fs::remove_file(&record.paths.qmp_socket);
    // The helper is recorded: a QEMU that does not start leaves it to the caller to end.
    let held = crate::jail::hold_qemu(admitted, &spec, true).await?;
    record.qemu = held.qemu();
    persist(record)?;
    Ok((helper, held))
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

/// Lets the stopped VM run, replugs the agent link's port of a restored VM (before
/// anything connects to it), then reaches the agent over its link.
async fn run_and_reach(
    record: &Record,
    qmp: &mut Qmp,
    limit: Duration,
    hello: Hello<'_>,
) -> Result<Reached, SandboxError> {
    let deadline = Instant::now() + limit;
    let started = Instant::now();
    let step =
        |what: &str| tracing::debug!("reach: {what} at {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
    qmp.execute("cont").await?;
    step("guest running");
    if matches!(hello, Hello::Restored(_)) {
        migrate::replug_agent_port(qmp).await?;
        step("agent port replugged");
    }
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
            // Bounded below by AGENT_TRY; the first call is the greeting itself.
            let client = Client::dial(&addr, AGENT_TRY).await?;
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
pub(super) async fn wait_for_agent(addr: &atoll_proto::Address) -> String {
    loop {
        let tried = async { Client::dial(addr, AGENT_TRY).await?.info().await };
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
    log: &mut crate::jail::QemuLog,
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
                qemu_log: log.tail(&record.paths.qemu_log, 5).await,
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

/// Removes a restore's named copy of guest RAM when dropped (a failure must not leave
/// it: its blocks would stay taken by a dead sandbox until `atoll kill`).
struct Unnamed<'a>(&'a Path);

impl Drop for Unnamed<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}

/// Gives `from` a second name `to` in the same sandbox directory, in place of whatever
/// `to` names (not followed if a link).
fn link_file(from: &Path, to: &Path) -> Result<(), SandboxError> {
    let failed = |source| SandboxError::Copy { from: from.to_path_buf(), to: to.to_path_buf(), source };
    match std::fs::remove_file(to) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(failed(e)),
        _ => {}
    }
    std::fs::hard_link(from, to).map_err(failed)
}

/// Copies `from` to `to` through an exclusive temporary file, so `to` is never seen
/// half-written and no link planted in QEMU's `vm/` directory is followed
/// ([`crate::vmm::safe_fs::copy`]).
pub(super) fn copy_file(from: &Path, to: &Path) -> Result<(), SandboxError> {
    crate::vmm::safe_fs::copy(from, to).map_err(|source| SandboxError::Copy {
        from: from.to_path_buf(),
        to: to.to_path_buf(),
        source,
    })
}
