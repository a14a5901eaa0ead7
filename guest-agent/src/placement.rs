//! Where a small piece of work (a file call, starting a command or a job) runs: on the
//! runtime thread that took the call, or on the blocking pool.
//!
//! A trip to the blocking pool is two thread wakeups, which cost more than a stat or a
//! 1 KiB read from the page cache. But a file call on a network or FUSE filesystem can
//! wait forever on a server or a daemon, and on the runtime thread that would stall
//! every other call. So small calls run in place only while every mounted filesystem
//! is one the kernel serves itself (disk, memory, pseudo); as soon as anything else is
//! mounted (NFS, virtiofs, 9p, FUSE, autofs...), they all go to the blocking pool again.
//! A local disk may still make a call wait for its I/O, but never indefinitely: a cold
//! read waits for the disk, and a small write can be throttled while the kernel writes
//! back a large amount of dirty data (an fsync, which can wait far longer, always goes
//! to the pool).
//!
//! The mount table is re-read only when the kernel says it changed: `poll` on an open
//! `/proc/self/mountinfo` reports `POLLPRI` after any mount or unmount.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::{Mutex, OnceLock};

use rustix::event::{PollFd, PollFlags, Timespec};

use crate::files::FsError;

/// Filesystem types whose calls the kernel answers without a server or a daemon.
#[rustfmt::skip]
const LOCAL_TYPES: &[&str] = &[
    "ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "vfat", "exfat", "squashfs", "erofs",
    "iso9660", "overlay", "tmpfs", "ramfs", "rootfs", "devtmpfs", "proc", "sysfs", "devpts",
    "mqueue", "cgroup", "cgroup2", "securityfs", "debugfs", "tracefs", "bpf", "hugetlbfs",
    "pstore", "configfs", "binfmt_misc", "efivarfs", "fusectl", "selinuxfs", "nsfs",
];

/// Runs `f` in place when every mount is local, else on the blocking pool.
///
/// For work that is small and bounded: a stat, opening a file, reading a few KiB, a
/// short directory. Anything that may take long on a healthy disk (an fsync, a large
/// or recursive listing) belongs on [`blocking`](super::blocking) regardless.
pub(crate) async fn quick<T, F>(f: F) -> Result<T, FsError>
where
    F: FnOnce() -> Result<T, FsError> + Send + 'static,
    T: Send + 'static,
{
    quick_if(|| true, f).await
}

/// [`quick`], for work that is small only sometimes: `small` (itself a cheap check, run
/// in place and only when every mount is local) says whether this time it is.
pub(crate) async fn quick_if<T, F>(small: impl FnOnce() -> bool, f: F) -> Result<T, FsError>
where
    F: FnOnce() -> Result<T, FsError> + Send + 'static,
    T: Send + 'static,
{
    placed(small, f).await.map_err(|_| FsError::WorkerGone)?
}

/// Runs `f` in place while every mount is local, else on the blocking pool: for work
/// outside the file calls that touches paths a remote mount could hang, such as
/// starting a command (its cwd and program are looked up, and `posix_spawn` waits for
/// the child's exec). A panic in `f` is passed on.
pub(crate) async fn in_place_unless_remote<T, F>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match placed(|| true, f).await {
        Ok(value) => value,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // The runtime is shutting down: nothing will poll this again.
        Err(_) => std::future::pending().await,
    }
}

/// The one placement decision: `f` in place when every mount is local and `small()`
/// agrees, else on the blocking pool (whose failure, a panic or a runtime shutting
/// down, is the `Err`).
async fn placed<T, F>(small: impl FnOnce() -> bool, f: F) -> Result<T, tokio::task::JoinError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    if mounts_all_local() && small() { Ok(f()) } else { tokio::task::spawn_blocking(f).await }
}

/// True when `dir` is on a filesystem kept in memory (tmpfs, ramfs), where an fsync
/// returns at once.
pub(crate) fn in_memory(dir: &std::path::Path) -> bool {
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    const RAMFS_MAGIC: u64 = 0x8584_58f6;
    // f_type is a signed long holding an unsigned magic number: compare the bits.
    rustix::fs::statfs(dir)
        .is_ok_and(|fs| matches!(u64::from_ne_bytes(fs.f_type.to_ne_bytes()), TMPFS_MAGIC | RAMFS_MAGIC))
}

/// True when every filesystem mounted now is in [`LOCAL_TYPES`]; false when that cannot
/// be told (no `/proc`), which sends the work to the blocking pool.
fn mounts_all_local() -> bool {
    static WATCH: OnceLock<Option<Mutex<MountWatch>>> = OnceLock::new();
    let Some(watch) = WATCH.get_or_init(|| MountWatch::open().map(Mutex::new)) else {
        return false;
    };
    watch.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).all_local()
}

/// An open `/proc/self/mountinfo` and what it said last.
struct MountWatch {
    file: File,
    all_local: bool,
}

impl MountWatch {
    fn open() -> Option<MountWatch> {
        let mut watch = MountWatch { file: File::open("/proc/self/mountinfo").ok()?, all_local: false };
        watch.all_local = watch.reread();
        Some(watch)
    }

    fn all_local(&mut self) -> bool {
        let mut fds = [PollFd::new(&self.file, PollFlags::PRI)];
        let changed = match rustix::event::poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })) {
            Ok(0) => false,
            Ok(_) => true,
            Err(_) => return false,
        };
        if changed {
            self.all_local = self.reread();
        }
        self.all_local
    }

    fn reread(&mut self) -> bool {
        let mut table = String::new();
        let read = self.file.seek(SeekFrom::Start(0)).and_then(|_| self.file.read_to_string(&mut table));
        read.is_ok() && all_local(&table)
    }
}

/// True when every line of a `mountinfo` table names a type in [`LOCAL_TYPES`].
fn all_local(table: &str) -> bool {
    table.lines().all(|line| fs_type(line).is_some_and(|t| LOCAL_TYPES.contains(&t)))
}

/// The filesystem type of one `mountinfo` line: the field after the ` - ` separator.
fn fs_type(line: &str) -> Option<&str> {
    let (_, after) = line.split_once(" - ")?;
    after.split(' ').next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_type_is_the_field_after_the_separator() {
        let line = "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue";
        assert_eq!(fs_type(line), Some("ext3"));
        let fuse = "50 30 0:45 / /home/u/x rw,nosuid shared:9 - fuse.sshfs u@h:/ rw,user_id=0";
        assert_eq!(fs_type(fuse), Some("fuse.sshfs"));
        assert_eq!(fs_type("garbage"), None);
    }

    #[test]
    fn one_network_or_fuse_mount_turns_the_verdict() {
        let local = "22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
                     23 22 0:21 / /proc rw - proc proc rw\n\
                     24 22 0:22 / /tmp rw - tmpfs tmpfs rw\n";
        assert!(all_local(local));
        for other in ["fuse.sshfs u@h:/", "nfs4 h:/export", "virtiofs share", "9p host", "autofs systemd-1"] {
            let table = format!("{local}40 22 0:45 / /mnt rw - {other} rw\n");
            assert!(!all_local(&table), "{other} must send file work to the blocking pool");
        }
        assert!(!all_local("a line without a separator\n"), "an unreadable line is not local");
    }

    #[test]
    fn this_machines_table_is_read() {
        // Whatever the verdict, reading the live table and polling it must work.
        let mut watch = MountWatch::open().expect("/proc/self/mountinfo opens");
        let first = watch.all_local;
        assert_eq!(watch.all_local(), first, "nothing was mounted in between");
    }

    #[tokio::test]
    async fn work_placed_by_mounts_returns_its_value_and_passes_a_panic_on() {
        assert_eq!(in_place_unless_remote(|| 41 + 1).await, 42);
        let panicked = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
            in_place_unless_remote(|| -> u32 { panic!("boom") }),
        ))
        .await;
        assert!(panicked.is_err(), "the panic reaches the caller");
    }
}
