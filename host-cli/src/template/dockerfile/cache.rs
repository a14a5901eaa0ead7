//! The Dockerfile step cache: the build VM's disk after a RUN, COPY, ADD or WORKDIR,
//! kept so an unchanged Dockerfile rebuilds without booting anything and a changed one
//! reruns only from the first changed step.
//!
//! **Keys.** The base's key hashes what the build starts from: the FROM image's
//! manifest digest with the agent and kernel baked with it and the disk size, or an
//! installed template's `template.json` and its image's size, inode and mtime; and
//! the MCP identity building (builds of different clients never share entries). Each
//! step's key hashes its parent's key, the instruction after ARG/ENV expansion, the
//! ENV, ARG, WORKDIR and USER in force, and for COPY/ADD every source file's path,
//! mode, owner and SHA-256 of its content. A change in a step changes its key and
//! every later one.
//!
//! **Entries.** `images/steps/KEY/` (beside the image blobs) is a template directory
//! (`template.json`, kernel, `rootfs.ext4` flattened by `qemu-img convert`) plus
//! `entry.json`, which records the key and the SHA-256 of the image's contents (its
//! length and every non-zero 64 KiB chunk with its offset, so holes cost nothing). An
//! entry is written in a staging directory and renamed into place, so a reader sees a
//! whole entry or none. It is verified each time it is used: the image is copied out
//! (sparse, a reflink where the filesystem has them) and the copy's digest compared;
//! a mismatch removes the entry and the build goes on from an earlier one, never
//! from it. `atoll image prune` removes every entry. The entries count in the snapshot
//! quota ([`crate::sandbox::quota::snapshot_bytes`]): an entry is kept, and one is
//! installed as a template, only within it.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::context::{self, SourceError};
use super::parse::Instruction;
use crate::template::bake::{self, Staging};
use crate::vmm::dirs;
use crate::vmm::state::StateLock;

/// Bumped when what a key covers or an entry holds changes.
const VERSION: &[u8] = b"atoll-dockerfile-step-cache-1";
/// The chunk the image digest hashes (zero chunks are skipped).
const CHUNK: usize = 1 << 16;
/// The largest `entry.json` read.
const MAX_ENTRY_JSON: u64 = 4096;

/// Where the entries are.
pub fn root() -> Result<PathBuf, dirs::DirsError> {
    Ok(dirs::data_dir()?.join("images/steps"))
}

/// Whether a step changes the build VM's disk (a cache entry is kept after it).
pub(super) fn checkpoint(i: &Instruction) -> bool {
    matches!(i, Instruction::Run(_) | Instruction::Copy { .. } | Instruction::Workdir(_))
}

/// A SHA-256 fed with length-prefixed fields (no two field lists hash alike).
pub(super) struct Key(Sha256);

impl Key {
    pub(super) fn new(kind: &str) -> Key {
        let mut k = Key(Sha256::new());
        k.field(VERSION);
        k.field(kind.as_bytes());
        k
    }

    pub(super) fn field(&mut self, bytes: &[u8]) -> &mut Key {
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    /// A file's size, inode and mtime (for files too large to hash at every build).
    pub(super) fn file_stamp(&mut self, path: &Path) -> &mut Key {
        match std::fs::metadata(path) {
            Ok(m) => {
                self.field(format!("{} {} {} {}", m.len(), m.ino(), m.mtime(), m.mtime_nsec()).as_bytes())
            }
            Err(_) => self.field(b"missing"),
        }
    }

    pub(super) fn finish(self) -> String {
        format!("{:x}", self.0.finalize())
    }
}

/// The key of a step with parent key `parent`; `state` is the ENV/ARG/WORKDIR/USER in
/// force, `sources` the digest of a COPY/ADD's files.
pub(super) fn step_key(
    parent: &str,
    instruction: &Instruction,
    state: &str,
    sources: Option<&str>,
) -> String {
    let mut k = Key::new("step");
    k.field(parent.as_bytes())
        .field(format!("{instruction:?}").as_bytes())
        .field(state.as_bytes())
        .field(sources.unwrap_or("").as_bytes());
    k.finish()
}

/// The digest of COPY/ADD sources: every file's and directory's path, mode, owner and
/// content, in a fixed order.
pub(super) fn sources_digest(context_dir: &Path, sources: &[String]) -> Result<String, SourceError> {
    let mut k = Key::new("sources");
    let one = |k: &mut Key, shown: &str, real: &Path, is_dir: bool| -> Result<(), SourceError> {
        let io = |source| SourceError::Io { path: shown.to_owned(), source };
        let m = std::fs::metadata(real).map_err(io)?;
        k.field(shown.as_bytes())
            .field(format!("{:o} {} {} {is_dir}", m.mode(), m.uid(), m.gid()).as_bytes());
        if !is_dir {
            let mut h = Sha256::new();
            io::copy(&mut File::open(real).map_err(io)?, &mut h).map_err(io)?;
            k.field(&h.finalize());
        }
        Ok(())
    };
    for s in sources {
        let path = context::resolve(context_dir, s)?;
        k.field(s.as_bytes());
        if path.is_dir() {
            context::walk(context_dir, &path, s, &mut |rel, real, is_dir| {
                one(&mut k, &rel.to_string_lossy(), real, is_dir)
            })?;
        } else {
            one(&mut k, s, &path, false)?;
        }
    }
    Ok(k.finish())
}

/// What `entry.json` holds.
#[derive(Debug, Serialize, Deserialize)]
struct EntryFile {
    key: String,
    rootfs_digest: String,
}

/// Why a cache entry could not be used.
#[derive(Debug, thiserror::Error)]
pub(super) enum CacheError {
    /// The entry does not match what it recorded (it was removed).
    #[error("the cached result of this step is corrupt ({0}); it was removed and the step runs again")]
    Corrupt(String),
    /// Reading or writing failed.
    #[error("{0}")]
    Io(String),
}

/// The entry directory of `key`, when one is there (not yet verified).
pub(super) fn lookup(key: &str) -> Option<PathBuf> {
    let dir = root().ok()?.join(key);
    dir.join("entry.json").is_file().then_some(dir)
}

/// Keeps the template directory `saved` (a step's disk, just saved from the build VM)
/// as the entry of `key`; `saved` is moved, or removed when keeping fails or the future
/// is dropped first.
pub(super) async fn store(key: &str, saved: &Path) -> Result<(), CacheError> {
    let mut pending = RemoveOnDrop(Some(saved));
    let root = root().map_err(|e| CacheError::Io(e.to_string()))?;
    std::fs::create_dir_all(&root).map_err(|e| CacheError::Io(format!("{}: {e}", root.display())))?;
    let rootfs_digest = disk_digest(&saved.join("rootfs.ext4"))
        .map_err(|e| CacheError::Io(format!("hashing the disk: {e}")))?;
    let json = serde_json::to_vec_pretty(&EntryFile { key: key.to_owned(), rootfs_digest })
        .map_err(|e| CacheError::Io(e.to_string()))?;
    bake::write_file(&saved.join("entry.json"), &json, 0o644).map_err(|e| CacheError::Io(e.to_string()))?;
    let dest = root.join(key);
    // `saved` (a template directory) is counted already: what is stored now must be
    // within the snapshot quota, and stays so while the entry moves under the lock.
    let _lock = check_snapshot_locked(0).await?;
    // An entry already there (another build's, or a corrupt one) is replaced.
    let _ = std::fs::remove_dir_all(&dest);
    std::fs::rename(saved, &dest).map_err(|e| CacheError::Io(format!("{}: {e}", dest.display())))?;
    pending.0 = None;
    Ok(())
}

/// Removes the directory it holds when dropped.
struct RemoveOnDrop<'a>(Option<&'a Path>);

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(dir) = self.0 {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// [`crate::sandbox::quota::check_snapshot_locked_async`], its error this module's.
async fn check_snapshot_locked(need: u64) -> Result<StateLock, CacheError> {
    crate::sandbox::quota::check_snapshot_locked_async(need).await.map_err(CacheError::Io)
}

/// Installs entry `entry` as template directory `dest` (replacing one there, unless a
/// sandbox uses it), verifying the copy; a corrupt entry is removed and nothing is
/// installed.
pub(super) async fn install(entry: &Path, dest: &Path) -> Result<(), CacheError> {
    let io = |e: &dyn std::fmt::Display| CacheError::Io(format!("installing the cached result: {e}"));
    let corrupt = |why: String| {
        let _ = std::fs::remove_dir_all(entry);
        CacheError::Corrupt(why)
    };
    let recorded: EntryFile = match read_small(&entry.join("entry.json")).map(|b| serde_json::from_slice(&b))
    {
        Ok(Ok(e)) => e,
        Ok(Err(e)) => return Err(corrupt(format!("entry.json: {e}"))),
        Err(e) => return Err(corrupt(format!("entry.json: {e}"))),
    };
    if entry.file_name().and_then(|n| n.to_str()) != Some(recorded.key.as_str()) {
        return Err(corrupt("entry.json names another key".into()));
    }
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let parent = dest.parent().ok_or_else(|| io(&"no parent directory"))?;
    let stage =
        Staging::new(parent.join(format!(".{name}.cached-{}", std::process::id()))).map_err(|e| io(&e))?;
    let text = match read_small(&entry.join("template.json")) {
        Ok(t) => t,
        Err(e) => return Err(corrupt(format!("template.json: {e}"))),
    };
    let mut file: crate::vmm::template::TemplateFile = match serde_json::from_slice(&text) {
        Ok(f) => f,
        Err(e) => return Err(corrupt(format!("template.json: {e}"))),
    };
    if file.rootfs.as_deref() != Some("rootfs.ext4") {
        return Err(corrupt("template.json names no rootfs.ext4".into()));
    }
    for rel in [Some(&file.kernel), file.initrd.as_ref()].into_iter().flatten() {
        let plain = Path::new(rel).components().count() == 1 && !rel.starts_with('.');
        if !plain || !entry.join(rel).is_file() {
            return Err(corrupt(format!("its kernel file `{rel}` is missing")));
        }
        bake::link_or_copy(&entry.join(rel), &stage.path.join(rel)).map_err(|e| io(&e))?;
    }
    // The copy may take the entry's blocks again (no reflinks): refused at once when
    // that would pass the snapshot quota.
    let need = std::fs::metadata(entry.join("rootfs.ext4")).map_or(0, |m| m.blocks() * 512);
    drop(check_snapshot_locked(need).await?);
    let image = stage.path.join("rootfs.ext4");
    let cp = crate::template::tools::output(
        std::process::Command::new("cp")
            .args(["--sparse=always", "--reflink=auto", "--"])
            .arg(entry.join("rootfs.ext4"))
            .arg(&image)
            .stdin(std::process::Stdio::null()),
    )
    .map_err(|e| io(&e))?;
    if !cp.status.success() {
        if !entry.join("rootfs.ext4").is_file() {
            return Err(corrupt("its disk image is missing".into()));
        }
        return Err(io(&String::from_utf8_lossy(&cp.stderr).trim()));
    }
    let digest = disk_digest(&image).map_err(|e| io(&e))?;
    if digest != recorded.rootfs_digest {
        return Err(corrupt("its disk image does not match the digest recorded with it".into()));
    }
    file.name = name;
    let json = serde_json::to_string_pretty(&file).map_err(|e| io(&e))?;
    bake::write_file(&stage.path.join("template.json"), json.as_bytes(), 0o644).map_err(|e| io(&e))?;
    // The staged copy is counted now (it is beside the templates): checked again, and
    // committed under the lock, so two installs cannot both slip under the quota.
    let _lock = check_snapshot_locked(0).await?;
    stage.commit(dest).map_err(|e| io(&e))
}

fn read_small(path: &Path) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)?.take(MAX_ENTRY_JSON * 16).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The SHA-256 of a disk image's contents: its length, then each non-zero 64 KiB
/// chunk with its offset. Only the data regions are read (SEEK_DATA), and the result
/// does not depend on where the file has holes.
pub fn disk_digest(path: &Path) -> io::Result<String> {
    use rustix::fs::{SeekFrom as At, seek};
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    let mut h = Sha256::new();
    h.update(len.to_le_bytes());
    let mut buf = vec![0u8; CHUNK];
    let chunk = CHUNK as u64;
    let mut next = 0u64;
    while next < len {
        let data = match seek(&f, At::Data(next)) {
            Ok(d) => d,
            Err(rustix::io::Errno::NXIO) => break,
            Err(e) => return Err(e.into()),
        };
        let hole = seek(&f, At::Hole(data))?.min(len);
        let mut off = (data - data % chunk).max(next);
        while off < hole {
            f.seek(SeekFrom::Start(off))?;
            let want = usize::try_from(len - off).map_or(CHUNK, |left| left.min(CHUNK));
            f.read_exact(&mut buf[..want])?;
            if buf[..want].iter().any(|&b| b != 0) {
                h.update(off.to_le_bytes());
                h.update(&buf[..want]);
            }
            off += chunk;
        }
        next = off;
    }
    Ok(format!("{:x}", h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn the_disk_digest_sees_content_not_holes() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        let mut f = File::create(&a).unwrap();
        f.set_len(10 << 20).unwrap();
        f.seek(SeekFrom::Start(3 << 20)).unwrap();
        f.write_all(b"data").unwrap();
        // The same bytes, written out in full (no holes).
        let mut full = vec![0u8; 10 << 20];
        full[3 << 20..(3 << 20) + 4].copy_from_slice(b"data");
        std::fs::write(&b, &full).unwrap();
        assert_eq!(disk_digest(&a).unwrap(), disk_digest(&b).unwrap());
        full[0] = 1;
        std::fs::write(&b, &full).unwrap();
        assert_ne!(disk_digest(&a).unwrap(), disk_digest(&b).unwrap());
        let before = disk_digest(&a).unwrap();
        f.set_len(11 << 20).unwrap();
        assert_ne!(before, disk_digest(&a).unwrap(), "the length counts");
    }

    #[test]
    fn a_source_change_changes_the_digest() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("t/s")).unwrap();
        std::fs::write(d.path().join("t/s/f"), "one").unwrap();
        let ctx = d.path().canonicalize().unwrap();
        let first = sources_digest(&ctx, &["t".into()]).unwrap();
        assert_eq!(first, sources_digest(&ctx, &["t".into()]).unwrap());
        std::fs::write(d.path().join("t/s/f"), "two").unwrap();
        let second = sources_digest(&ctx, &["t".into()]).unwrap();
        assert_ne!(first, second);
        std::fs::set_permissions(d.path().join("t/s/f"), std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        assert_ne!(second, sources_digest(&ctx, &["t".into()]).unwrap(), "the mode counts");
    }
}
