//! ListDir: a directory's entries, optionally recursive, capped and sorted.
//!
//! - Paths are relative to the listed directory and sorted by path, component by
//!   component (a directory's contents follow it directly). Because the walk itself
//!   visits entries in that order, the cap keeps the first `max_entries` of the full
//!   sorted listing and the agent never holds more than that.
//! - Symlinks are reported, never followed (a symlink loop is harmless), except that a
//!   symlink naming the listed directory itself is followed.
//! - The reply also stops (with `truncated`) before it would outgrow a gRPC message.
//! - Listing something that is not a directory is refused with a hint to use Stat.
//! - Subdirectories that cannot be read are listed themselves, without their contents.

use std::path::PathBuf;

use prost::Message;
use sbx_proto::agent::v1 as pb;
use sbx_proto::limits::{DEFAULT_MAX_ENTRIES, MAX_MESSAGE_BYTES};
use walkdir::WalkDir;

use super::{FsError, blocking, check_path, entry};

/// Room a listing may take in its reply; past it the listing is cut short as if by
/// `max_entries`, so a huge `max_entries` cannot produce a reply too large to send.
const MESSAGE_BUDGET: usize = MAX_MESSAGE_BYTES - 64 * 1024;

/// Field tag and length prefix of each repeated entry.
const ENTRY_OVERHEAD: usize = 6;

/// Lists `req.path`.
pub async fn list(req: pb::ListDirRequest) -> Result<pb::ListDirResponse, FsError> {
    let root = check_path(&req.path)?;
    blocking(move || list_blocking(root, &req)).await
}

fn list_blocking(root: PathBuf, req: &pb::ListDirRequest) -> Result<pb::ListDirResponse, FsError> {
    let meta = std::fs::metadata(&root).map_err(|e| FsError::io("list", &root, e))?;
    if !meta.is_dir() {
        return Err(FsError::NotADirectory { path: root, hint: "use Stat to inspect a single file" });
    }
    let max_depth = match (req.recursive, req.max_depth) {
        (false, _) => 1,
        (true, 0) => usize::MAX,
        (true, d) => d as usize,
    };
    let cap = if req.max_entries == 0 { DEFAULT_MAX_ENTRIES } else { req.max_entries } as usize;

    let walk = WalkDir::new(&root).min_depth(1).max_depth(max_depth).follow_links(false).sort_by_file_name();
    let mut entries = Vec::new();
    let mut truncated = false;
    let mut bytes = 0;
    for item in walk {
        let item = match item {
            Ok(item) => item,
            // The listed directory itself could not be read: that is the caller's error.
            Err(e) if e.depth() == 0 => {
                let io = e.into_io_error().unwrap_or_else(|| std::io::Error::other("walk failed"));
                return Err(FsError::io("list", &root, io));
            }
            // A subdirectory that cannot be read: it is listed, its contents are not.
            Err(_) => continue,
        };
        if entries.len() == cap {
            truncated = true;
            break;
        }
        let Ok(meta) = item.metadata() else { continue };
        let rel = item.path().strip_prefix(&root).unwrap_or(item.path());
        let entry = entry(rel, item.path(), &meta);
        bytes += entry.encoded_len() + ENTRY_OVERHEAD;
        if bytes > MESSAGE_BUDGET {
            truncated = true;
            break;
        }
        entries.push(entry);
    }
    Ok(pb::ListDirResponse { entries, truncated })
}
