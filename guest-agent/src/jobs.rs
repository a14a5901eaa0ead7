//! Detached background jobs whose full output goes to log files.

use std::path::PathBuf;

/// Every background job this agent started.
pub struct Jobs {
    #[allow(dead_code)]
    dir: PathBuf,
}

impl Jobs {
    /// An empty table whose jobs log under `dir`.
    pub fn new(dir: PathBuf) -> Self {
        Jobs { dir }
    }
}
