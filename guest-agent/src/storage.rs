//! The sandbox's storage as the host asked for it on the kernel command line: host
//! folders shared over virtio-9p (`atoll.mount=TAG:GUESTPATH:ro|rw`), mounted where the
//! host said, and the size of the writable root (`atoll.disk=BYTES`): a tmpfs root (the
//! `minimal` template) is remounted with that size, an ext4 root on a disk the host made
//! larger than the filesystem is grown online to fill it.
//!
//! Runs before the agent listens, as PID 1 and as a service alike: once the host hears
//! READY, the folders are there. The initramfs loads the 9p modules when it sees
//! `atoll.mount=` (rootfs/initramfs-init.sh).

use std::path::{Path, PathBuf};

use rustix::mount::MountFlags;

/// The 9p options: the Linux dialect, 256 KiB messages (fewer round trips on large
/// reads), and `cache=mmap`: no caching of data or metadata, so a change on either side
/// is seen at once, but programs may still `mmap` shared files.
const NINEP_OPTIONS: &str = "trans=virtio,version=9p2000.L,msize=262144,cache=mmap";

/// One `atoll.mount=` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareSpec {
    /// The 9p mount tag QEMU gave the share.
    pub tag: String,
    /// Where it goes in the guest (absolute).
    pub target: PathBuf,
    /// Mounted read-only.
    pub read_only: bool,
}

impl std::str::FromStr for ShareSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = s.split(':');
        let (Some(tag), Some(target), Some(mode), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("`{s}` is not TAG:GUESTPATH:ro|rw"));
        };
        let read_only = match mode {
            "ro" => true,
            "rw" => false,
            other => return Err(format!("mode `{other}` is neither ro nor rw")),
        };
        if tag.is_empty() || !target.starts_with('/') {
            return Err(format!("`{s}` needs a tag and an absolute guest path"));
        }
        Ok(ShareSpec { tag: tag.to_owned(), target: PathBuf::from(target), read_only })
    }
}

/// Why the storage the host asked for could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The share's mount point could not be made.
    #[error("could not create the mount point {} for the host folder `{tag}`", target.display())]
    MountPoint {
        /// The 9p tag.
        tag: String,
        /// The guest path.
        target: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The 9p mount failed.
    #[error("could not mount the host folder `{tag}` on {} (is the 9p module loaded?)", target.display())]
    Mount {
        /// The 9p tag.
        tag: String,
        /// The guest path.
        target: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The root filesystem could not be sized.
    #[error("could not make the root filesystem {bytes} bytes ({how})")]
    Disk {
        /// The size asked for.
        bytes: u64,
        /// What was tried.
        how: &'static str,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// Mounts each share, in order.
pub fn mount_shares(shares: &[ShareSpec]) -> Result<(), StorageError> {
    for s in shares {
        std::fs::create_dir_all(&s.target).map_err(|source| StorageError::MountPoint {
            tag: s.tag.clone(),
            target: s.target.clone(),
            source,
        })?;
        // nosuid, nodev: a set-uid file or a device node in a host folder gives no power
        // inside the guest.
        let mut flags = MountFlags::NOSUID | MountFlags::NODEV;
        if s.read_only {
            flags |= MountFlags::RDONLY;
        }
        let data = std::ffi::CString::new(NINEP_OPTIONS).expect("constant without NUL");
        rustix::mount::mount(s.tag.as_str(), &s.target, "9p", flags, data.as_c_str()).map_err(|e| {
            StorageError::Mount { tag: s.tag.clone(), target: s.target.clone(), source: e.into() }
        })?;
    }
    Ok(())
}

/// Sizes the root filesystem to `bytes`: a tmpfs root gets `size=`, an ext4 root is
/// grown to fill its (larger) disk. Anything else is left alone.
pub fn size_root(bytes: u64) -> Result<(), StorageError> {
    let fs = rustix::fs::statfs("/").map_err(|e| StorageError::Disk {
        bytes,
        how: "statfs /",
        source: e.into(),
    })?;
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    const EXT4_MAGIC: i64 = 0xef53;
    #[allow(clippy::unnecessary_cast, reason = "f_type's width differs between targets")]
    match fs.f_type as i64 {
        TMPFS_MAGIC | RAMFS_MAGIC => {
            let data = std::ffi::CString::new(format!("size={bytes}")).expect("digits only");
            rustix::mount::mount_remount("/", MountFlags::empty(), data.as_c_str()).map_err(|e| {
                StorageError::Disk { bytes, how: "remounting the tmpfs root with size=", source: e.into() }
            })
        }
        EXT4_MAGIC => grow_ext4_root(bytes),
        _ => Ok(()),
    }
}

/// Grows the mounted ext4 root to `bytes` (EXT4_IOC_RESIZE_FS: online, no tool needed);
/// a filesystem already that large is left as it is.
fn grow_ext4_root(bytes: u64) -> Result<(), StorageError> {
    let err = |how, source| StorageError::Disk { bytes, how, source };
    let root = std::fs::File::open(Path::new("/")).map_err(|e| err("opening /", e))?;
    let vfs = rustix::fs::fstatvfs(&root).map_err(|e| err("statvfs /", e.into()))?;
    let block = vfs.f_frsize.max(1);
    let want = bytes / block;
    if vfs.f_blocks >= want {
        return Ok(());
    }
    // EXT4_IOC_RESIZE_FS = _IOW('f', 16, __u64)
    const EXT4_IOC_RESIZE_FS: libc::c_ulong = 0x4008_6610;
    let count: u64 = want;
    // SAFETY: the ioctl reads one u64 through the pointer, which outlives the call; the
    // file descriptor is open for the duration.
    let rc = unsafe {
        libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&root), EXT4_IOC_RESIZE_FS as _, &count as *const u64)
    };
    if rc != 0 {
        return Err(err("growing ext4 online", std::io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_specs_parse_and_bad_ones_are_refused() {
        let s: ShareSpec = "atoll0:/work/src:ro".parse().unwrap();
        assert_eq!(s, ShareSpec { tag: "atoll0".into(), target: "/work/src".into(), read_only: true });
        assert!(!"atoll1:/w:rw".parse::<ShareSpec>().unwrap().read_only);
        for bad in ["atoll0:/w", "atoll0:w:rw", ":/w:rw", "atoll0:/w:rx", "a:/b:rw:x"] {
            assert!(bad.parse::<ShareSpec>().is_err(), "{bad}");
        }
    }
}
