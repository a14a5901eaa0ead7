//! Computer use: a sandbox with a screen, seen and driven from the host. One module
//! under both faces (`atoll screenshot`/`atoll input` and the MCP `computer_*` tools).
//!
//! The screen, keyboard and pointer are QEMU's own (docs/desktop.md says why): a
//! bochs-display whose framebuffer QMP `screendump` reads ([`screen`]), and a virtio
//! keyboard and tablet fed by QMP `input-send-event` ([`input`]). Nothing in the guest
//! serves them: the `desktop` template only runs an X server on that display.
//! Only the cursor position is asked of the guest (`xdotool`), since QEMU does not
//! know where the guest drew it; the browser ([`browser`]) runs in the guest.

pub mod actions;
pub mod browser;
pub mod input;
pub mod keys;
pub mod rfb;
pub mod screen;
pub mod size;
pub mod view;

use std::path::PathBuf;

use crate::sandbox::SandboxError;
use crate::vmm::qmp::{Qmp, QmpError};
use crate::vmm::state::{self, Record};
use crate::vmm::{dirs, template};

pub use size::Size;

/// Why a desktop action failed.
#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    /// The sandbox cannot be reached (unknown, dead, still booting...).
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// A sandbox without a screen.
    #[error(
        "sandbox `{name}` has no screen: its template `{template}` has no display; create a desktop \
         sandbox with `atoll create --template desktop` (rootfs/setup.sh --with-desktop builds the template)"
    )]
    NoScreen {
        /// The sandbox.
        name: String,
        /// Its template.
        template: String,
    },
    /// A point outside the screen.
    #[error(
        "({x}, {y}) is off the screen, which is {size}: give 0 <= x < {} and 0 <= y < {}",
        size.width,
        size.height
    )]
    OffScreen {
        /// Asked x.
        x: i64,
        /// Asked y.
        y: i64,
        /// The screen.
        size: Size,
    },
    /// A key name or text that cannot be typed.
    #[error(transparent)]
    Key(#[from] keys::KeyError),
    /// A request that makes no sense (a zero scroll, an unknown action...).
    #[error("{0}")]
    BadRequest(String),
    /// QEMU refused or did not answer.
    #[error(transparent)]
    Qmp(#[from] QmpError),
    /// The screenshot QEMU wrote could not be read.
    #[error("could not read the screenshot QEMU wrote: {why}")]
    Screendump {
        /// What failed.
        why: String,
    },
    /// The live view could not start.
    #[error("{0}")]
    View(String),
    /// The guest's agent could not start a program (the browser...).
    #[error("{what} failed through the guest's agent: {why}")]
    Agent {
        /// What was asked.
        what: &'static str,
        /// What failed.
        why: String,
    },
    /// The guest's X server is not running: screenshots show no desktop and input
    /// reaches no program.
    #[error(
        "the desktop's X server is not running in `{name}` (it exited or was killed; the guest's logs are \
         /run/Xorg.0.log and /run/atoll-desktop.log): its screen shows no desktop and input reaches no \
         program. Kill the sandbox and create it again"
    )]
    XGone {
        /// The sandbox.
        name: String,
    },
    /// The guest's X server does not answer (asked for the cursor).
    #[error(
        "the desktop's X server does not answer ({why}); the guest's session log is /run/atoll-desktop.log"
    )]
    NoX {
        /// What the guest said.
        why: String,
    },
}

/// A running sandbox with a screen.
#[derive(Debug, Clone)]
pub struct Desktop {
    /// Its record.
    pub record: Record,
    /// Its screen size, as created.
    pub size: Size,
    /// Its `vm/` directory, the one QEMU sees (at the same path), where its VNC socket is.
    dir: PathBuf,
}

impl Desktop {
    /// The desktop sandbox `name_or_id`, resumed first if it is paused or parked.
    pub async fn open(name_or_id: &str) -> Result<Desktop, DesktopError> {
        let state_dir = dirs::state_dir().map_err(SandboxError::from)?;
        // Refuse a sandbox without a screen before resuming anything.
        let record = state::find(&state_dir, name_or_id).map_err(SandboxError::from)?;
        screen_size(&record)?;
        crate::sandbox::control::resolve(name_or_id).await?;
        let record = state::find(&state_dir, name_or_id).map_err(SandboxError::from)?;
        let size = screen_size(&record)?;
        let dir = record.paths.vm.clone();
        Ok(Desktop { record, size, dir })
    }

    async fn qmp(&self) -> Result<Qmp, DesktopError> {
        Ok(Qmp::connect(&self.record.paths.qmp_socket).await?)
    }

    /// Runs `work` (a screenshot, an input) and, beside it, asks the guest whether its X
    /// server runs: QEMU takes input and shows a screen with or without one, so a
    /// desktop whose X server died would otherwise answer as if all were well. The check
    /// runs concurrently, so a live desktop's answer is not delayed by it; a refusal of
    /// the request itself is returned as it is.
    pub async fn with_x<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, DesktopError>>,
    ) -> Result<T, DesktopError> {
        let (done, x) = tokio::join!(work, self.x_runs());
        match (done, x) {
            // The request's own refusal (bad input, no answer) says more.
            (Err(e), _) => Err(e),
            (Ok(_), Some(false)) => Err(DesktopError::XGone { name: self.record.name.clone() }),
            (Ok(v), _) => Ok(v),
        }
    }

    /// Whether a process named `Xorg` runs in the guest; `None` when the agent cannot
    /// say (then the work's own result stands).
    async fn x_runs(&self) -> Option<bool> {
        use crate::client::{Client, ExecSpec};
        // Builtins only (no process per entry: each costs a fork under emulation).
        const SCAN: &str = "for p in /proc/[0-9]*/comm; do read -r c < \"$p\" 2>/dev/null && \
                            [ \"$c\" = Xorg ] && exit 0; done; exit 3";
        let addr = crate::sandbox::agent_address(&self.record);
        let client = Client::connect(&addr, std::time::Duration::from_secs(10)).await.ok()?;
        let mut spec = ExecSpec::shell(SCAN.to_owned());
        spec.timeout = Some(std::time::Duration::from_secs(10));
        let out = client.exec(&spec).await.ok()?;
        match out.status.code {
            Some(0) => Some(true),
            Some(3) => Some(false),
            _ => None,
        }
    }

    /// Checks that (x, y) is on the screen.
    pub fn check_point(&self, x: i64, y: i64) -> Result<(u32, u32), DesktopError> {
        let on = |v: i64, max: u32| u32::try_from(v).ok().filter(|v| *v < max);
        match (on(x, self.size.width), on(y, self.size.height)) {
            (Some(x), Some(y)) => Ok((x, y)),
            _ => Err(DesktopError::OffScreen { x, y, size: self.size }),
        }
    }
}

/// The screen of `record`: the size it was created with, else its template's; an
/// error when its template has no display.
pub fn screen_size(record: &Record) -> Result<Size, DesktopError> {
    if let Some(size) = record.storage.display {
        return Ok(size);
    }
    let templates = dirs::templates_dir().map_err(SandboxError::from)?;
    let tpl = template::load(&templates, &record.template).map_err(SandboxError::from)?;
    tpl.display.ok_or_else(|| DesktopError::NoScreen {
        name: record.name.clone(),
        template: record.template.clone(),
    })
}

/// The file the guest's session script writes once its window manager runs
/// (rootfs/desktop/atoll-desktop-session).
pub const READY_FILE: &str = "/run/atoll-desktop-ready";
/// The guest's session log.
pub const SESSION_LOG: &str = "/run/atoll-desktop.log";

/// Waits up to `limit` for the guest's desktop session to be up ([`READY_FILE`]);
/// `Err` carries the end of the guest's session log.
pub async fn wait_session(agent: &atoll_proto::Address, limit: std::time::Duration) -> Result<(), String> {
    use crate::client::{Client, ExecSpec};
    let secs = limit.as_secs().clamp(1, 590);
    let client =
        Client::connect(agent, std::time::Duration::from_secs(10)).await.map_err(|e| e.to_string())?;
    let line = format!(
        "i=0; while [ ! -e {READY_FILE} ]; do i=$((i+1)); [ $i -gt {} ] && {{ tail -n 15 {SESSION_LOG}; exit 1; }}; sleep 0.1; done",
        secs * 10
    );
    let mut spec = ExecSpec::shell(line);
    spec.timeout = Some(std::time::Duration::from_secs(secs + 10));
    let out = client.exec(&spec).await.map_err(|e| e.to_string())?;
    if out.status.code == Some(0) {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stdout.data).trim().to_string())
    }
}
