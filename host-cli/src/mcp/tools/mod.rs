//! The tools, one file per group. Each file adds a `#[tool_router]` impl block to
//! [`AtollMcp`](crate::mcp::AtollMcp); [`AtollMcp::new`](crate::mcp::AtollMcp::new) joins the
//! routers.
//!
//! - [`exec`] holds `sandbox_exec`; [`run_code`] holds `sandbox_run_code`.
//! - [`jobs`] holds `sandbox_exec_background`, `sandbox_job_status`, `sandbox_job_kill`
//!   and `sandbox_job_list`.
//! - [`files`] holds `sandbox_files_read`, `_write`, `_list`, `_remove`, `_move` and
//!   `_mkdir`.
//! - [`archive`] holds `sandbox_files_download_dir`.
//! - [`system`] holds `sandbox_info`.
//! - [`net`] holds `sandbox_preview_url` (published ports), `sandbox_update` (egress
//!   rules) and `sandbox_network_log`.
//! - [`sandboxes`] holds `sandbox_create`, `sandbox_list`, `sandbox_pause`,
//!   `sandbox_resume` and `sandbox_kill`.
//! - [`snapshots`] holds `sandbox_snapshot_create`, `_list`, `_restore` and `_delete`.
//! - [`templates`] holds `sandbox_template_list` and `sandbox_template_create`.
//! - [`metrics`] holds `sandbox_get_metrics`.
//! - [`secrets`] holds `secret_list`, `sandbox_attach_secret` and
//!   `sandbox_detach_secret` (no tool sets or reads a value).
//! - [`computer`] holds `computer_screenshot`, `computer_action`, `computer_stream_url`
//!   and `browser_open`.

pub mod archive;
pub mod computer;
pub mod exec;
pub mod files;
pub mod jobs;
pub mod metrics;
pub mod net;
pub mod run_code;
pub mod sandboxes;
pub mod secrets;
pub mod snapshots;
pub mod system;
pub mod templates;
