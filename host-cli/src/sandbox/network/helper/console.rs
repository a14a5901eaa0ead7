//! QEMU's two logs, written by the helper alone and kept under a bound: the guest's
//! serial console (`vm/console.log`), which QEMU sends to `vm/wire/tty.sock`
//! (`-chardev socket,server=off`), and QEMU's own stderr (`qemu.log`, bwrap's too), a
//! stream atoll connects to `net/stderr.sock` and hands to them.
//!
//! QEMU writes neither file, so nothing bounds them but this writer, and nothing grows
//! them when it is gone: a helper that died (a hostile guest crashed its network stack,
//! say) leaves QEMU's console socket disconnected, and QEMU drops what the guest writes
//! to `/dev/ttyS0`; its stderr then fails with `EPIPE` (QEMU ignores `SIGPIPE`).
//! While the helper lives, a guest writing faster than it keeps up only fills the
//! socket's buffer: QEMU's UART then holds the byte and the guest waits for it.
//!
//! Each file is appended to as bytes come in (each read written at once, so that atoll
//! reads QEMU's last words as soon as the stream ended) and, once over [`MAX_BYTES`],
//! cut to its last [`KEEP_BYTES`] (rounded to whole file-system blocks):
//! `FALLOC_FL_COLLAPSE_RANGE` drops the head in place (ext4, xfs); where the file system
//! cannot, the tail is written back over a truncated file. Neither file ever holds more
//! than [`MAX_BYTES`] plus one read ([`READ_BYTES`]).

use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::UnixListener;

/// The size past which a log is cut.
pub const MAX_BYTES: u64 = 1 << 20;
/// What is kept of it (the end): what `atoll` shows when a boot fails.
pub const KEEP_BYTES: u64 = 256 << 10;
/// The most one read takes from a stream before it is written.
pub const READ_BYTES: usize = 64 << 10;
/// Streams written at once to one log: QEMU's one, and room for a restart's overlap.
/// Others are closed at once (only QEMU's group, and atoll, can connect).
const STREAMS: usize = 4;

/// Serves the two logs of the sandbox in `dir` on their listening sockets, forever
/// (the helper's lifetime).
pub async fn serve(dir: &Path, console: UnixListener, stderr: UnixListener) {
    let paths = crate::vmm::state::Paths::in_dir(dir, false);
    tokio::join!(accept(console, paths.console_log), accept(stderr, paths.qemu_log));
}

/// Accepts writers of the log at `path`; each is copied to it on a thread of its own
/// until it ends, then closed (which is how atoll knows all it said is in the file).
async fn accept(listener: UnixListener, path: PathBuf) {
    let slots = Arc::new(tokio::sync::Semaphore::new(STREAMS));
    let path = Arc::new(path);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::debug!("{}: accept failed: {e}", path.display());
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!("{}: too many writers; one refused", path.display());
            continue;
        };
        let stream = match stream.into_std().and_then(|s| s.set_nonblocking(false).map(|()| s)) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("{}: {e}", path.display());
                continue;
            }
        };
        let path = Arc::clone(&path);
        let name = path.display().to_string();
        // A thread, not the runtime's blocking pool: the helper's exit must not wait for
        // a writer that is still connected.
        let spawned = std::thread::Builder::new().name("log".into()).spawn(move || {
            if let Err(e) = copy(stream, &path) {
                tracing::debug!("{}: {e}", path.display());
            }
            drop(slot);
        });
        if let Err(e) = spawned {
            tracing::warn!("could not start a thread for {name}: {e}");
        }
    }
}

/// Copies `from` to the log at `path` until `from` ends, each read written at once.
fn copy(mut from: std::os::unix::net::UnixStream, path: &Path) -> io::Result<()> {
    let mut log = Ring::open(path)?;
    let mut buf = vec![0u8; READ_BYTES];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        log.append(&buf[..n])?;
    }
}

/// A log file of bounded size, appended to.
#[derive(Debug)]
pub struct Ring {
    file: std::fs::File,
}

impl Ring {
    /// Opens the log at `path` (made by atoll before the helper starts) to append. A
    /// link, or a file with other names, is refused.
    pub fn open(path: &Path) -> io::Result<Ring> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits().cast_signed())
            .open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() || meta.nlink() != 1 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a plain file with one name"));
        }
        Ok(Ring { file })
    }

    /// Appends `bytes`, then cuts the file to its end if it is over [`MAX_BYTES`].
    pub fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)?;
        trim(&self.file, MAX_BYTES, KEEP_BYTES).map(drop)
    }
}

/// Cuts `f` to about its last `keep` bytes if it is over `max`. Returns whether it cut.
fn trim(f: &std::fs::File, max: u64, keep: u64) -> io::Result<bool> {
    let meta = f.metadata()?;
    let len = meta.len();
    if len <= max {
        return Ok(false);
    }
    let block = meta.blksize().max(512);
    let cut = (len - keep.min(len)) / block * block;
    if cut == 0 {
        return Ok(false);
    }
    match rustix::fs::fallocate(f, rustix::fs::FallocateFlags::COLLAPSE_RANGE, 0, cut) {
        Ok(()) => Ok(true),
        Err(_) => {
            let mut tail = vec![0u8; usize::try_from(len - cut).unwrap_or(usize::MAX)];
            f.read_exact_at(&mut tail, cut)?;
            f.set_len(0)?;
            // Opened to append: this lands at the (new) end, which is the start.
            (&*f).write_all(&tail)?;
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::network::config;

    #[test]
    fn a_log_over_its_bound_keeps_its_end() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("console.log");
        std::fs::write(&path, b"").unwrap();
        let text: Vec<u8> = (0..3 * MAX_BYTES).map(|i| b'a' + (i % 26) as u8).collect();
        let mut ring = Ring::open(&path).unwrap();
        let mut largest = 0;
        for chunk in text.chunks(READ_BYTES - 7) {
            ring.append(chunk).unwrap();
            largest = largest.max(std::fs::metadata(&path).unwrap().len());
        }
        assert!(largest <= MAX_BYTES + READ_BYTES as u64, "{largest}");
        let kept = std::fs::read(&path).unwrap();
        assert!(kept.len() as u64 >= KEEP_BYTES && kept.len() as u64 <= MAX_BYTES, "{}", kept.len());
        assert!(text.ends_with(&kept), "the end is kept, in order");
        ring.append(b"NEXT").unwrap();
        assert!(std::fs::read(&path).unwrap().ends_with(b"NEXT"), "appends go on after the kept tail");

        let link = d.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(Ring::open(&link).is_err(), "a link is refused");
        std::fs::hard_link(&path, d.path().join("other")).unwrap();
        assert!(Ring::open(&path).is_err(), "a file with another name is refused");
    }

    /// A writer's bytes are in the file once the helper closed its stream, which is
    /// what atoll waits for before it reads QEMU's last words.
    #[tokio::test]
    async fn a_stream_is_closed_once_written() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("abc");
        std::fs::create_dir_all(dir.join("vm/wire")).unwrap();
        std::fs::create_dir_all(dir.join("net")).unwrap();
        let paths = crate::vmm::state::Paths::in_dir(&dir, false);
        std::fs::write(&paths.qemu_log, b"old\n").unwrap();
        std::fs::write(&paths.console_log, b"").unwrap();
        let console = UnixListener::bind(config::console_socket_path(&dir)).unwrap();
        let stderr = UnixListener::bind(config::stderr_socket_path(&dir)).unwrap();
        let served = tokio::spawn({
            let dir = dir.clone();
            async move { serve(&dir, console, stderr).await }
        });
        let path = config::stderr_socket_path(&dir);
        let qemu_log = paths.qemu_log.clone();
        tokio::task::spawn_blocking(move || {
            let mut s = std::os::unix::net::UnixStream::connect(path).unwrap();
            s.write_all(b"qemu: could not open the kernel\n").unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty());
            assert_eq!(std::fs::read_to_string(qemu_log).unwrap(), "old\nqemu: could not open the kernel\n");
        })
        .await
        .unwrap();
        served.abort();
    }
}
