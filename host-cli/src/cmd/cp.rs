//! `atoll cp SRC DST` in both directions, and `atoll download DIR -o out.zip`.
//!
//! Files stream in chunks (a progress bar on a terminal) and land atomically on both
//! sides: the agent writes a temp file and renames it; here we write an unnamed file in
//! the destination's folder and name it at the end (`staging`). Directories travel as
//! zip archives: host to guest we zip into a temp file and upload it for the agent to
//! extract; guest to host we download the zip into an unnamed file and extract it into a
//! locked staging directory that is renamed into place, so a refused or failed archive
//! leaves nothing behind, and one killed outright leaves a staging directory that the
//! next copy into that folder (of a file or a folder, or a `download -o`) removes.
//!
//! Like `cp`, a copy is not flushed to disk unless asked: `--sync` fsyncs the
//! destination (a file, or with syncfs the filesystem a directory was extracted to)
//! before `atoll cp` returns, on whichever side it lands.

use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use bytes::Bytes;
use futures::StreamExt;
use indicatif::ProgressBar;
use serde::Serialize;
use tokio::io::AsyncWriteExt;

use super::Ctx;
use super::UsageError;
use super::file_sink::FileSink;
use super::location::Location;
use super::staging::{self, StagedFile, StagingDir};
use crate::archive::{self, ArchiveStats};
use crate::cli::{CpArgs, DownloadArgs};
use crate::client::{ArchivePart, ArchiveSummary, Client, ClientError, FileKind, ReadOpts, WriteOpts};

/// What a copy did, for `--json` and the human summary.
#[derive(Debug, Serialize)]
struct Copied {
    from: String,
    to: String,
    kind: &'static str,
    bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    files: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    skipped: Vec<String>,
}

/// `atoll cp`.
pub(super) async fn cp(ctx: &Ctx, args: CpArgs) -> Result<u8> {
    let copied = match (Location::parse(&args.src), Location::parse(&args.dst)) {
        (Location::Host(_), Location::Host(_)) => {
            return Err(UsageError(format!(
                "both `{}` and `{}` are host paths; write the guest side as :/path (or NAME:/path)",
                args.src, args.dst
            ))
            .into());
        }
        (Location::Guest { .. }, Location::Guest { .. }) => {
            return Err(UsageError(
                "copying from guest to guest is not supported; copy to the host first".to_string(),
            )
            .into());
        }
        (Location::Host(src), Location::Guest { sandbox, path }) => {
            let client = ctx.client_for(sandbox.as_deref()).await?;
            upload(ctx, &client, &src, &path, args.sync).await?
        }
        (Location::Guest { sandbox, path }, Location::Host(dst)) => {
            let client = ctx.client_for(sandbox.as_deref()).await?.with_idle_timeout(args.idle_timeout);
            let limits =
                archive::UnpackLimits { max_entries: args.max_entries, max_bytes: args.max_unpacked_bytes };
            download_any(ctx, &client, &path, &dst, args.sync, limits).await?
        }
    };
    if ctx.out.json {
        ctx.out.json(&copied)?;
    } else if std::io::stderr().is_terminal() {
        eprintln!("copied {} ({} bytes) to {}", copied.from, copied.bytes, copied.to);
    }
    for s in &copied.skipped {
        tracing::warn!("left out {s}: not a regular file or directory");
    }
    Ok(0)
}

fn base_name(path: &str) -> Option<&str> {
    path.trim_end_matches('/').rsplit('/').next().filter(|n| !n.is_empty() && *n != "." && *n != "..")
}

fn guest_join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

/// Host to guest: a file is streamed, a directory zipped and extracted in the guest.
async fn upload(ctx: &Ctx, client: &Client, src: &Path, dst: &str, sync: bool) -> Result<Copied> {
    let meta = tokio::fs::metadata(src).await.with_context(|| format!("cannot read {}", src.display()))?;
    let name = src.file_name().and_then(|n| n.to_str()).map(str::to_string);
    // Copying into an existing guest directory (or to a path ending in `/`) puts SRC
    // inside it, as cp does.
    // An answer that DST is not there (or not readable) means "copy to that name"; the
    // write then says what is wrong with it. No answer at all (a lost connection) stops
    // the copy rather than guessing.
    let existing = match client.stat(dst).await {
        Ok(e) => Some(e.kind),
        Err(ClientError::Agent { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let target = match (existing, &name) {
        (Some(FileKind::Dir), Some(name)) => guest_join(dst, name),
        (_, Some(name)) if dst.ends_with('/') => guest_join(dst, name),
        _ => dst.to_string(),
    };
    let from = src.display().to_string();
    if meta.is_dir() {
        let dir = src.to_path_buf();
        let (zip, stats) = tokio::task::spawn_blocking(move || -> Result<_> {
            let tmp = tempfile::tempfile().context("could not create a temp file for the zip")?;
            Ok(archive::zip_dir(&dir, tmp)?)
        })
        .await??;
        let bar = ctx.out.progress(Some(zip.metadata()?.len()), "upload");
        let reader = bar.wrap_async_read(tokio::fs::File::from_std(zip));
        let sent = client.upload_dir(&target, sync, reader).await;
        bar.finish_and_clear();
        let sent = sent?;
        return Ok(Copied {
            from,
            to: format!(":{target}"),
            kind: "dir",
            bytes: sent.file_bytes,
            files: Some(sent.files),
            skipped: stats.skipped,
        });
    }
    let file = tokio::fs::File::open(src).await.with_context(|| format!("cannot open {}", src.display()))?;
    let bar = ctx.out.progress(Some(meta.len()), "upload");
    let opts = WriteOpts { mode: Some(meta.permissions().mode() & 0o7777), sync, ..WriteOpts::default() };
    let written = client.write_file(&target, opts, bar.wrap_async_read(file)).await;
    bar.finish_and_clear();
    let written = written?;
    Ok(Copied {
        from,
        to: format!(":{target}"),
        kind: "file",
        bytes: written.bytes_written,
        files: None,
        skipped: vec![],
    })
}

/// Where a guest `src` lands on the host: inside `dst` when it is a directory.
fn host_target(src: &str, dst: &Path) -> PathBuf {
    match base_name(src) {
        Some(name) if dst.is_dir() => dst.join(name),
        _ => dst.to_path_buf(),
    }
}

/// The host folder a copy from a guest lands in, opened once (links the user gave are
/// followed then, never again): checked on that handle not to lie in a folder a sandbox
/// shares read-write (by device and inode of the handle and its ancestors, so another
/// bind mount or alias of a share is refused too), and written through it (`/proc/self/fd/N`), so a link swapped in
/// for a component of its path afterwards changes nothing.
struct HostDir {
    dir: std::os::fd::OwnedFd,
    /// Where it really is, as opened.
    real: PathBuf,
    /// The target's name in it.
    name: std::ffi::OsString,
    /// The target as the user gave it, for messages.
    shown: PathBuf,
}

impl HostDir {
    /// Opens the folder of `target`, refusing one in a read-write share.
    fn open(target: &Path) -> Result<HostDir> {
        let name = target
            .file_name()
            .ok_or_else(|| {
                UsageError(format!("{} names no file; give a file or folder name", target.display()))
            })?
            .to_os_string();
        let parent = parent_of(target);
        let flags = rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC;
        let dir = rustix::fs::open(parent, flags, rustix::fs::Mode::empty())
            .map_err(std::io::Error::from)
            .with_context(|| format!("cannot open the folder {}", parent.display()))?;
        let real = std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&dir)))
            .with_context(|| format!("cannot open the folder {}", parent.display()))?;
        let records: Vec<_> = crate::vmm::dirs::state_dir()
            .map(|state| crate::vmm::state::load_all(&state).into_iter().flatten().collect())
            .unwrap_or_default();
        crate::sandbox::mounts::refuse_staging_in_share(std::os::fd::AsFd::as_fd(&dir), &real, &records)
            .map_err(|e| UsageError(e.to_string()))?;
        Ok(HostDir { dir, real, name, shown: target.to_path_buf() })
    }

    /// Removes the staging folders that copies killed outright left in the folder
    /// ([`staging::remove_stale`] says which), off the async thread.
    async fn tidy(&self) -> Result<()> {
        let dir = self.dir.try_clone().context("cannot reopen the destination's folder")?;
        let real = self.real.clone();
        let removed = tokio::task::spawn_blocking(move || staging::remove_stale(dir.as_fd())).await?;
        if removed > 0 {
            tracing::info!("removed {removed} staging folders that killed copies left in {}", real.display());
        }
        Ok(())
    }

    /// The folder, through its handle.
    fn via(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&self.dir)))
    }
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Guest to host: a file is streamed, a directory downloaded as a zip and extracted.
async fn download_any(
    ctx: &Ctx,
    client: &Client,
    src: &str,
    dst: &Path,
    sync: bool,
    limits: archive::UnpackLimits,
) -> Result<Copied> {
    let entry = client.stat(src).await?;
    let target = host_target(src, dst);
    let to = target.display().to_string();
    // Files and folders are staged beside the target, then renamed into place, in the
    // folder opened once and checked here.
    let parent = HostDir::open(&target)?;
    if entry.kind == FileKind::Dir {
        if target.exists() {
            return Err(UsageError(format!(
                "{to} already exists; remove it or copy to a new path (directories are not merged)"
            ))
            .into());
        }
        let stats = download_dir(ctx, client, src, &parent, sync, limits).await?;
        return Ok(Copied {
            from: format!(":{src}"),
            to,
            kind: "dir",
            bytes: stats.file_bytes,
            files: Some(stats.files),
            skipped: vec![],
        });
    }
    parent.tidy().await?;
    let tmp = StagedFile::new_in(parent.dir.as_fd())
        .with_context(|| format!("cannot create a file in {}", parent.real.display()))?;
    let mut read = client.read_file(src, ReadOpts::default()).await?;
    let bar = ctx.out.progress(Some(read.file_size), "download");
    let mut out = FileSink::new(tmp.file()?);
    let mut bytes = 0u64;
    while let Some(chunk) = read.chunks.next().await {
        let chunk = chunk?;
        let len = chunk.len() as u64;
        bytes = bytes.saturating_add(len);
        // The size announced is the most an honest agent sends; a file of no announced
        // size (a /proc file) is held to the unpack cap.
        if read.file_size > 0 && bytes > read.file_size {
            anyhow::bail!(
                "the agent sent more than the {} bytes it announced for {src}; the copy was \
                 abandoned and nothing was kept (is the guest's agent the one atoll installed?)",
                read.file_size
            );
        }
        if read.file_size == 0 && bytes > limits.max_bytes {
            anyhow::bail!(
                "{src} has no size the guest announces and sent more than --max-unpacked-bytes {}; \
                 the copy was abandoned and nothing was kept (raise --max-unpacked-bytes if you \
                 expect that much)",
                limits.max_bytes
            );
        }
        out.write(chunk).await.with_context(|| format!("cannot write {to}"))?;
        bar.inc(len);
    }
    let finished = if sync { out.finish_synced().await } else { out.finish().await.map(drop) };
    finished.with_context(|| format!("cannot write {to}"))?;
    bar.finish_and_clear();
    let mode = entry.mode & 0o777 & !archive::current_umask();
    tmp.set_mode(mode)?;
    tmp.persist(parent.dir.as_fd(), &parent.name).with_context(|| format!("cannot write {to}"))?;
    if sync {
        let dir = parent.via();
        tokio::task::spawn_blocking(move || std::fs::File::open(&dir)?.sync_all())
            .await?
            .with_context(|| format!("cannot sync the directory of {to}"))?;
    }
    Ok(Copied { from: format!(":{src}"), to, kind: "file", bytes, files: None, skipped: vec![] })
}

/// Downloads `src` as a zip and extracts it to the new host directory `target`. Stale
/// staging folders beside it go first, then this copy's own is made (before the
/// transfer, so a host that cannot take it says so at once). The zip is held in an
/// unnamed file in the destination's folder (never in a tmpfs `/tmp`, and nothing to
/// leave behind), at most [`archive::UnpackLimits::max_zip_bytes`] of it.
async fn download_dir(
    ctx: &Ctx,
    client: &Client,
    src: &str,
    parent: &HostDir,
    sync: bool,
    limits: archive::UnpackLimits,
) -> Result<ArchiveStats> {
    parent.tidy().await?;
    let parent_fd = parent.dir.try_clone().context("cannot reopen the destination's folder")?;
    let real = parent.real.clone();
    let (staging, into) = tokio::task::spawn_blocking(move || -> Result<_> {
        let staging = StagingDir::create(&parent_fd)
            .with_context(|| format!("cannot create a directory in {}", real.display()))?;
        // The staging folder by handle, opened beneath the destination's folder: every
        // entry is created beneath it (`archive::beneath`).
        let flags = rustix::fs::OFlags::PATH
            | rustix::fs::OFlags::DIRECTORY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC;
        let resolve = rustix::fs::ResolveFlags::BENEATH | rustix::fs::ResolveFlags::NO_SYMLINKS;
        let into = rustix::fs::openat2(&parent_fd, staging.name(), flags, rustix::fs::Mode::empty(), resolve)
            .map_err(|e| match e {
                rustix::io::Errno::NOSYS => anyhow::Error::from(archive::ArchiveError::NoOpenat2),
                e => anyhow::Error::from(std::io::Error::from(e)),
            })
            .with_context(|| format!("cannot open the staging directory in {}", real.display()))?;
        Ok((staging, into))
    })
    .await??;
    let zip = tempfile::tempfile_in(parent.via())
        .with_context(|| format!("cannot create a temp file for the zip in {}", parent.real.display()))?;
    let bar = ctx.out.progress(None, "download");
    let cap = ZipCap::Unpack(limits);
    let got = download_zip(client, src, cap, zip, &bar).await;
    bar.finish_and_clear();
    let (summary, zip) = got?;
    report_skipped(&summary);
    let (name, shown) = (parent.name.clone(), parent.shown.clone());
    tokio::task::spawn_blocking(move || -> Result<ArchiveStats> {
        let mut zip = zip;
        std::io::Seek::rewind(&mut zip)?;
        // A refusal drops `staging`, which removes it.
        let stats = archive::unzip_into(zip, into.as_fd(), limits)?;
        let done = staging.rename_to(&name).with_context(|| format!("cannot create {}", shown.display()))?;
        if sync {
            rustix::fs::syncfs(&done)
                .map_err(std::io::Error::from)
                .with_context(|| format!("cannot sync {}", shown.display()))?;
        }
        Ok(stats)
    })
    .await?
}

/// How many bytes of zip a download takes before it stops.
#[derive(Debug, Clone, Copy)]
enum ZipCap {
    /// `atoll cp` of a folder: what these unpack caps could need.
    Unpack(archive::UnpackLimits),
    /// `atoll download --max-bytes`.
    Bytes(u64),
}

impl ZipCap {
    fn bytes(self) -> u64 {
        match self {
            ZipCap::Unpack(limits) => limits.max_zip_bytes(),
            ZipCap::Bytes(max) => max,
        }
    }

    /// The agent is asked to stop there too (an honest one says so early); the count
    /// here is what holds against one that does not.
    fn ask_agent(self) -> Option<u64> {
        match self {
            ZipCap::Unpack(_) => None,
            ZipCap::Bytes(max) => Some(max),
        }
    }

    fn refusal(self, src: &str) -> anyhow::Error {
        match self {
            ZipCap::Unpack(limits) => anyhow::anyhow!(
                "the zip of {src} from the guest passed {} bytes, more than a folder within \
                 --max-unpacked-bytes {} and --max-entries {} can take; the copy was abandoned and \
                 nothing was kept (raise those flags if you expect that much)",
                self.bytes(),
                limits.max_bytes,
                limits.max_entries
            ),
            ZipCap::Bytes(max) => anyhow::anyhow!(
                "the zip of {src} from the guest passed --max-bytes {max}; the download was abandoned \
                 and nothing was kept (raise --max-bytes if you expect that much)"
            ),
        }
    }
}

/// Downloads the zip of the guest directory `src` into `file`, at most `cap`; gives back
/// its summary and the file, written but not synced.
async fn download_zip(
    client: &Client,
    src: &str,
    cap: ZipCap,
    file: std::fs::File,
    bar: &ProgressBar,
) -> Result<(ArchiveSummary, std::fs::File)> {
    let mut out = FileSink::new(file);
    let summary = stream_zip(client, src, cap, async |b| {
        bar.inc(b.len() as u64);
        out.write(b).await
    })
    .await?;
    Ok((summary, out.finish().await.context("cannot write the zip")?))
}

/// Streams the zip of the guest directory `src` into `sink`, piece by piece, refusing
/// more than `cap` bytes of it; gives back its summary.
async fn stream_zip(
    client: &Client,
    src: &str,
    cap: ZipCap,
    mut sink: impl AsyncFnMut(Bytes) -> std::io::Result<()>,
) -> Result<ArchiveSummary> {
    let mut parts = client.download_dir(src, cap.ask_agent()).await?;
    let mut got = 0u64;
    while let Some(part) = parts.next().await {
        match part? {
            ArchivePart::Data(b) => {
                got = got.saturating_add(b.len() as u64);
                if got > cap.bytes() {
                    return Err(cap.refusal(src));
                }
                sink(b).await.context("cannot write the zip")?
            }
            ArchivePart::Summary(s) => return Ok(s),
        }
    }
    anyhow::bail!(
        "the agent ended the download of {src} without its summary; retry, or check the agent's log"
    )
}

/// Skipped entries the guest reports, at most this many (the rest are counted).
const SKIPPED_SHOWN: usize = 20;

/// Says what the guest left out; its words are escaped (a guest chose them) and only
/// the first [`SKIPPED_SHOWN`] are shown.
fn report_skipped(summary: &ArchiveSummary) {
    for s in summary.skipped.iter().take(SKIPPED_SHOWN) {
        tracing::warn!("the guest left out {}: {}", s.path.escape_debug(), s.reason.escape_debug());
    }
    if let Some(more) = summary.skipped.len().checked_sub(SKIPPED_SHOWN).filter(|n| *n > 0) {
        tracing::warn!("the guest left out {more} more entries");
    }
}

/// `atoll download DIR -o FILE`: the zip itself, to a file or stdout.
pub(super) async fn download(ctx: &Ctx, args: DownloadArgs) -> Result<u8> {
    let client = ctx.client().await?.with_idle_timeout(args.idle_timeout);
    let cap = ZipCap::Bytes(args.max_bytes);
    let summary = if args.output.as_os_str() == "-" {
        let mut stdout = crate::output::stdout();
        let summary = stream_zip(&client, &args.dir, cap, async |b| stdout.write_all(&b).await).await?;
        stdout.flush().await.context("cannot write the zip")?;
        summary
    } else {
        let out = &args.output;
        let parent = HostDir::open(out)?;
        parent.tidy().await?;
        let tmp = StagedFile::new_in(parent.dir.as_fd())
            .with_context(|| format!("cannot create {}", out.display()))?;
        let bar = ctx.out.progress(None, "download");
        let got = download_zip(&client, &args.dir, cap, tmp.file()?, &bar).await;
        bar.finish_and_clear();
        let (summary, file) = got?;
        tokio::task::spawn_blocking(move || file.sync_all())
            .await?
            .with_context(|| format!("cannot write {}", out.display()))?;
        tmp.persist(parent.dir.as_fd(), &parent.name)
            .with_context(|| format!("cannot write {}", out.display()))?;
        summary
    };
    report_skipped(&summary);
    if ctx.out.json && args.output.as_os_str() != "-" {
        ctx.out.json(&summary)?;
    } else if args.output.as_os_str() != "-" && std::io::stderr().is_terminal() {
        eprintln!(
            "wrote {} ({} files, {} dirs, {} bytes zipped)",
            args.output.display(),
            summary.files,
            summary.dirs,
            summary.archive_bytes
        );
    }
    Ok(0)
}
