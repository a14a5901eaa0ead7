//! Handing a restored guest's all-zero pages back to the host.
//!
//! QEMU 7.2 loads each zero page of a migration stream by reading the destination page
//! first, and a read of a hole in guest RAM (a shared memfd: vhost-user needs it shared)
//! allocates it; a restored guest would hold all its memory where a booted one holds what
//! it touched. While the restored VM is still stopped, before any backend maps its RAM,
//! its pages that are all zero are punched out of the memfd; reading a hole through
//! `read(2)` allocates nothing.

use std::io::Read;
use std::path::PathBuf;

/// Page size of guest RAM.
const PAGE: usize = 4096;
/// A page of zeros to compare with.
static ZEROS: [u8; PAGE] = [0; PAGE];
/// Bytes read at a time.
const CHUNK: usize = 2 << 20;

/// Why the zero pages could not be released.
#[derive(Debug, thiserror::Error)]
pub enum ZeroPagesError {
    /// QEMU's guest RAM file was not found among its open files.
    #[error("QEMU (pid {0}) has no guest RAM memfd open")]
    NoMemfd(u32),
    /// Reading or punching failed.
    #[error("could not release the zero pages of {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// Punches every all-zero page out of the guest RAM of stopped QEMU `pid`; returns the
/// bytes released.
pub fn release(pid: u32) -> Result<u64, ZeroPagesError> {
    let path = memfd_of(pid).ok_or(ZeroPagesError::NoMemfd(pid))?;
    let io = |source| ZeroPagesError::Io { path: path.clone(), source };
    let mut file = std::fs::OpenOptions::new().read(true).write(true).open(&path).map_err(io)?;
    let mut buf = vec![0u8; CHUNK];
    let mut offset = 0u64;
    let mut released = 0u64;
    // A run of zero pages not yet punched: (start, length).
    let mut run: Option<(u64, u64)> = None;
    loop {
        let n = read_full(&mut file, &mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        for (i, page) in buf[..n].chunks(PAGE).enumerate() {
            let at = offset + (i * PAGE) as u64;
            // A slice comparison is a memcmp, fast in any build.
            if page == &ZEROS[..page.len()] {
                run = Some(match run {
                    Some((start, len)) => (start, len + page.len() as u64),
                    None => (at, page.len() as u64),
                });
            } else if let Some((start, len)) = run.take() {
                punch(&file, start, len).map_err(io)?;
                released += len;
            }
        }
        offset += n as u64;
    }
    if let Some((start, len)) = run {
        punch(&file, start, len).map_err(io)?;
        released += len;
    }
    Ok(released)
}

fn punch(file: &std::fs::File, start: u64, len: u64) -> std::io::Result<()> {
    use rustix::fs::FallocateFlags;
    rustix::fs::fallocate(file, FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE, start, len)
        .map_err(std::io::Error::from)
}

fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// The name QEMU gives the memfd of a `memory-backend-memfd`.
const MEMFD_NAME: &str = "memory-backend-memfd";

/// `/proc/<pid>/fd/<n>` of QEMU's guest RAM memfd (sbx gives a VM exactly one).
fn memfd_of(pid: u32) -> Option<PathBuf> {
    let link = format!("/memfd:{MEMFD_NAME} ");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::read_link(p).is_ok_and(|t| t.to_string_lossy().starts_with(&link)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn punches_only_zero_pages() {
        let fd = rustix::fs::memfd_create(MEMFD_NAME, rustix::fs::MemfdFlags::empty()).unwrap();
        let mut file = std::fs::File::from(fd);
        let mut data = vec![0u8; 8 * PAGE];
        data[PAGE * 3] = 1;
        data[PAGE * 7 + 5] = 2;
        std::io::Write::write_all(&mut file, &data).unwrap();
        let pid = std::process::id();
        let path = memfd_of(pid).expect("our memfd");
        assert!(path.starts_with(format!("/proc/{pid}/fd")));
        let released = release(pid).unwrap();
        assert_eq!(released, 6 * PAGE as u64);
        let mut back = Vec::new();
        std::fs::File::open(&path).unwrap().read_to_end(&mut back).unwrap();
        assert_eq!(back, data, "the contents are unchanged");
        use std::os::unix::fs::MetadataExt;
        assert_eq!(file.metadata().unwrap().blocks() * 512, 2 * PAGE as u64, "two pages stay allocated");
    }
}
