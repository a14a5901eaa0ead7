//! The pseudo filesystems PID 1 mounts (`/proc`, `/sys`, `/dev`, ...) and the `/dev`
//! links shells expect.

use std::path::{Path, PathBuf};

use super::InitError;

/// One pseudo filesystem PID 1 mounts.
pub(super) struct PseudoMount {
    fstype: &'static str,
    pub(super) target: &'static str,
    mode: u32,
    data: &'static str,
    flags: rustix::mount::MountFlags,
}

const NOSUID_NODEV_NOEXEC: rustix::mount::MountFlags = rustix::mount::MountFlags::NOSUID
    .union(rustix::mount::MountFlags::NODEV)
    .union(rustix::mount::MountFlags::NOEXEC);

/// In order: `/proc` first, since the "already mounted?" check reads it.
pub(super) const MOUNTS: &[PseudoMount] = &[
    PseudoMount { fstype: "proc", target: "/proc", mode: 0o555, data: "", flags: NOSUID_NODEV_NOEXEC },
    PseudoMount { fstype: "sysfs", target: "/sys", mode: 0o555, data: "", flags: NOSUID_NODEV_NOEXEC },
    PseudoMount {
        fstype: "devtmpfs",
        target: "/dev",
        mode: 0o755,
        data: "mode=0755",
        flags: rustix::mount::MountFlags::NOSUID,
    },
    PseudoMount {
        fstype: "devpts",
        target: "/dev/pts",
        mode: 0o755,
        data: "mode=0620,ptmxmode=0666",
        flags: rustix::mount::MountFlags::NOSUID.union(rustix::mount::MountFlags::NOEXEC),
    },
    PseudoMount {
        fstype: "tmpfs",
        target: "/dev/shm",
        mode: 0o1777,
        data: "mode=1777",
        flags: rustix::mount::MountFlags::NOSUID.union(rustix::mount::MountFlags::NODEV),
    },
    PseudoMount {
        fstype: "tmpfs",
        target: "/run",
        mode: 0o755,
        data: "mode=0755",
        flags: rustix::mount::MountFlags::NOSUID.union(rustix::mount::MountFlags::NODEV),
    },
    PseudoMount {
        fstype: "tmpfs",
        target: "/tmp",
        mode: 0o1777,
        data: "mode=1777",
        flags: rustix::mount::MountFlags::NOSUID.union(rustix::mount::MountFlags::NODEV),
    },
];

/// Mounts `m` unless something is already mounted there (listed in `mounted`).
pub(super) fn mount_pseudo(m: &PseudoMount, mounted: &[PathBuf]) -> Result<(), InitError> {
    let target = Path::new(m.target);
    let err =
        |source: std::io::Error| InitError::Mount { fstype: m.fstype, target: target.to_owned(), source };
    if mounted.iter().any(|p| p == target) {
        return Ok(());
    }
    if !target.is_dir() {
        std::fs::create_dir_all(target).map_err(err)?;
        let _ = std::fs::set_permissions(target, std::os::unix::fs::PermissionsExt::from_mode(m.mode));
    }
    let data = std::ffi::CString::new(m.data).expect("mount options are constants without NUL");
    rustix::mount::mount(m.fstype, target, m.fstype, m.flags, data.as_c_str()).map_err(|e| err(e.into()))
}

/// The mount points listed in `/proc/self/mountinfo`; none while `/proc` is not mounted.
pub(super) fn current_mount_points() -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    mount_points(&info).map(PathBuf::from).collect()
}

/// The mount points (field 5) of a mountinfo text, with `\040`-style escapes decoded.
fn mount_points(info: &str) -> impl Iterator<Item = String> + '_ {
    info.lines().filter_map(|line| line.split(' ').nth(4)).map(unescape_octal)
}

fn unescape_octal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| std::str::from_utf8(d).ok());
        if bytes[i] == b'\\'
            && let Some(v) = octal.and_then(|d| u8::from_str_radix(d, 8).ok())
        {
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `/dev/fd`, `/dev/std{in,out,err}`: devtmpfs does not create them and shells expect them.
pub(super) fn dev_links() {
    for (link, target) in [
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
        ("/dev/ptmx", "pts/ptmx"),
    ] {
        if std::fs::symlink_metadata(link).is_err() {
            let _ = std::os::unix::fs::symlink(target, link);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_points_are_unescaped() {
        let info = "22 1 0:21 / /proc rw,nosuid - proc proc rw\n\
                    30 22 0:40 / /mnt/with\\040space rw - tmpfs tmpfs rw\n";
        let points: Vec<_> = mount_points(info).collect();
        assert_eq!(points, ["/proc", "/mnt/with space"]);
    }
}
