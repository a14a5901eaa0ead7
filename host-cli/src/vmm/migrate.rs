//! Saving a running VM to a file and starting one from it, over QMP.
//!
//! QEMU 7.2 cannot migrate a vhost-user-vsock device (its backend lacks the dirty-log
//! feature), so the device sits behind a PCIe root port (see [`super::launcher`]) and
//! is unplugged before a save and plugged in again, on a fresh vhost-device-vsock,
//! after a load or once the save is done. The guest agent's listening socket outlives
//! the device; connections open at the time are reset by the guest's vsock driver.
//!
//! The file is QEMU's own migration stream (`migrate` to `exec:cat > FILE`). A save
//! sets the `x-ignore-shared` capability, under which QEMU 7.2 leaves every shared RAM
//! block out of the stream (`ramblock_is_ignored`): guest RAM is a shared memfd
//! (vhost-user needs it shared), so the stream holds only device state and the small
//! firmware blocks, and sbx copies guest RAM itself ([`super::guest_ram`]), which costs
//! nothing per zero page where QEMU's own load allocated all of guest memory. QEMU >=
//! 8.2 ignores only RAM in a *named file*, not a memfd: [`Saved::ram_in_stream`] tells,
//! from the RAM total of `query-migrate`, and such a snapshot keeps RAM in its stream.
//! The load must set the capability as the save did (the stream's layout depends on
//! it). Kata's templating (RAM in a file mapped privately on restore) does not apply:
//! vhost-user needs the memory shared; rootfs/README.md has the measurements.
//!
//! Every restore also replugs the agent link's virtio-serial port as the VM starts to
//! run, before any host connects ([`replug_agent_port`]): the port is one
//! byte stream for the VM's life, and a fresh port clears whatever the saved one held in
//! both directions and gives the guest agent the event it reopens the port on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::launcher::{
    AGENT_PORT_CHARDEV, AGENT_PORT_DEVICE, AGENT_SERIAL_BUS, VSOCK_CHARDEV, VSOCK_DEVICE, VSOCK_PORT,
};
use super::qmp::{Qmp, QmpError};

/// How long the guest gets to release the vsock device.
const UNPLUG_WAIT: Duration = Duration::from_secs(10);
/// How often QEMU is asked whether the vsock device is gone after an unplug (a QMP
/// round trip costs well under a millisecond).
const POLL: Duration = Duration::from_millis(5);
/// How often the guest driver's progress with a plugged-in vsock device is polled (it
/// takes the guest 20 to 120 ms under TCG). Not shorter: a 5 ms poll saved nothing
/// measurable, and with it vhost-device-vsock lost its worker thread (a replug) in 5 of
/// 96 template-snapshot restores, against none of 113 at 20 ms; why a faster poll
/// of `x-query-virtio-status` meets it was not found. A replug costs far more than the
/// 10 ms a 20 ms poll adds on average.
const DRIVER_POLL: Duration = Duration::from_millis(20);
/// How long QEMU gets to remove the agent link's port after `device_del` (it takes
/// about a millisecond: no PCI hot-plug, the guest is not asked).
const PORT_UNPLUG_WAIT: Duration = Duration::from_secs(5);
/// How long to wait for a `MIGRATION` event before asking for the status anyway.
const EVENT_WAIT: Duration = Duration::from_millis(200);
/// The first bytes of a QEMU migration stream: "QEVM" and version 3.
pub const STREAM_MAGIC: [u8; 8] = [b'Q', b'E', b'V', b'M', 0, 0, 0, 3];

/// Why a save or a load failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// QMP failed.
    #[error(transparent)]
    Qmp(#[from] QmpError),
    /// The guest kept its vsock device.
    #[error(
        "the guest did not release its vsock device within {} s; is its kernel handling PCIe hot-plug?",
        UNPLUG_WAIT.as_secs()
    )]
    Unplug,
    /// QEMU kept the agent link's port after `device_del`.
    #[error(
        "QEMU did not remove the agent link's port within {} s of device_del; try again, and see the QEMU log in the sandbox directory if it repeats",
        PORT_UNPLUG_WAIT.as_secs()
    )]
    PortUnplug,
    /// QEMU reported the migration as failed.
    #[error("QEMU could not {what} the VM state: {reason}")]
    Failed {
        /// "save" or "load".
        what: &'static str,
        /// QEMU's words.
        reason: String,
    },
    /// It did not finish in time.
    #[error("QEMU did not {what} the VM state within {secs} s")]
    Timeout {
        /// "save" or "load".
        what: &'static str,
        /// The limit.
        secs: u64,
    },
    /// The guest driver did not take the vsock device.
    #[error("the guest did not set up its vsock device within {secs} s after it was plugged in")]
    Driver {
        /// The limit.
        secs: u64,
    },
    /// A path that cannot go on a shell command line.
    #[error("the path {} holds a quote or a newline; use a state directory without them", .0.display())]
    BadPath(PathBuf),
}

/// Unplugs the vsock device and waits until the guest has let go of it and QEMU has
/// removed it. The `DEVICE_DELETED` event alone is not enough: QEMU sends one for the
/// device's virtio backend too, and one left over from an earlier unplug on the same
/// connection would let a replug find the old chardev still in use.
pub async fn unplug_vsock(qmp: &mut Qmp) -> Result<(), MigrateError> {
    qmp.execute_with("device_del", json!({ "id": VSOCK_DEVICE })).await?;
    let deadline = tokio::time::Instant::now() + UNPLUG_WAIT;
    if !qmp.wait_event("DEVICE_DELETED", UNPLUG_WAIT).await? {
        return Err(MigrateError::Unplug);
    }
    while vsock_plugged(qmp).await? {
        if tokio::time::Instant::now() >= deadline {
            return Err(MigrateError::Unplug);
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// Plugs the vsock device in again, on the vhost-device-vsock listening at
/// `vhost_socket` (replacing the chardev of an earlier one).
pub async fn plug_vsock(qmp: &mut Qmp, vhost_socket: &Path) -> Result<(), MigrateError> {
    // A VM started for a restore has no chardev yet; one that was saved still has the
    // old backend's.
    let _ = qmp.execute_with("chardev-remove", json!({ "id": VSOCK_CHARDEV })).await;
    let addr = json!({ "type": "unix", "data": { "path": vhost_socket } });
    let backend = json!({ "type": "socket", "data": { "addr": addr, "server": false } });
    qmp.execute_with("chardev-add", json!({ "id": VSOCK_CHARDEV, "backend": backend })).await?;
    let device = json!({
        "driver": "vhost-user-vsock-pci", "id": VSOCK_DEVICE, "bus": VSOCK_PORT, "chardev": VSOCK_CHARDEV,
    });
    qmp.execute_with("device_add", device).await?;
    Ok(())
}

/// Whether the vsock device is plugged in.
pub async fn vsock_plugged(qmp: &mut Qmp) -> Result<bool, MigrateError> {
    plugged(qmp, VSOCK_DEVICE).await
}

/// Whether QEMU has a device with the id `id`.
async fn plugged(qmp: &mut Qmp, id: &str) -> Result<bool, MigrateError> {
    let children = qmp.execute_with("qom-list", json!({ "path": "/machine/peripheral" })).await?;
    Ok(children
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c.get("name").and_then(Value::as_str) == Some(id))))
}

/// Removes the agent link's port and adds it again, on the same chardev (`device_del`,
/// its `DEVICE_DELETED`, `device_add`: QEMU refuses the chardev as in use until the
/// device is gone). Call on a restored VM right after `cont`, before anything connects
/// to the port's socket: a host connection made before the replug would talk to the
/// saved port's session, which the guest no longer has.
///
/// Not while the restored VM is still stopped: QEMU 7.2's virtio-serial keeps pointers
/// to the ports it loaded for a timer that runs once the VM runs
/// (`virtio_serial_post_load_timer_cb`); a port deleted before then is used after it
/// was freed, and QEMU died at `cont`. That timer is due at once, so it has run by
/// the time the main loop answers the next command; hence the `query-status` first.
pub async fn replug_agent_port(qmp: &mut Qmp) -> Result<(), MigrateError> {
    qmp.execute("query-status").await?;
    qmp.execute_with("device_del", json!({ "id": AGENT_PORT_DEVICE })).await?;
    let deadline = tokio::time::Instant::now() + PORT_UNPLUG_WAIT;
    if !qmp.wait_event("DEVICE_DELETED", PORT_UNPLUG_WAIT).await? {
        return Err(MigrateError::PortUnplug);
    }
    while plugged(qmp, AGENT_PORT_DEVICE).await? {
        if tokio::time::Instant::now() >= deadline {
            return Err(MigrateError::PortUnplug);
        }
        tokio::time::sleep(POLL).await;
    }
    qmp.execute_with("device_add", agent_port_device()).await?;
    Ok(())
}

/// The `device_add` arguments of the agent link's port, as on the boot command line
/// ([`super::launcher::agent_port_device`]).
fn agent_port_device() -> Value {
    json!({
        "driver": "virtserialport",
        "bus": format!("{AGENT_SERIAL_BUS}.0"),
        "chardev": AGENT_PORT_CHARDEV,
        "name": sbx_proto::link::PORT_NAME,
        "id": AGENT_PORT_DEVICE,
    })
}

/// Waits until the guest driver has set the vsock device up (`DRIVER_OK`) and QEMU has
/// started its vhost-user backend, so that a host connection does not arrive while
/// the virtqueues are still being made (vhost-device-vsock 0.3.0 can lose its worker
/// thread then; see [`super::ready`]).
pub async fn wait_vsock_driver(qmp: &mut Qmp, limit: Duration) -> Result<(), MigrateError> {
    let path = format!("/machine/peripheral/{VSOCK_DEVICE}/virtio-backend");
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match qmp.execute_with("x-query-virtio-status", json!({ "path": path })).await {
            Ok(status) if driver_ok(&status) => return Ok(()),
            // Not there yet (the device is still being realized) or not set up yet.
            Ok(_) | Err(QmpError::Refused { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(MigrateError::Driver { secs: limit.as_secs() });
        }
        tokio::time::sleep(DRIVER_POLL).await;
    }
}

/// True when `x-query-virtio-status` says the driver is up and vhost started.
fn driver_ok(status: &Value) -> bool {
    let started = status.get("vhost-started").and_then(Value::as_bool).unwrap_or(false);
    let ok = status
        .pointer("/status/statuses")
        .and_then(Value::as_array)
        .is_some_and(|s| s.iter().filter_map(Value::as_str).any(|s| s.contains("DRIVER_OK")));
    started && ok
}

/// What a save wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Saved {
    /// Whether the stream holds guest RAM: the save did not ask to leave it out, or
    /// this QEMU did not (the RAM it sent is at least the guest's memory).
    pub ram_in_stream: bool,
}

/// Stops the guest and writes its state to `file` (created or truncated), guest RAM
/// left out when `ignore_shared` and QEMU agrees (see [`Saved`]). The vsock device
/// must be unplugged. The VM is left stopped, its disks flushed and released: `cont`
/// lets it run on.
pub async fn save(
    qmp: &mut Qmp,
    file: &Path,
    ignore_shared: bool,
    guest_bytes: u64,
    limit: Duration,
) -> Result<Saved, MigrateError> {
    let quoted = shell_quote(file)?;
    qmp.execute("stop").await?;
    set_capabilities(qmp, ignore_shared).await?;
    // The default is 128 MiB/s; a local file takes what the disk gives.
    qmp.execute_with("migrate-set-parameters", json!({ "max-bandwidth": 64_i64 << 30 })).await?;
    qmp.execute_with("migrate", json!({ "uri": format!("exec:cat > {quoted}") })).await?;
    let info = wait_migration(qmp, "save", limit).await?;
    let sent = info.pointer("/ram/total").and_then(Value::as_u64).unwrap_or(u64::MAX);
    Ok(Saved { ram_in_stream: !ignore_shared || sent >= guest_bytes })
}

/// Makes a QEMU started with `-incoming defer` (see [`restore_args`]) ready for a
/// stream saved with `ignore_shared` as given: call before [`load`], and before
/// filling guest RAM when the stream leaves it out.
pub async fn prepare_load(qmp: &mut Qmp, ignore_shared: bool) -> Result<(), MigrateError> {
    set_capabilities(qmp, ignore_shared).await
}

/// Loads `file` into a QEMU made ready by [`prepare_load`]; the guest stays stopped
/// until `cont`.
pub async fn load(qmp: &mut Qmp, file: &Path, limit: Duration) -> Result<(), MigrateError> {
    let quoted = shell_quote(file)?;
    qmp.execute_with("migrate-incoming", json!({ "uri": format!("exec:cat {quoted}") })).await?;
    wait_migration(qmp, "load", limit).await.map(drop)
}

/// `events`: QEMU announces each change of the migration's status, so the wait ends
/// when it does instead of at the next poll.
async fn set_capabilities(qmp: &mut Qmp, ignore_shared: bool) -> Result<(), MigrateError> {
    let caps = json!([
        { "capability": "events", "state": true },
        { "capability": "x-ignore-shared", "state": ignore_shared },
    ]);
    qmp.execute_with("migrate-set-capabilities", json!({ "capabilities": caps })).await?;
    Ok(())
}

/// Waits until the migration completed; returns `query-migrate`'s answer then.
async fn wait_migration(qmp: &mut Qmp, what: &'static str, limit: Duration) -> Result<Value, MigrateError> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let info = qmp.execute("query-migrate").await?;
        match info.get("status").and_then(Value::as_str) {
            Some("completed") => return Ok(info),
            Some("failed" | "cancelled") => {
                let reason =
                    info.get("error-desc").and_then(Value::as_str).unwrap_or("no reason given").to_string();
                return Err(MigrateError::Failed { what, reason });
            }
            _ => {}
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            let _ = qmp.execute("migrate_cancel").await;
            return Err(MigrateError::Timeout { what, secs: limit.as_secs() });
        }
        qmp.wait_event("MIGRATION", left.min(EVENT_WAIT)).await?;
    }
}

/// The command line of a VM that will load a saved state: the boot command line
/// without the vsock device (plugged in after the load), with `-incoming defer`, and
/// stopped (`-S`) until `cont`.
pub fn restore_args(boot_args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(boot_args.len() + 2);
    let mut i = 0;
    while i < boot_args.len() {
        let pair = boot_args.get(i + 1).map(String::as_str).unwrap_or_default();
        let is_vsock = (boot_args[i] == "-chardev" && pair.contains(&format!("id={VSOCK_CHARDEV},")))
            || (boot_args[i] == "-device" && pair.starts_with("vhost-user-vsock-pci,"));
        if is_vsock {
            i += 2;
            continue;
        }
        out.push(boot_args[i].clone());
        i += 1;
    }
    out.extend(["-S".into(), "-incoming".into(), "defer".into()]);
    out
}

/// True when `file` starts like a QEMU migration stream.
pub fn looks_like_stream(file: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 8];
    std::fs::File::open(file).and_then(|mut f| f.read_exact(&mut head)).is_ok() && head == STREAM_MAGIC
}

fn shell_quote(path: &Path) -> Result<String, MigrateError> {
    let s = path
        .to_str()
        .filter(|s| !s.contains(['\'', '\n']))
        .ok_or_else(|| MigrateError::BadPath(path.into()))?;
    Ok(format!("'{s}'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_args_drop_the_vsock_device_and_wait_for_the_state() {
        let boot: Vec<String> = [
            "-m",
            "512M",
            "-chardev",
            "socket,id=vsock0,path=/s/vhost.sock",
            "-device",
            "vhost-user-vsock-pci,chardev=vsock0,bus=rp1,id=vs0",
            "-device",
            "pcie-root-port,id=rp1,bus=pcie.0,chassis=1",
        ]
        .map(String::from)
        .into();
        let args = restore_args(&boot);
        assert_eq!(
            args,
            [
                "-m",
                "512M",
                "-device",
                "pcie-root-port,id=rp1,bus=pcie.0,chassis=1",
                "-S",
                "-incoming",
                "defer"
            ]
        );
    }

    #[test]
    fn driver_ok_needs_both_the_status_bit_and_vhost() {
        let up = json!({"vhost-started": true, "status": {"statuses": ["VIRTIO_CONFIG_S_DRIVER_OK: Driver setup and ready"]}});
        assert!(driver_ok(&up));
        let down = json!({"vhost-started": false, "status": {"statuses": ["VIRTIO_CONFIG_S_DRIVER_OK: x"]}});
        assert!(!driver_ok(&down));
        assert!(!driver_ok(&json!({"vhost-started": true, "status": {"statuses": []}})));
    }

    #[test]
    fn the_replugged_port_is_the_one_on_the_command_line() {
        let args = agent_port_device();
        let line = crate::vmm::launcher::agent_port_device();
        let mut fields = line.split(',');
        assert_eq!(fields.next(), args["driver"].as_str());
        for field in fields {
            let (key, value) = field.split_once('=').unwrap();
            assert_eq!(args[key].as_str(), Some(value), "{key}");
        }
        assert_eq!(args.as_object().unwrap().len(), line.split(',').count());
    }

    #[test]
    fn quotes_paths_and_refuses_quotes() {
        assert_eq!(shell_quote(Path::new("/a b/c")).unwrap(), "'/a b/c'");
        assert!(shell_quote(Path::new("/a'b")).is_err());
    }
}
