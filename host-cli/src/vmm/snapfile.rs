//! A snapshot on disk: a directory holding `snapshot.json` (what it is), `memory.bin`
//! (QEMU's migration stream without guest RAM: device state), `ram.bin` (guest RAM as
//! a sparse file of its size: all-zero pages are holes; see [`super::stream_split`];
//! VMs started from the snapshot map it privately, so it is never written after the
//! snapshot is committed) and, for a template with a disk, `disk.qcow2` (the
//! sandbox's copy-on-write overlay as it was).
//!
//! Format 3 came with the agent link: its VMs have a virtio-serial port and no vsock
//! device, so a snapshot of format 1 or 2 (saved with a vsock device behind a PCIe root
//! port, and a guest agent that only listens on vsock) cannot be restored by this atoll
//! and is refused with [`SnapFileError::Outdated`].
//!
//! Named snapshots live in `<state>/.snapshots/<name>/`; a parked sandbox keeps its
//! own in `<sandbox dir>/parked/`. A snapshot is written into a staging directory
//! next to its final place and renamed into it only once complete, so a failed or
//! interrupted save leaves no partial snapshot behind.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::migrate::looks_like_stream;
use super::template::Template;

/// The description file.
pub const META_FILE: &str = "snapshot.json";
/// The migration stream.
pub const MEMORY_FILE: &str = "memory.bin";
/// Guest RAM.
pub const RAM_FILE: &str = "ram.bin";
/// The disk overlay.
pub const DISK_FILE: &str = "disk.qcow2";
/// The version of this layout.
pub const FORMAT: u32 = 3;
/// The files a snapshot may hold.
const FILES: [&str; 4] = [META_FILE, MEMORY_FILE, RAM_FILE, DISK_FILE];

/// Why a snapshot cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SnapFileError {
    /// No such snapshot.
    #[error("no snapshot is called `{0}`; `atoll snapshot ls` lists them")]
    NotFound(String),
    /// The snapshot was saved by another version of atoll, whose VMs had other devices.
    #[error(
        "snapshot {} was saved by {} atoll (snapshot layout {format}; this atoll reads layout {FORMAT}): {}",
        dir.display(),
        if *format < FORMAT { "an older" } else { "a newer" },
        if *format < FORMAT {
            "its VM reached the agent over vsock, which this atoll's VMs no longer have, so it cannot be restored; remove it (`atoll snapshot rm`, or `atoll kill` for a parked sandbox) and take a new one"
        } else {
            "upgrade atoll to restore it"
        }
    )]
    Outdated {
        /// Its directory.
        dir: PathBuf,
        /// Its layout.
        format: u32,
    },
    /// The snapshot is damaged or not one of ours.
    #[error("snapshot {} is unusable: {why}; remove it with `atoll snapshot rm`", dir.display())]
    Damaged {
        /// Its directory.
        dir: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// One of its files is a link, a FIFO or a device: put there by someone, never by
    /// atoll, which writes each as a regular file.
    #[error(
        "snapshot {} was altered: its {file} is a link, FIFO or device, not the regular file atoll wrote; nothing was started from it. Remove it (`atoll snapshot rm NAME`; a template's: `atoll template snapshot TEMPLATE --rm`; a parked sandbox's: `atoll kill NAME`) and take a new one",
        dir.display()
    )]
    NotRegular {
        /// Its directory.
        dir: PathBuf,
        /// The file.
        file: &'static str,
    },
    /// Writing failed.
    #[error("could not write the snapshot at {}; check free space and permissions", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Too little room for it.
    #[error(
        "not enough free space for the snapshot in {}: {free_mib} MiB free, up to {need_mib} MiB needed; free some space or remove old snapshots",
        dir.display()
    )]
    NoSpace {
        /// Where it would go.
        dir: PathBuf,
        /// Free space.
        free_mib: u64,
        /// An upper bound of its size.
        need_mib: u64,
    },
}

/// `snapshot.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotMeta {
    /// Layout version ([`FORMAT`]).
    pub format: u32,
    /// Its name.
    pub name: String,
    /// The id of the sandbox it was taken from.
    pub source_id: String,
    /// The name of that sandbox.
    pub source_name: String,
    /// Its template.
    pub template: String,
    /// Sizes and modification times of the template's files when it was taken: a
    /// rebuilt template no longer matches the saved memory and disk.
    pub template_fingerprint: String,
    /// Guest memory.
    pub memory_mib: u32,
    /// Guest vCPUs.
    pub cpus: u32,
    /// `kvm` or `tcg`.
    pub accel: String,
    /// QEMU's version, which must load the stream.
    pub qemu_version: String,
    /// Sizes and modification times of the `atoll` and QEMU programs that saved it (see
    /// [`programs_fingerprint`]); template snapshots are used only under the same ones.
    #[serde(default)]
    pub programs: String,
    /// When it was taken (Unix milliseconds).
    pub created_unix_ms: i64,
    /// Length of `memory.bin`, to tell a truncated file.
    pub memory_bytes: u64,
    /// Whether `disk.qcow2` is part of it.
    pub disk: bool,
    /// The guest's network when it had a NIC (absent: no NIC, as with `--net none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<SnapshotNet>,
    /// Which face made it, as a sandbox's `created_by`: `None` for the CLI (and for
    /// snapshots from before this field), else the MCP identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
}

/// A saved guest's network: the egress policy it ran under and the TCP connections it
/// had open, which are reset in every guest restored from it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotNet {
    /// The egress policy (rules on top of the built-in default).
    pub policy: atoll_net::policy::Policy,
    /// The guest's connections (guest end, remote end) when it was stopped.
    #[serde(default)]
    pub open_flows: Vec<atoll_net::stack::FlowKey>,
}

/// A snapshot that passed [`open`]'s checks.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Its directory.
    pub dir: PathBuf,
    /// Its description.
    pub meta: SnapshotMeta,
}

impl Snapshot {
    /// The migration stream.
    pub fn memory(&self) -> PathBuf {
        self.dir.join(MEMORY_FILE)
    }

    /// Guest RAM.
    pub fn ram(&self) -> PathBuf {
        self.dir.join(RAM_FILE)
    }

    /// The disk overlay, if it has one.
    pub fn disk(&self) -> Option<PathBuf> {
        self.meta.disk.then(|| self.dir.join(DISK_FILE))
    }

    /// Bytes it takes on disk: the blocks its files have allocated (`ram.bin`'s
    /// holes take none).
    pub fn size_on_disk(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        FILES.iter().filter_map(|f| std::fs::metadata(self.dir.join(f)).ok()).map(|m| m.blocks() * 512).sum()
    }
}

/// The directory of named snapshots.
pub fn named_dir(state: &Path) -> PathBuf {
    state.join(".snapshots")
}

/// Reads and checks the snapshot in `dir`: its description and layout, the stream's
/// header and length, guest RAM's length, and the disk.
pub fn open(dir: &Path) -> Result<Snapshot, SnapFileError> {
    let damaged = |why: String| SnapFileError::Damaged { dir: dir.to_path_buf(), why };
    let text =
        std::fs::read(dir.join(META_FILE)).map_err(|e| damaged(format!("no readable {META_FILE} ({e})")))?;
    let meta: SnapshotMeta =
        serde_json::from_slice(&text).map_err(|e| damaged(format!("{META_FILE} is malformed ({e})")))?;
    if meta.format != FORMAT {
        return Err(SnapFileError::Outdated { dir: dir.to_path_buf(), format: meta.format });
    }
    // The description picks QEMU's memory, vCPUs, accelerator and template: range-checked
    // as `atoll create` checks its flags, so an edited file cannot ask for more.
    if !(1..=crate::sandbox::create::MAX_MEMORY_MIB).contains(&meta.memory_mib) {
        return Err(damaged(format!("its memory of {} MiB is out of range", meta.memory_mib)));
    }
    if !(1..=crate::sandbox::create::MAX_CPUS).contains(&meta.cpus) {
        return Err(damaged(format!("its {} vCPUs are out of range", meta.cpus)));
    }
    if !matches!(meta.accel.as_str(), "kvm" | "tcg") {
        return Err(damaged("its accelerator is neither kvm nor tcg".into()));
    }
    if !super::template::is_plain_name(&meta.template) {
        return Err(damaged("its template is not a plain name".into()));
    }
    // Each file is looked at itself, not through a link: atoll and QEMU open them by
    // name, and a link or FIFO in a file's place is not what atoll wrote.
    let regular = |file: &'static str| match std::fs::symlink_metadata(dir.join(file)) {
        Ok(m) if m.is_file() => Ok(m.len()),
        Ok(_) => Err(SnapFileError::NotRegular { dir: dir.to_path_buf(), file }),
        Err(e) => Err(damaged(format!("no {file} ({e})"))),
    };
    let memory = dir.join(MEMORY_FILE);
    let len = regular(MEMORY_FILE)?;
    if len != meta.memory_bytes {
        return Err(damaged(format!("{MEMORY_FILE} has {len} bytes, {} were saved", meta.memory_bytes)));
    }
    if !looks_like_stream(&memory) {
        return Err(damaged(format!("{MEMORY_FILE} is not a QEMU migration stream")));
    }
    let ram = u64::from(meta.memory_mib) << 20;
    let len = regular(RAM_FILE)?;
    if len != ram {
        return Err(damaged(format!("{RAM_FILE} has {len} bytes, the guest's memory {ram}")));
    }
    if meta.disk {
        regular(DISK_FILE)?;
    }
    Ok(Snapshot { dir: dir.to_path_buf(), meta })
}

/// Every named snapshot, by name; unreadable ones as errors.
pub fn list(state: &Path) -> Vec<Result<Snapshot, SnapFileError>> {
    let mut out: Vec<_> = std::fs::read_dir(named_dir(state))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| open(&e.path()))
        .collect();
    out.sort_by(|a, b| match (a, b) {
        (Ok(a), Ok(b)) => a.meta.name.cmp(&b.meta.name),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => std::cmp::Ordering::Equal,
    });
    out
}

/// The sizes and modification times of a template's files.
pub fn fingerprint(template: &Template) -> String {
    use std::os::unix::fs::MetadataExt;
    [Some(&template.kernel), template.initrd.as_ref(), template.rootfs.as_ref()]
        .into_iter()
        .flatten()
        .map(|p| match std::fs::metadata(p) {
            Ok(m) => format!("{}:{}", m.len(), m.mtime()),
            Err(_) => "missing".into(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The sizes and modification times of this `atoll` and of the QEMU in `PATH`: a restore
/// builds QEMU's command line anew, so a snapshot saved by other programs may not load.
pub fn programs_fingerprint() -> String {
    use std::os::unix::fs::MetadataExt;
    let qemu = super::process::find_in_path(super::launcher::QEMU).ok();
    [std::env::current_exe().ok(), qemu]
        .into_iter()
        .map(|p| match p.and_then(|p| std::fs::metadata(p).ok()) {
            Some(m) => format!("{}:{}", m.len(), m.mtime()),
            None => "missing".into(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A snapshot being written: removed when dropped unless committed.
pub struct Staging {
    dir: PathBuf,
    target: PathBuf,
    armed: bool,
}

impl Staging {
    /// Makes an empty staging directory for the snapshot that will live at `target`,
    /// after checking that `need_bytes` fit on its file system.
    pub fn new(target: &Path, need_bytes: u64) -> Result<Staging, SnapFileError> {
        let parent = target.parent().unwrap_or(Path::new("/"));
        let write = |path: &Path, source| SnapFileError::Write { path: path.to_path_buf(), source };
        std::fs::create_dir_all(parent).map_err(|e| write(parent, e))?;
        let free = free_bytes(parent).map_err(|e| write(parent, e))?;
        if free < need_bytes {
            return Err(SnapFileError::NoSpace {
                dir: parent.to_path_buf(),
                free_mib: free >> 20,
                need_mib: need_bytes.div_ceil(1 << 20),
            });
        }
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let dir = parent.join(format!(".{name}.staging-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).map_err(|e| write(&dir, e))?;
        Ok(Staging { dir, target: target.to_path_buf(), armed: true })
    }

    /// Where the migration stream goes.
    pub fn memory(&self) -> PathBuf {
        self.dir.join(MEMORY_FILE)
    }

    /// Where guest RAM goes.
    pub fn ram(&self) -> PathBuf {
        self.dir.join(RAM_FILE)
    }

    /// Where the disk overlay goes.
    pub fn disk(&self) -> PathBuf {
        self.dir.join(DISK_FILE)
    }

    /// Writes the description (with the stream's length) and moves the snapshot into
    /// place. Fails, leaving nothing, when `target` exists and `replace` is false.
    pub fn commit(mut self, mut meta: SnapshotMeta, replace: bool) -> Result<Snapshot, SnapFileError> {
        let write = |path: &Path, source| SnapFileError::Write { path: path.to_path_buf(), source };
        let memory = self.memory();
        meta.memory_bytes = std::fs::metadata(&memory).map_err(|e| write(&memory, e))?.len();
        let meta_path = self.dir.join(META_FILE);
        let json = serde_json::to_vec_pretty(&meta).expect("a snapshot description always serializes");
        std::fs::write(&meta_path, json).map_err(|e| write(&meta_path, e))?;
        for f in FILES {
            if let Ok(file) = std::fs::File::open(self.dir.join(f)) {
                file.sync_all().map_err(|e| write(&self.dir.join(f), e))?;
            }
        }
        if replace && self.target.exists() {
            let old = self.dir.with_extension("old");
            std::fs::rename(&self.target, &old).map_err(|e| write(&self.target, e))?;
            std::fs::rename(&self.dir, &self.target).map_err(|e| write(&self.target, e))?;
            let _ = std::fs::remove_dir_all(&old);
        } else {
            // rename(2) refuses a non-empty target: two saves racing for one name
            // cannot both win.
            std::fs::rename(&self.dir, &self.target).map_err(|e| write(&self.target, e))?;
        }
        self.armed = false;
        Ok(Snapshot { dir: self.target.clone(), meta })
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.armed {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Free bytes for an unprivileged writer on the file system holding `dir`.
pub fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let s = rustix::fs::statvfs(dir).map_err(std::io::Error::from)?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str) -> SnapshotMeta {
        SnapshotMeta {
            format: FORMAT,
            name: name.into(),
            source_id: "ab".into(),
            source_name: "src".into(),
            template: "minimal".into(),
            template_fingerprint: String::new(),
            memory_mib: 512,
            cpus: 1,
            accel: "tcg".into(),
            qemu_version: "7.2.0".into(),
            programs: String::new(),
            created_unix_ms: 1,
            memory_bytes: 0,
            disk: false,
            network: None,
            created_by: None,
        }
    }

    /// Puts a stream of `extra` bytes after the magic and an all-hole `ram.bin` of
    /// `mib` MiB into `staging`.
    fn fill(staging: &Staging, extra: usize, mib: u64) -> std::fs::File {
        let mut stream = STREAM.to_vec();
        stream.extend(std::iter::repeat_n(7u8, extra));
        std::fs::write(staging.memory(), &stream).unwrap();
        let ram = std::fs::File::create(staging.ram()).unwrap();
        ram.set_len(mib << 20).unwrap();
        ram
    }

    #[test]
    fn a_committed_snapshot_opens_and_damage_is_told() {
        let d = tempfile::tempdir().unwrap();
        let target = named_dir(d.path()).join("s1");
        let staging = Staging::new(&target, 0).unwrap();
        fill(&staging, 100, 4);
        let m = SnapshotMeta { memory_mib: 4, ..meta("s1") };
        let snap = staging.commit(m.clone(), false).unwrap();
        assert_eq!(open(&target).unwrap().meta.memory_bytes, 108);
        assert_eq!(list(d.path()).len(), 1);
        // A second save under the same name fails and leaves no staging directory.
        let staging = Staging::new(&target, 0).unwrap();
        fill(&staging, 100, 4);
        assert!(staging.commit(m, false).is_err());
        assert_eq!(std::fs::read_dir(named_dir(d.path())).unwrap().count(), 1);
        // Truncated, then foreign.
        let stream = std::fs::read(snap.memory()).unwrap();
        std::fs::write(snap.memory(), &stream[..50]).unwrap();
        let err = open(&target).unwrap_err().to_string();
        assert!(err.contains("50 bytes") && err.contains("atoll snapshot rm"), "{err}");
        std::fs::write(snap.memory(), [0u8; 108]).unwrap();
        assert!(open(&target).unwrap_err().to_string().contains("not a QEMU migration stream"));
    }

    #[test]
    fn ram_file_length_and_layout_versions_are_checked() {
        let d = tempfile::tempdir().unwrap();
        let target = named_dir(d.path()).join("s");
        let staging = Staging::new(&target, 0).unwrap();
        let ram = fill(&staging, 0, 4);
        let snap = staging.commit(SnapshotMeta { memory_mib: 4, ..meta("s") }, false).unwrap();
        assert_eq!(open(&target).unwrap().ram(), target.join(RAM_FILE));
        assert!(snap.size_on_disk() < 1 << 20, "ram.bin's holes take no room");
        // Truncated, then grown: refused before anything starts.
        ram.set_len(1 << 20).unwrap();
        let err = open(&target).unwrap_err().to_string();
        assert!(err.contains("ram.bin has 1048576 bytes") && err.contains("atoll snapshot rm"), "{err}");
        ram.set_len(5 << 20).unwrap();
        assert!(open(&target).unwrap_err().to_string().contains("ram.bin has 5242880 bytes"));
        ram.set_len(4 << 20).unwrap();
        // Format 2 (a vsock device, an agent on vsock) and older are refused with what
        // to do, and so is a newer one.
        let mut json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(target.join(META_FILE)).unwrap()).unwrap();
        for (format, says) in [(2, "an older atoll"), (1, "an older atoll"), (FORMAT + 1, "upgrade atoll")] {
            json["format"] = format.into();
            std::fs::write(target.join(META_FILE), json.to_string()).unwrap();
            let err = open(&target).unwrap_err();
            assert!(matches!(err, SnapFileError::Outdated { .. }), "{err}");
            let err = err.to_string();
            assert!(err.contains(says) && err.contains(&format!("layout {format}")), "{err}");
        }
        json["format"] = FORMAT.into();
        std::fs::write(target.join(META_FILE), json.to_string()).unwrap();
        // A link to a file of the right length, or a FIFO, in a file's place: altered.
        let elsewhere = d.path().join("elsewhere.bin");
        std::fs::copy(target.join(RAM_FILE), &elsewhere).unwrap();
        std::fs::remove_file(target.join(RAM_FILE)).unwrap();
        assert!(open(&target).unwrap_err().to_string().contains("no ram.bin"));
        std::os::unix::fs::symlink(&elsewhere, target.join(RAM_FILE)).unwrap();
        let err = open(&target).unwrap_err();
        assert!(matches!(err, SnapFileError::NotRegular { file: RAM_FILE, .. }), "{err}");
        assert!(err.to_string().contains("was altered: its ram.bin is a link, FIFO or device"), "{err}");
        std::fs::rename(target.join(MEMORY_FILE), d.path().join("memory.bin")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            target.join(MEMORY_FILE),
            rustix::fs::FileType::Fifo,
            0o600.into(),
            0,
        )
        .unwrap();
        let err = open(&target).unwrap_err();
        assert!(matches!(err, SnapFileError::NotRegular { file: MEMORY_FILE, .. }), "{err}");
    }

    #[test]
    fn refuses_when_space_is_short() {
        let d = tempfile::tempdir().unwrap();
        let err = Staging::new(&d.path().join("s"), u64::MAX).err().unwrap();
        assert!(matches!(err, SnapFileError::NoSpace { .. }), "{err}");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    const STREAM: [u8; 8] = super::super::migrate::STREAM_MAGIC;

    #[test]
    fn out_of_range_descriptions_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let target = named_dir(d.path()).join("r");
        let staging = Staging::new(&target, 0).unwrap();
        fill(&staging, 0, 4);
        staging.commit(SnapshotMeta { memory_mib: 4, ..meta("r") }, false).unwrap();
        let good: serde_json::Value =
            serde_json::from_slice(&std::fs::read(target.join(META_FILE)).unwrap()).unwrap();
        for (field, value, says) in [
            ("memory_mib", serde_json::json!(u32::MAX), "memory"),
            ("cpus", serde_json::json!(0), "vCPUs"),
            ("cpus", serde_json::json!(100_000), "vCPUs"),
            ("accel", serde_json::json!("xen"), "accelerator"),
            ("template", serde_json::json!("../../etc"), "template"),
        ] {
            let mut json = good.clone();
            json[field] = value;
            std::fs::write(target.join(META_FILE), json.to_string()).unwrap();
            let err = open(&target).unwrap_err().to_string();
            assert!(err.contains(says), "{field}: {err}");
        }
        std::fs::write(target.join(META_FILE), good.to_string()).unwrap();
        assert!(open(&target).is_ok());
    }
}
