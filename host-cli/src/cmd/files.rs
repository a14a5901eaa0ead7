//! `atoll cat`, `write`, `ls`, `stat`, `rm`, `mv`, `mkdir`: one guest file at a time.

use std::fmt::Write as _;
use std::io::IsTerminal;

use anyhow::{Context, Result};
use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use super::Ctx;
use crate::cli::{CatArgs, LsArgs, MkdirArgs, MvArgs, PathArg, RmArgs, WriteArgs};
use crate::client::{FileEntry, FileKind, ListOpts, ReadOpts, WriteOpts};
use crate::output::{escape_controls, human_bytes};

/// Cap on a file read into memory for `atoll cat --json`.
const JSON_READ_LIMIT: u64 = 16 * 1024 * 1024;

/// `atoll cat`: stream a guest file (or a slice) to stdout, byte for byte.
pub(super) async fn cat(ctx: &Ctx, args: CatArgs) -> Result<u8> {
    let client = ctx.client().await?;
    let opts = ReadOpts { offset: args.offset, length: args.length, max_bytes: None };
    if ctx.out.json {
        let data = crate::sandbox::files::read_to_vec(&client, &args.path, opts, JSON_READ_LIMIT).await?.data;
        let doc = serde_json::json!({
            "path": args.path,
            "offset": args.offset,
            "bytes": data.len(),
            "utf8": std::str::from_utf8(&data).is_ok(),
            "data": String::from_utf8_lossy(&data),
        });
        ctx.out.json(&doc)?;
        return Ok(0);
    }
    let mut read = client.read_file(&args.path, opts).await?;
    let mut stdout = crate::output::stdout();
    while let Some(chunk) = read.chunks.next().await {
        stdout.write_all(&chunk?).await?;
    }
    stdout.flush().await?;
    Ok(0)
}

/// `atoll write`: stdin or `--from FILE` to a guest file, atomically.
pub(super) async fn write(ctx: &Ctx, args: WriteArgs) -> Result<u8> {
    let client = ctx.client().await?;
    let opts = WriteOpts {
        mode: args.mode,
        append: args.append,
        no_create_parents: args.no_parents,
        sync: args.sync,
    };
    let result = match &args.from {
        Some(path) => {
            let file = tokio::fs::File::open(path)
                .await
                .with_context(|| format!("could not open {} to upload it", path.display()))?;
            client.write_file(&args.path, opts, file).await?
        }
        None => {
            if std::io::stdin().is_terminal() {
                eprintln!(
                    "atoll: reading the content from the terminal; end it with Ctrl-D (or use --from FILE)"
                );
            }
            client.write_file(&args.path, opts, tokio::io::stdin()).await?
        }
    };
    if ctx.out.json {
        let doc = serde_json::json!({ "path": args.path, "bytes_written": result.bytes_written, "file_size": result.file_size });
        ctx.out.json(&doc)?;
    }
    Ok(0)
}

/// `atoll ls [PATH]`: a guest directory, or with no path the sandboxes.
pub(super) async fn ls(ctx: &Ctx, args: LsArgs) -> Result<u8> {
    let Some(path) = args.path else {
        return sandboxes(ctx);
    };
    let opts = ListOpts {
        recursive: args.recursive,
        max_depth: args.depth,
        max_entries: args.max_entries,
        names_only: args.names,
    };
    let listing = ctx.client().await?.list(&path, opts).await?;
    if ctx.out.json && args.names {
        // Without the stat the agent skipped: no size, mode or mtime to print as zeros.
        let entries: Vec<NameEntry> =
            listing.entries.iter().map(|e| NameEntry { path: &e.path, kind: e.kind }).collect();
        ctx.out.json(&serde_json::json!({ "entries": entries, "truncated": listing.truncated }))?;
        return Ok(0);
    }
    if ctx.out.json {
        ctx.out.json(&listing)?;
        return Ok(0);
    }
    let mut text = String::new();
    for e in &listing.entries {
        if args.names {
            let _ = writeln!(text, "{}", name_line(e));
        } else {
            let _ = writeln!(text, "{}", long_line(e));
        }
    }
    ctx.out.text(&text)?;
    if listing.truncated {
        eprintln!(
            "atoll: the listing was cut at {} entries; raise --max-entries or list a subdirectory",
            listing.entries.len()
        );
    }
    Ok(0)
}

fn sandboxes(ctx: &Ctx) -> Result<u8> {
    let list = crate::sandbox::list()?;
    if ctx.out.json {
        ctx.out.json(&list)?;
        return Ok(0);
    }
    let mut text = format!(
        "{:<20} {:<10} {:<9} {:<16} {:>7} {:>4} {:>8}  ADDRESS\n",
        "NAME", "ID", "STATE", "TEMPLATE", "MEMORY", "CPUS", "AGE"
    );
    for s in &list {
        let age = humantime::format_duration(std::time::Duration::from_secs(s.age_secs)).to_string();
        let age = age.split(' ').next().unwrap_or("").to_string();
        let _ = writeln!(
            text,
            "{:<20} {:<10} {:<9} {:<16} {:>6}M {:>4} {:>8}  {}",
            s.name,
            s.id,
            s.state.as_str(),
            s.template,
            s.memory_mib,
            s.cpus,
            age,
            s.address
        );
    }
    ctx.out.text(&text)?;
    Ok(0)
}

fn kind_char(k: FileKind) -> char {
    match k {
        FileKind::File => '-',
        FileKind::Dir => 'd',
        FileKind::Symlink => 'l',
        FileKind::Other => 's',
        FileKind::Unknown => '?',
    }
}

/// An entry of `atoll ls --names --json`.
#[derive(serde::Serialize)]
struct NameEntry<'a> {
    path: &'a str,
    kind: FileKind,
}

/// `name/` for a directory, `name@` for a symlink, else `name`, like `ls -F`.
fn name_line(e: &FileEntry) -> String {
    let path = escape_controls(&e.path);
    match e.kind {
        FileKind::Dir => format!("{path}/"),
        FileKind::Symlink => format!("{path}@"),
        _ => path.into_owned(),
    }
}

/// `drwxr-xr-x  4.0 KiB  2026-11-22 08:00  name -> target`, like `ls -l`.
fn long_line(e: &FileEntry) -> String {
    let mut perms = String::with_capacity(10);
    perms.push(kind_char(e.kind));
    for shift in [6, 3, 0] {
        let bits = (e.mode >> shift) & 7;
        perms.push(if bits & 4 != 0 { 'r' } else { '-' });
        perms.push(if bits & 2 != 0 { 'w' } else { '-' });
        perms.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    let when =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(e.mtime_unix_ms).unwrap_or(0));
    let when = humantime::format_rfc3339_seconds(when).to_string();
    let when = when.get(..16).unwrap_or(&when).replace('T', " ");
    let size = if e.kind == FileKind::Dir { "-".to_string() } else { human_bytes(e.size) };
    let mut line = format!("{perms} {size:>10}  {when}  {}", escape_controls(&e.path));
    if let Some(t) = &e.symlink_target {
        let _ = write!(line, " -> {}", escape_controls(t));
    }
    line
}

/// `atoll stat`.
pub(super) async fn stat(ctx: &Ctx, args: PathArg) -> Result<u8> {
    let e = ctx.client().await?.stat(&args.path).await?;
    if ctx.out.json {
        ctx.out.json(&e)?;
    } else {
        ctx.out.text(&format!("{}\nsize: {} bytes, mode: {:04o}", long_line(&e), e.size, e.mode))?;
    }
    Ok(0)
}

/// `atoll rm`.
pub(super) async fn rm(ctx: &Ctx, args: RmArgs) -> Result<u8> {
    ctx.client().await?.remove(&args.path, args.recursive).await?;
    done(ctx, serde_json::json!({ "removed": args.path }))
}

/// `atoll mv`.
pub(super) async fn mv(ctx: &Ctx, args: MvArgs) -> Result<u8> {
    ctx.client().await?.mv(&args.from, &args.to, args.force).await?;
    done(ctx, serde_json::json!({ "moved": args.from, "to": args.to }))
}

/// `atoll mkdir`.
pub(super) async fn mkdir(ctx: &Ctx, args: MkdirArgs) -> Result<u8> {
    ctx.client().await?.mkdir(&args.path, args.parents, args.mode).await?;
    done(ctx, serde_json::json!({ "created": args.path }))
}

/// Success with nothing to print, except a small JSON document under `--json`.
fn done(ctx: &Ctx, doc: serde_json::Value) -> Result<u8> {
    if ctx.out.json {
        ctx.out.json(&doc)?;
    }
    Ok(0)
}
