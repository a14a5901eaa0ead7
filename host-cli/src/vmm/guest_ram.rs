//! Guest RAM outside the migration stream: copying a stopped VM's RAM into a sparse
//! file (`ram.bin`) and back into a new VM, and handing all-zero pages back to the host.
//!
//! Guest RAM is a shared memfd (`memory-backend-memfd,share=on`: vhost-user needs it
//! shared). QEMU 7.2 loads each zero page of a migration stream by *reading* the
//! destination page first (`buffer_is_zero`), and a read fault on a hole of a shared
//! memfd allocates a page: loading RAM from a stream allocated and zeroed all of guest
//! memory (512 MiB for an 80 MiB stream), and saving read, so allocated, every page of
//! the source. So snapshots set QEMU's `x-ignore-shared` migration capability, which
//! leaves shared RAM blocks out of the stream (see [`super::migrate`]), and sbx copies
//! the memfd itself, through `read(2)` and `pwrite(2)`, which never allocate a hole:
//!
//! - [`save`]: the data of the stopped source's memfd (holes skipped with `SEEK_DATA`)
//!   goes to a sparse file at the same offsets, all-zero pages left out as holes; the
//!   source's all-zero pages are punched out of its memfd on the way, so it stays lean.
//! - [`load`]: the data of that file goes into the new, still stopped VM's memfd; its
//!   holes stay holes.
//! - [`release`]: only the punching, for a VM restored from a stream that held its RAM
//!   (QEMU >= 8.2 ignores only RAM in a named file, and older snapshots).
//!
//! The VM must be stopped and no vhost-user backend attached (the vsock device is
//! unplugged around saves and restores), so nothing writes the memfd meanwhile.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Page size of guest RAM.
const PAGE: usize = 4096;
/// A page of zeros to compare with.
static ZEROS: [u8; PAGE] = [0; PAGE];
/// Bytes read at a time.
const CHUNK: usize = 2 << 20;
/// The name QEMU gives the memfd of a `memory-backend-memfd`.
const MEMFD_NAME: &str = "memory-backend-memfd";

/// Why guest RAM could not be saved, loaded or trimmed.
#[derive(Debug, thiserror::Error)]
pub enum GuestRamError {
    /// QEMU's guest RAM file was not found among its open files.
    #[error("QEMU (pid {0}) has no guest RAM memfd open; did it exit?")]
    NoMemfd(u32),
    /// A RAM file does not fit the VM's RAM.
    #[error("{} holds {file} bytes but the VM has {ram} bytes of RAM; the snapshot is damaged, remove it", path.display())]
    Size {
        /// The file.
        path: PathBuf,
        /// Its length.
        file: u64,
        /// The VM's RAM.
        ram: u64,
    },
    /// Reading, writing or punching failed.
    #[error("could not copy guest RAM to or from {}; check free space", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// What a pass over guest RAM found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pages {
    /// Bytes of pages holding data (copied, when copying).
    pub data: u64,
    /// Bytes of allocated all-zero pages punched out.
    pub zero: u64,
}

/// Copies the RAM of stopped QEMU `pid` into a new sparse file `to` and punches its
/// all-zero pages out of the memfd.
pub fn save(pid: u32, to: &Path) -> Result<Pages, GuestRamError> {
    let (ram, ram_path) = open_memfd(pid)?;
    let out = File::options()
        .write(true)
        .create_new(true)
        .open(to)
        .map_err(|source| GuestRamError::Io { path: to.into(), source })?;
    copy_out(&ram, Some(&out)).map_err(|(at_out, source)| GuestRamError::Io {
        path: if at_out { to.into() } else { ram_path },
        source,
    })
}

/// Punches every all-zero page out of the RAM of stopped QEMU `pid`.
pub fn release(pid: u32) -> Result<Pages, GuestRamError> {
    let (ram, path) = open_memfd(pid)?;
    copy_out(&ram, None).map_err(|(_, source)| GuestRamError::Io { path, source })
}

/// Writes the data of RAM file `from` into the (all-hole) RAM of stopped QEMU `pid`;
/// returns the bytes written.
pub fn load(from: &Path, pid: u32) -> Result<u64, GuestRamError> {
    let (ram, ram_path) = open_memfd(pid)?;
    let io = |path: &Path, source| GuestRamError::Io { path: path.into(), source };
    let src = File::open(from).map_err(|e| io(from, e))?;
    let file = src.metadata().map_err(|e| io(from, e))?.len();
    let size = ram.metadata().map_err(|e| io(&ram_path, e))?.len();
    if file != size {
        return Err(GuestRamError::Size { path: from.into(), file, ram: size });
    }
    copy_in(&src, &ram).map_err(|(at_ram, source)| GuestRamError::Io {
        path: if at_ram { ram_path } else { from.into() },
        source,
    })
}

/// An I/O error, and whether it was the second file's.
type Failed = (bool, std::io::Error);

/// Walks the data of `ram`: all-zero pages are punched out of it; the others are
/// written to `out` (already `ram`'s length, sparse) at their offsets, when given.
fn copy_out(ram: &File, out: Option<&File>) -> Result<Pages, Failed> {
    let len = ram.metadata().map_err(|e| (false, e))?.len();
    if let Some(out) = out {
        out.set_len(len).map_err(|e| (true, e))?;
    }
    let mut pages = Pages::default();
    let mut buf = vec![0u8; CHUNK];
    for_each_chunk(ram, len, &mut buf, |at, chunk| {
        for (zero, start, n) in runs(chunk) {
            let (off, n64) = (at + start as u64, n as u64);
            if zero {
                punch(ram, off, n64).map_err(|e| (false, e))?;
                pages.zero += n64;
            } else {
                if let Some(out) = out {
                    out.write_all_at(&chunk[start..start + n], off).map_err(|e| (true, e))?;
                }
                pages.data += n64;
            }
        }
        Ok(())
    })?;
    if let Some(out) = out {
        out.sync_data().map_err(|e| (true, e))?;
    }
    Ok(pages)
}

/// Writes the non-zero pages of `src` into `ram` at their offsets.
fn copy_in(src: &File, ram: &File) -> Result<u64, Failed> {
    let len = src.metadata().map_err(|e| (false, e))?.len();
    let mut written = 0;
    let mut buf = vec![0u8; CHUNK];
    for_each_chunk(src, len, &mut buf, |at, chunk| {
        // A file system without SEEK_DATA reports all of it as data: zero pages are
        // skipped here too, so that they stay holes in guest RAM.
        for (_, start, n) in runs(chunk).filter(|(zero, ..)| !zero) {
            ram.write_all_at(&chunk[start..start + n], at + start as u64).map_err(|e| (true, e))?;
            written += n as u64;
        }
        Ok(())
    })?;
    Ok(written)
}

/// Calls `each(offset, bytes)` for the data of `file` (its first `len` bytes), chunk by
/// chunk, skipping holes.
fn for_each_chunk(
    file: &File,
    len: u64,
    buf: &mut [u8],
    mut each: impl FnMut(u64, &[u8]) -> Result<(), Failed>,
) -> Result<(), Failed> {
    let mut at = 0;
    while let Some((start, end)) = next_data(file, at, len).map_err(|e| (false, e))? {
        at = start;
        while at < end {
            let want = usize::try_from(end - at).unwrap_or(usize::MAX).min(buf.len());
            let n = read_full_at(file, &mut buf[..want], at).map_err(|e| (false, e))?;
            if n == 0 {
                return Ok(());
            }
            each(at, &buf[..n])?;
            at += n as u64;
        }
    }
    Ok(())
}

/// The next extent of data at or after `from`, as `(start, end)`; the rest of the file
/// when the file system cannot tell holes.
fn next_data(file: &File, from: u64, len: u64) -> std::io::Result<Option<(u64, u64)>> {
    use rustix::fs::{SeekFrom, seek};
    if from >= len {
        return Ok(None);
    }
    let start = match seek(file, SeekFrom::Data(from)) {
        Ok(start) => start,
        Err(rustix::io::Errno::NXIO) => return Ok(None),
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP) => return Ok(Some((from, len))),
        Err(e) => return Err(e.into()),
    };
    let end = seek(file, SeekFrom::Hole(start)).map_err(std::io::Error::from)?;
    Ok(Some((start, end.min(len))))
}

/// The runs of `chunk` (whose length is a multiple of [`PAGE`], but for a file's tail)
/// as `(all zero, start, length)`, consecutive pages of one kind merged.
fn runs(chunk: &[u8]) -> impl Iterator<Item = (bool, usize, usize)> + '_ {
    let mut pages = chunk.chunks(PAGE).enumerate().peekable();
    std::iter::from_fn(move || {
        let (i, page) = pages.next()?;
        // A slice comparison is a memcmp, fast in any build.
        let zero = page == &ZEROS[..page.len()];
        let mut n = page.len();
        while let Some((_, next)) = pages.next_if(|(_, p)| (*p == &ZEROS[..p.len()]) == zero) {
            n += next.len();
        }
        Some((zero, i * PAGE, n))
    })
}

fn punch(file: &File, start: u64, len: u64) -> std::io::Result<()> {
    use rustix::fs::FallocateFlags;
    rustix::fs::fallocate(file, FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE, start, len)
        .map_err(std::io::Error::from)
}

fn read_full_at(file: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], at + filled as u64)? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// Opens QEMU's guest RAM memfd (sbx gives a VM exactly one) for reading and writing.
fn open_memfd(pid: u32) -> Result<(File, PathBuf), GuestRamError> {
    let path = memfd_of(pid).ok_or(GuestRamError::NoMemfd(pid))?;
    let file = File::options()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|source| GuestRamError::Io { path: path.clone(), source })?;
    Ok((file, path))
}

/// `/proc/<pid>/fd/<n>` of QEMU's guest RAM memfd.
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
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// The tests find their memfd by name in this process, so they take turns.
    static ONE_MEMFD: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A memfd named as QEMU's, 16 pages long: data in pages 3 and 7 (and 8), zero
    /// pages written (allocated) in 0-2 and 9, holes elsewhere.
    fn guest_ram() -> (File, Vec<u8>) {
        let fd = rustix::fs::memfd_create(MEMFD_NAME, rustix::fs::MemfdFlags::empty()).unwrap();
        let file = File::from(fd);
        let mut data = vec![0u8; 16 * PAGE];
        data[PAGE * 3] = 1;
        data[PAGE * 7 + 5] = 2;
        data[PAGE * 9 - 1] = 3;
        file.set_len(data.len() as u64).unwrap();
        file.write_all_at(&data[..3 * PAGE], 0).unwrap();
        file.write_all_at(&data[3 * PAGE..4 * PAGE], 3 * PAGE as u64).unwrap();
        file.write_all_at(&data[7 * PAGE..10 * PAGE], 7 * PAGE as u64).unwrap();
        assert_eq!(allocated(&file), 7 * PAGE as u64);
        (file, data)
    }

    fn allocated(file: &File) -> u64 {
        file.metadata().unwrap().blocks() * 512
    }

    fn contents(file: &File) -> Vec<u8> {
        let mut back = vec![0u8; usize::try_from(file.metadata().unwrap().len()).unwrap()];
        file.read_exact_at(&mut back, 0).unwrap();
        back
    }

    #[test]
    fn runs_merge_pages_of_one_kind() {
        let mut chunk = vec![0u8; 5 * PAGE + 10];
        chunk[PAGE] = 1;
        chunk[2 * PAGE + 1] = 1;
        let got: Vec<_> = runs(&chunk).collect();
        assert_eq!(got, [(true, 0, PAGE), (false, PAGE, 2 * PAGE), (true, 3 * PAGE, 2 * PAGE + 10)]);
    }

    #[test]
    fn save_copies_data_pages_sparsely_and_trims_the_source_and_load_puts_them_back() {
        let _turn = ONE_MEMFD.lock().unwrap_or_else(|e| e.into_inner());
        let (ram, data) = guest_ram();
        let pid = std::process::id();
        assert!(memfd_of(pid).expect("our memfd").starts_with(format!("/proc/{pid}/fd")));
        let dir = tempfile::tempdir().unwrap();
        let saved = dir.path().join("ram.bin");
        let pages = save(pid, &saved).unwrap();
        assert_eq!(pages, Pages { data: 3 * PAGE as u64, zero: 4 * PAGE as u64 });
        assert_eq!(contents(&ram), data, "the source's contents are unchanged");
        assert_eq!(allocated(&ram), 3 * PAGE as u64, "its zero pages were punched out");
        let file = File::open(&saved).unwrap();
        assert_eq!(contents(&file), data, "data at the right offsets, zeros elsewhere");
        assert_eq!(allocated(&file), 3 * PAGE as u64, "zero pages are holes in the file");
        assert!(save(pid, &saved).is_err(), "an existing file is not overwritten");
        drop(ram);

        // Into a new VM's RAM: holes stay holes.
        let fd = rustix::fs::memfd_create(MEMFD_NAME, rustix::fs::MemfdFlags::empty()).unwrap();
        let fresh = File::from(fd);
        fresh.set_len(data.len() as u64).unwrap();
        assert_eq!(load(&saved, pid).unwrap(), 3 * PAGE as u64);
        assert_eq!(contents(&fresh), data);
        assert_eq!(allocated(&fresh), 3 * PAGE as u64);

        // A file of another length is refused before anything is written.
        let fd = rustix::fs::memfd_create(MEMFD_NAME, rustix::fs::MemfdFlags::empty()).unwrap();
        let other = File::from(fd);
        other.set_len(data.len() as u64).unwrap();
        drop(fresh);
        File::options().write(true).open(&saved).unwrap().set_len(8 * PAGE as u64).unwrap();
        let err = load(&saved, pid).unwrap_err();
        assert!(matches!(err, GuestRamError::Size { file, .. } if file == 8 * PAGE as u64), "{err}");
        assert_eq!(allocated(&other), 0);
    }

    #[test]
    fn release_punches_only_zero_pages() {
        let _turn = ONE_MEMFD.lock().unwrap_or_else(|e| e.into_inner());
        let (ram, data) = guest_ram();
        let pages = release(std::process::id()).unwrap();
        assert_eq!(pages, Pages { data: 3 * PAGE as u64, zero: 4 * PAGE as u64 });
        assert_eq!(contents(&ram), data, "the contents are unchanged");
        assert_eq!(allocated(&ram), 3 * PAGE as u64);
    }
}
