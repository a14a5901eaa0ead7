//! The VMM layer: what it takes to run one microVM on this machine. QEMU's command
//! line and accelerator, the detached QEMU, QMP, the agent link, snapshots, and the
//! files that record a sandbox on disk.
//!
//! Only [`crate::sandbox`] (and [`crate::template`], for the data directory and
//! `template.json`) calls into here; the faces (`cmd/`, `mcp/`) never do. Nothing here
//! imports from the layers above.
//!
//! - [`agent_link`]: the host end of the agent link over the VM's virtio-serial port:
//!   one HTTP/2 connection, shared by the clients of `agent.sock`.
//! - [`dirs`]: where templates and sandbox state live.
//! - [`template`]: reading `template.json`.
//! - [`state`]: `sandbox.json` records, the state lock, id / name allocation.
//! - [`process`]: pid identity, freezing, killing (starting is [`crate::jail`]'s).
//! - [`launcher`]: QEMU's command line (guest RAM fresh or a snapshot's, mapped
//!   privately), accelerator probe.
//! - [`qmp`]: a few QMP commands (query-status, cont, quit) and events.
//! - [`migrate`]: saving a running VM to a file and loading it, and replugging the
//!   agent link's port of a restored VM.
//! - [`qcow2`]: the backing file a snapshot's disk makes QEMU open, checked.
//! - [`safe_fs`]: opening, writing and connecting where a jailed QEMU can also write,
//!   without following what it plants.
//! - [`snapfile`]: a snapshot on disk (description, stream, disk), written atomically.
//! - [`stream_split`]: taking guest RAM out of a saved migration stream into a
//!   sparse file of its own (`ram.bin`), the stream left with the rest.
//! - [`storage`]: host folders (virtio-9p) and the disk size, as QEMU arguments and
//!   kernel command line words.
//! - [`watchdog`]: noticing a boot that wedged, so that it is tried again.

pub mod agent_link;
pub mod dirs;
pub mod launcher;
pub mod migrate;
pub mod process;
pub mod qcow2;
pub mod qmp;
pub mod safe_fs;
pub mod snapfile;
pub mod state;
pub mod storage;
pub mod stream_split;
pub mod template;
pub mod watchdog;

/// Now, in Unix milliseconds.
pub(crate) fn now_unix_ms() -> i64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
