//! Builds running in the background (MCP `sandbox_template_create {background: true}`):
//! a record per build in `<data>/templates/.builds/<name>.json`, so that
//! `sandbox_template_list` and `atoll template ls` show `building` or `failed` (with the
//! reason) until the template is there (`ready`), as hosted sandboxes do, and a client
//! whose tool calls time out after a minute never waits on a build.
//!
//! A record names the process building it; one whose process is gone (the server
//! exited mid-build) is shown as failed. A failed record stays until a build of that
//! name starts again or the template is made; [`forget`] drops it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::vmm::dirs;

/// Where a build stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BuildState {
    /// Running.
    Building,
    /// Stopped with an error; nothing was installed.
    Failed,
}

/// One background build.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuildRecord {
    /// The template being built.
    pub name: String,
    /// Where it stands.
    pub state: BuildState,
    /// Why it failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The process running it.
    pub pid: u32,
    /// When it started (Unix seconds).
    pub started_unix: u64,
    /// The MCP identity that started it, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// Why a build record could not be written.
#[derive(Debug, thiserror::Error)]
pub enum BuildingError {
    /// The data directory is unknown.
    #[error(transparent)]
    Dirs(#[from] dirs::DirsError),
    /// A build of that name runs.
    #[error("template `{0}` is being built already; sandbox_template_list shows when it is ready")]
    Busy(String),
    /// The record could not be written.
    #[error("could not record the build in {}: {source}", path.display())]
    Write {
        /// The record.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

fn dir() -> Result<PathBuf, dirs::DirsError> {
    Ok(dirs::templates_dir()?.join(".builds"))
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn write(record: &BuildRecord) -> Result<(), BuildingError> {
    write_in(&dir()?, record)
}

fn write_in(dir: &Path, record: &BuildRecord) -> Result<(), BuildingError> {
    let path = dir.join(format!("{}.json", record.name));
    let tmp = dir.join(format!(".{}.{}.tmp", record.name, std::process::id()));
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&tmp, serde_json::to_vec_pretty(record).unwrap_or_default()))
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|source| BuildingError::Write { path, source })
}

/// Records that this process starts building `name` (already checked as a name);
/// refused while a live build of that name runs.
pub fn start(name: &str, by: Option<String>) -> Result<(), BuildingError> {
    let record = BuildRecord {
        name: name.to_owned(),
        state: BuildState::Building,
        reason: None,
        pid: std::process::id(),
        started_unix: now(),
        by,
    };
    claim(&dir()?, &record)
}

/// Writes `record` in `dir` unless a live build of its name is recorded there. Every
/// claim holds an exclusive lock on `dir/.lock` from its look to its write, so two
/// claims of one name (none recorded, or a failed build recorded) give one winner.
fn claim(dir: &Path, record: &BuildRecord) -> Result<(), BuildingError> {
    let lock_path = dir.join(".lock");
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BuildingError::Write { path, source }
    };
    std::fs::create_dir_all(dir).map_err(err(dir))?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(err(&lock_path))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| err(&lock_path)(std::io::Error::from(e)))?;
    // A failed build's record (or none): this build takes its place.
    if list_in(dir).iter().any(|r| r.name == record.name && r.state == BuildState::Building) {
        return Err(BuildingError::Busy(record.name.clone()));
    }
    write_in(dir, record)
}

/// Records that the build of `name` failed, and why.
pub fn fail(name: &str, reason: &str) {
    let Ok(mut record) = read(name) else { return };
    record.state = BuildState::Failed;
    record.reason = Some(reason.to_owned());
    if let Err(e) = write(&record) {
        tracing::warn!(%e, "could not record a failed build");
    }
}

/// Drops the record of `name` (its template is there, or it is no longer wanted).
pub fn forget(name: &str) {
    if let Ok(dir) = dir() {
        let _ = std::fs::remove_file(dir.join(format!("{name}.json")));
    }
}

fn read(name: &str) -> Result<BuildRecord, std::io::Error> {
    let dir = dir().map_err(std::io::Error::other)?;
    let bytes = std::fs::read(dir.join(format!("{name}.json")))?;
    serde_json::from_slice(&bytes).map_err(std::io::Error::other)
}

/// The builds recorded, by name; a `building` one whose process is gone is `failed`.
pub fn list() -> Result<Vec<BuildRecord>, dirs::DirsError> {
    Ok(list_in(&dir()?))
}

fn list_in(dir: &Path) -> Vec<BuildRecord> {
    let mut out: Vec<BuildRecord> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| serde_json::from_slice::<BuildRecord>(&std::fs::read(e.path()).ok()?).ok())
        .filter(|r| super::check_name(&r.name).is_ok())
        .map(|mut r| {
            if r.state == BuildState::Building && !alive(r.pid) {
                r.state = BuildState::Failed;
                r.reason = Some("the server building it exited before it was done; build it again".into());
            }
            r
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Whether a process `pid` exists (a build's, a staging directory's).
pub(super) fn alive(pid: u32) -> bool {
    pid != 0 && std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, state: BuildState) -> BuildRecord {
        BuildRecord {
            name: name.into(),
            state,
            reason: None,
            pid: std::process::id(),
            started_unix: now(),
            by: None,
        }
    }

    #[test]
    fn two_claims_over_a_failed_record_give_one_winner() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join(".builds");
        for round in 0..20 {
            let name = format!("t{round}");
            if round % 2 == 0 {
                // A failed build of that name is recorded.
                write_in(&dir, &record(&name, BuildState::Failed)).unwrap();
            }
            let barrier = std::sync::Barrier::new(2);
            let wins: usize = std::thread::scope(|s| {
                let claims: Vec<_> = (0..2)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            claim(&dir, &record(&name, BuildState::Building))
                        })
                    })
                    .collect();
                claims
                    .into_iter()
                    .map(|c| match c.join().unwrap() {
                        Ok(()) => 1,
                        Err(BuildingError::Busy(n)) => {
                            assert_eq!(n, name);
                            0
                        }
                        Err(e) => panic!("{e}"),
                    })
                    .sum()
            });
            assert_eq!(wins, 1, "round {round}: exactly one claim wins");
            let now = list_in(&dir);
            let r = now.iter().find(|r| r.name == name).unwrap();
            assert_eq!(r.state, BuildState::Building);
        }
        // A claim after a failed one takes its place.
        write_in(&dir, &record("f", BuildState::Failed)).unwrap();
        claim(&dir, &record("f", BuildState::Building)).unwrap();
    }
}
