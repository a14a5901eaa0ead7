//! Builds running in the background (MCP `sandbox_template_create {background: true}`):
//! a record per build in `<data>/templates/.builds/<name>.json`, so that
//! `sandbox_template_list` and `atoll template ls` show `building` or `failed` (with the
//! reason) until the template is there (`ready`), as hosted sandboxes do, and a client
//! whose tool calls time out after a minute never waits on a build.
//!
//! A record names the process building it; one whose process is gone (the server
//! exited mid-build) is shown as failed. A failed record stays until a build of that
//! name starts again or the template is made; [`forget`] drops it.

use std::path::PathBuf;

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
    let dir = dir()?;
    let path = dir.join(format!("{}.json", record.name));
    let tmp = dir.join(format!(".{}.{}.tmp", record.name, std::process::id()));
    std::fs::create_dir_all(&dir)
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
    if list()?.iter().any(|r| r.name == name) {
        if list()?.iter().any(|r| r.name == name && r.state == BuildState::Building) {
            return Err(BuildingError::Busy(name.to_owned()));
        }
        // A failed build's record: this build takes its place.
        return write(&record);
    }
    // No record: claim the name with an exclusive create, so two starts at once do not
    // both build.
    let dir = dir()?;
    let path = dir.join(format!("{name}.json"));
    let claimed = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::OpenOptions::new().write(true).create_new(true).open(&path));
    match claimed {
        Ok(_) => write(&record),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(BuildingError::Busy(name.to_owned())),
        Err(source) => Err(BuildingError::Write { path, source }),
    }
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
    let dir = dir()?;
    let mut out: Vec<BuildRecord> = std::fs::read_dir(&dir)
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
    Ok(out)
}

fn alive(pid: u32) -> bool {
    pid != 0 && std::path::Path::new(&format!("/proc/{pid}")).exists()
}
