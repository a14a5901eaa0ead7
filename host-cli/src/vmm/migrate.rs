//! Saving a running VM to a file and starting one from it, over QMP.
//!
//! A save is QEMU's own migration stream (`migrate` to `fd:`, a pipe atoll hands QEMU
//! over QMP; a load reads a file atoll opened the same way), with all of
//! guest RAM in it; atoll splits guest RAM out into the snapshot's `ram.bin` as the
//! stream arrives ([`super::stream_split`]), and a restore maps that file privately
//! ([`super::launcher::GuestRam::Snapshot`]) and loads the rest. QEMU 7.2 can migrate
//! every device of an atoll VM: the agent link is a virtio-serial port inside QEMU (no
//! vhost-user backend in another process, which QEMU 7.2 refuses to migrate).
//!
//! Every restore also replugs the agent link's virtio-serial port as the VM starts to
//! run, before any host connects ([`replug_agent_port`]): the port is one
//! byte stream for the VM's life, and a fresh port clears whatever the saved one held in
//! both directions and gives the guest agent the event it reopens the port on.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::launcher::{AGENT_PORT_CHARDEV, AGENT_PORT_DEVICE, AGENT_SERIAL_BUS};
use super::qmp::{Qmp, QmpError};

/// How often QEMU is asked whether a removed device is gone (a QMP round trip costs
/// well under a millisecond).
const POLL: Duration = Duration::from_millis(5);
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
    /// Splitting guest RAM out of the stream failed.
    #[error(transparent)]
    Split(#[from] super::stream_split::StreamSplitError),
    /// The pipe the stream goes through could not be made.
    #[error("could not make a pipe for the VM state; the process may be out of file descriptors")]
    Pipe(#[source] std::io::Error),
    /// The saved state could not be opened.
    #[error("could not open the saved VM state {}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
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
        "name": atoll_proto::link::PORT_NAME,
        "id": AGENT_PORT_DEVICE,
    })
}

/// The name under which QEMU holds the descriptor of a save or a load (`getfd`).
const MIGRATION_FD: &str = "atoll-migration";

/// Stops the guest and writes its whole state, guest RAM included, into `to` (a pipe's
/// write end, handed to QEMU over QMP: QEMU opens and spawns nothing, so its seccomp
/// filter can forbid both). The VM is left stopped, its disks flushed and released:
/// `cont` lets it run on.
async fn save(qmp: &mut Qmp, to: OwnedFd, limit: Duration) -> Result<(), MigrateError> {
    qmp.execute("stop").await?;
    set_capabilities(qmp).await?;
    // The default is 128 MiB/s; a local pipe takes what the reader takes.
    qmp.execute_with("migrate-set-parameters", json!({ "max-bandwidth": 64_i64 << 30 })).await?;
    qmp.send_fd(MIGRATION_FD, to.as_fd()).await?;
    // QEMU holds its own copy now; ours must go, or the reader never sees the end.
    drop(to);
    if let Err(e) = qmp.execute_with("migrate", json!({ "uri": format!("fd:{MIGRATION_FD}") })).await {
        // A refused `migrate` leaves the descriptor with QEMU: take it back, so the
        // reader sees the end.
        let _ = qmp.execute_with("closefd", json!({ "fdname": MIGRATION_FD })).await;
        return Err(e.into());
    }
    wait_migration(qmp, "save", limit).await.map(drop)
}

/// `save`s into a pipe while [`super::stream_split`] reads it as it arrives, writing
/// guest RAM (block `ram_block`) into `ram` and the rest into `memory`. When the
/// splitter could not write (a full disk, say), its error is the one returned: QEMU
/// then only saw its pipe break.
pub async fn save_split(
    qmp: &mut Qmp,
    ram_block: &'static str,
    (memory, ram): (PathBuf, PathBuf),
    limit: Duration,
) -> Result<super::stream_split::Split, MigrateError> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| MigrateError::Pipe(e.into()))?;
    let from = PathBuf::from("(QEMU's migration stream)");
    let splitter = tokio::task::spawn_blocking(move || {
        super::stream_split::split_from(std::fs::File::from(read), &from, ram_block, &memory, &ram)
    });
    let saved = save(qmp, write, limit).await;
    let split = splitter.await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    match (saved, split) {
        (_, Err(e @ super::stream_split::StreamSplitError::Write { .. })) => Err(e.into()),
        (Err(e), _) => Err(e),
        (Ok(()), split) => Ok(split?),
    }
}

/// Loads `file` into a QEMU started with [`restore_args`]; the guest stays stopped
/// until `cont`. atoll opens the file and hands QEMU the descriptor (`fd:`).
pub async fn load(qmp: &mut Qmp, file: &Path, limit: Duration) -> Result<(), MigrateError> {
    let stream = open_stream(file)?;
    set_capabilities(qmp).await?;
    qmp.send_fd(MIGRATION_FD, stream.as_fd()).await?;
    drop(stream);
    qmp.execute_with("migrate-incoming", json!({ "uri": format!("fd:{MIGRATION_FD}") })).await?;
    wait_migration(qmp, "load", limit).await.map(drop)
}

/// Opens the saved state `file` for QEMU to read. `snapfile::open` checked it by name;
/// this opens it by name again, and someone may have put a link or FIFO there since:
/// neither is opened ([`super::safe_fs::open_read`]: no link followed, no wait on a
/// FIFO, a regular file or nothing).
fn open_stream(file: &Path) -> Result<std::fs::File, MigrateError> {
    let open = || -> std::io::Result<std::fs::File> {
        let stream = super::safe_fs::open_read(file)?;
        // QEMU gets it as a plain open would have given it (blocking reads).
        rustix::fs::fcntl_setfl(&stream, rustix::fs::OFlags::empty())?;
        Ok(stream)
    };
    open().map_err(|source| MigrateError::Open { path: file.into(), source })
}

/// `events`: QEMU announces each change of the migration's status, so the wait ends
/// when it does instead of at the next poll.
async fn set_capabilities(qmp: &mut Qmp) -> Result<(), MigrateError> {
    let caps = json!([{ "capability": "events", "state": true }]);
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

/// The command line of a VM that will load a saved state: the boot command line with
/// `-incoming defer`, stopped (`-S`) until `cont`.
pub fn restore_args(mut boot_args: Vec<String>) -> Vec<String> {
    boot_args.extend(["-S".into(), "-incoming".into(), "defer".into()]);
    boot_args
}

/// True when `file` starts like a QEMU migration stream.
pub fn looks_like_stream(file: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 8];
    std::fs::File::open(file).and_then(|mut f| f.read_exact(&mut head)).is_ok() && head == STREAM_MAGIC
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A link or FIFO put in the saved state's place after the snapshot's files were
    /// checked is refused when it is opened (a FIFO with no writer would hold the restore
    /// forever; a link would hand QEMU whatever it names), with the path in the error.
    #[test]
    fn the_saved_state_is_opened_without_following_a_link_or_waiting_on_a_fifo() {
        let d = tempfile::tempdir().unwrap();
        let (real, link, fifo) = (d.path().join("real"), d.path().join("link"), d.path().join("fifo"));
        std::fs::write(&real, b"QEVM").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, 0o600.into(), 0).unwrap();
        assert!(open_stream(&real).is_ok());
        for planted in [link, fifo] {
            let (tx, rx) = std::sync::mpsc::channel();
            let path = planted.clone();
            std::thread::spawn(move || tx.send(open_stream(&path).map(drop)));
            let got = rx.recv_timeout(Duration::from_secs(5));
            let err = match got {
                Ok(r) => r.expect_err("a planted file was opened"),
                Err(_) => panic!("opening {} did not return", planted.display()),
            };
            assert!(err.to_string().contains(&planted.display().to_string()), "{err}");
        }
    }
}
