//! Guest files as both faces read them: a file (or a slice) read into memory whole, with
//! the file's size, under a cap the caller picks (`atoll cat --json`, `atoll job logs --json`,
//! the `sandbox_files_read` tool).

use futures::StreamExt;

use crate::client::{Client, ClientError, ReadOpts};

/// A file (or a slice of it) read into memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileBytes {
    /// The bytes read.
    pub data: Vec<u8>,
    /// Size of the whole file (not just the slice).
    pub file_size: u64,
}

/// Reads a file (or a slice) into memory, refusing more than `limit` bytes: the agent
/// is asked to refuse a longer slice up front, and the bytes that arrive are counted too.
pub async fn read_to_vec(
    client: &Client,
    path: &str,
    mut opts: ReadOpts,
    limit: u64,
) -> Result<FileBytes, ClientError> {
    opts.max_bytes = Some(opts.max_bytes.map_or(limit, |m| m.min(limit)));
    let mut read = client.read_file(path, opts).await?;
    let mut data = Vec::new();
    while let Some(chunk) = read.chunks.next().await {
        let chunk = chunk?;
        if (data.len() + chunk.len()) as u64 > limit {
            return Err(ClientError::TooLarge { path: path.to_string(), limit });
        }
        data.extend_from_slice(&chunk);
    }
    Ok(FileBytes { data, file_size: read.file_size })
}
