//! A job's log files: creating them under the job directory and reading their tails.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use atoll_proto::limits::JOB_TAIL_BYTES;

use super::JobError;

/// The stdout and stderr log files of one job.
pub(super) struct LogFiles {
    pub(super) stdout: PathBuf,
    pub(super) stderr: PathBuf,
}

/// Creates `dir` (0700) if needed.
pub(super) fn ensure_dir(dir: &Path) -> Result<(), JobError> {
    let err = |source| JobError::JobDir { dir: dir.to_owned(), source };
    DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(err)
}

/// Creates `<dir>/<id>.stdout` and `.stderr`, both new. `Ok(None)` when either exists
/// already (left by an earlier agent), so the caller moves on to the next id.
pub(super) fn create(dir: &Path, id: &str) -> Result<Option<(LogFiles, File, File)>, JobError> {
    let paths =
        LogFiles { stdout: dir.join(format!("{id}.stdout")), stderr: dir.join(format!("{id}.stderr")) };
    let open = |path: &Path| OpenOptions::new().write(true).create_new(true).mode(0o600).open(path);
    let stdout = match open(&paths.stdout) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(None),
        Err(source) => return Err(JobError::LogFile { path: paths.stdout, source }),
    };
    let stderr = match open(&paths.stderr) {
        Ok(f) => f,
        Err(e) => {
            let _ = std::fs::remove_file(&paths.stdout);
            if e.kind() == io::ErrorKind::AlreadyExists {
                return Ok(None);
            }
            return Err(JobError::LogFile { path: paths.stderr, source: e });
        }
    };
    Ok(Some((paths, stdout, stderr)))
}

/// The log's size and its last [`JOB_TAIL_BYTES`]. A log that vanished (removed by a
/// user) reads as empty rather than failing the whole job status.
pub(super) fn output(path: &Path) -> LogTail {
    let (total_bytes, tail) = read_tail(path).unwrap_or_default();
    LogTail { log_path: path.display().to_string(), total_bytes, tail }
}

/// What a job's status shows of one of its logs.
#[derive(Debug, Clone, Default)]
pub struct LogTail {
    /// The log file in the guest.
    pub log_path: String,
    /// Its size.
    pub total_bytes: u64,
    /// Its last bytes.
    pub tail: Vec<u8>,
}

fn read_tail(path: &Path) -> io::Result<(u64, Vec<u8>)> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let start = len.saturating_sub(JOB_TAIL_BYTES as u64);
    file.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::with_capacity(JOB_TAIL_BYTES);
    file.take(JOB_TAIL_BYTES as u64).read_to_end(&mut tail)?;
    Ok((len, tail))
}
