//! A sandbox's storage as QEMU and the guest see it: host folders shared over
//! virtio-9p, and the size of the writable disk. The rules for what may be shared live
//! in [`crate::sandbox::mounts`]; this turns an accepted [`Storage`] into QEMU
//! arguments and the kernel command line words the agent reads
//! (guest-agent/src/storage.rs).
//!
//! Why 9p and `security_model=mapped-xattr` (rootfs/README.md and docs/security.md say
//! it at length): the 9p server is part of QEMU, so there is no helper process to start,
//! record or reap, and it works the same under TCG; QEMU resolves every path below the
//! shared folder with `openat(O_NOFOLLOW)`, so a symlink the guest follows resolves
//! inside the guest, never on the host. With `mapped-xattr`, what the guest (root in
//! it) says about owners, modes, device nodes and symlinks is kept in `user.virtfs.*`
//! extended attributes: host files are made by QEMU with its own credentials and the
//! plain modes [`FILE_MODE`] / [`DIR_MODE`], and a guest chmod/chown/mknod never
//! changes a host mode or owner. No setuid bit, device node or world-writable mode
//! lands on the host. (`none`, used before, passed chmod straight to the host file.)

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One host folder shared into the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// The host folder (canonical: absolute, symlinks resolved).
    pub host: PathBuf,
    /// Where it appears in the guest (absolute, normalized).
    pub guest: String,
    /// Writes fail in the guest (read-only mount, and QEMU refuses them too).
    pub read_only: bool,
}

/// What a sandbox was created with beyond its template's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Storage {
    /// Host folders, in the order given.
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// The writable disk's size in bytes (`None`: the template's).
    #[serde(default)]
    pub disk_bytes: Option<u64>,
    /// The screen's size (`None`: the template's, if it has a screen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<crate::desktop::Size>,
}

/// The host mode of every file the guest creates in a share (its guest mode lives in
/// an xattr): readable by the host user's tools, never executable, setuid or
/// world-writable.
pub const FILE_MODE: u32 = 0o644;
/// The host mode of every folder the guest creates in a share.
pub const DIR_MODE: u32 = 0o755;

/// The 9p mount tag of the `i`-th share.
fn tag(i: usize) -> String {
    format!("atoll{i}")
}

/// QEMU's `-fsdev` / `-device` pairs, one virtio-9p device per share.
pub fn qemu_args(storage: &Storage) -> Vec<String> {
    let mut args = Vec::new();
    for (i, m) in storage.mounts.iter().enumerate() {
        // QEMU's option syntax doubles a comma inside a value.
        let path = m.host.display().to_string().replace(',', ",,");
        let ro = if m.read_only { ",readonly=on" } else { "" };
        args.extend([
            "-fsdev".into(),
            format!(
                "local,id=fs{i},path={path},security_model=mapped-xattr,fmode={FILE_MODE:04o},dmode={DIR_MODE:04o},multidevs=remap{ro}"
            ),
            "-device".into(),
            format!("virtio-9p-pci,fsdev=fs{i},mount_tag={}", tag(i)),
        ]);
    }
    args
}

/// The kernel command line words: `atoll.disk=BYTES`, and `atoll.mount=TAG:PATH:ro|rw` for
/// each share, parents before what is mounted inside them.
pub fn cmdline(storage: &Storage) -> String {
    let mut words = Vec::new();
    if let Some(bytes) = storage.disk_bytes {
        words.push(format!("atoll.disk={bytes}"));
    }
    let mut order: Vec<(usize, &Mount)> = storage.mounts.iter().enumerate().collect();
    order.sort_by_key(|(_, m)| m.guest.matches('/').count());
    for (i, m) in order {
        let mode = if m.read_only { "ro" } else { "rw" };
        words.push(format!("atoll.mount={}:{}:{mode}", tag(i), m.guest));
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_become_9p_devices_and_cmdline_words() {
        let s = Storage {
            mounts: vec![
                Mount { host: "/h/a,b".into(), guest: "/work/inner".into(), read_only: false },
                Mount { host: "/h/src".into(), guest: "/work".into(), read_only: true },
            ],
            disk_bytes: Some(1 << 30),
            display: None,
        };
        let args = qemu_args(&s);
        assert_eq!(
            args[1],
            "local,id=fs0,path=/h/a,,b,security_model=mapped-xattr,fmode=0644,dmode=0755,multidevs=remap",
            "commas doubled, no readonly"
        );
        assert!(args[5].ends_with(",readonly=on"));
        assert_eq!(args[3], "virtio-9p-pci,fsdev=fs0,mount_tag=atoll0");
        assert_eq!(
            cmdline(&s),
            "atoll.disk=1073741824 atoll.mount=atoll1:/work:ro atoll.mount=atoll0:/work/inner:rw"
        );
        assert!(qemu_args(&Storage::default()).is_empty() && cmdline(&Storage::default()).is_empty());
    }
}
