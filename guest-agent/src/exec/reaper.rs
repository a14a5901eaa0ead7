//! The one place in the agent that calls `waitpid`.
//!
//! As PID 1 (and as a child subreaper when run as a service) the agent inherits every
//! orphan in the guest and must reap them all, while the commands it started need their
//! exit statuses delivered. Both are done here: [`spawn`] starts a child while holding
//! the waiter table's lock and registers its pid before releasing it, and the reaper
//! task, on every SIGCHLD, takes the same lock and loops `waitpid(-1, WNOHANG)` (rustix `wait`),
//! handing registered statuses to their waiters and silently reaping the rest. Holding
//! the lock across the spawn means no child can be reaped before its waiter exists.
//!
//! Nothing else in the agent may wait for children (no `tokio::process`, no
//! `std::process::Command::output`): the reaper would take their statuses.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, MutexGuard, Once};

use rustix::io::Errno;
use rustix::process::{WaitOptions, WaitStatus, wait};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;

use super::spawn::Started;

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

impl Ended {
    fn from_wait(status: WaitStatus) -> Self {
        match (status.exit_status(), status.terminating_signal()) {
            (Some(code), _) => Ended::Code(code),
            (None, Some(sig)) => Ended::Signal(sig),
            // waitpid without WUNTRACED/WCONTINUED reports only exits and kills.
            (None, None) => Ended::Code(-1),
        }
    }
}

type Waiters = HashMap<u32, oneshot::Sender<Ended>>;

static WAITERS: LazyLock<Mutex<Waiters>> = LazyLock::new(|| Mutex::new(HashMap::new()));
static STARTED: Once = Once::new();

/// Starts the reaper (idempotent). Call early, inside the tokio runtime: as PID 1 the
/// agent must reap orphans even before it has started anything itself.
pub fn start() {
    STARTED.call_once(|| {
        // Orphans of our commands (double-forked daemons) then come back to us, so they
        // are reaped here and stay reachable through their process group.
        if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
            tracing::warn!("cannot become a child subreaper ({e}); orphaned descendants go to PID 1");
        }
        // Registered before any child exists, so no SIGCHLD is missed.
        let mut sigchld = match signal(SignalKind::child()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("cannot listen for SIGCHLD ({e}); commands' exits will not be seen");
                return;
            }
        };
        // Children that ended before the handler existed (left by whatever exec'd us).
        // Inline: nothing of ours can hold the table yet, and a blocking-pool thread
        // started here would cost milliseconds of a VM's boot under emulation.
        reap_all();
        tokio::spawn(async move {
            loop {
                if sigchld.recv().await.is_none() {
                    tracing::error!("the SIGCHLD stream ended; children are no longer reaped");
                    return;
                }
                // waitpid(WNOHANG) does not block, but the table lock may be held by a
                // spawn for the length of a fork and exec.
                if tokio::task::spawn_blocking(reap_all).await.is_err() {
                    reap_all();
                }
            }
        });
    });
}

/// Starts a child with `start` and registers it: the receiver gets its status once it ends.
pub fn spawn(
    start: impl FnOnce() -> std::io::Result<Started>,
) -> std::io::Result<(Started, oneshot::Receiver<Ended>)> {
    self::start();
    let mut waiters = lock();
    let child = start()?;
    let (tx, rx) = oneshot::channel();
    waiters.insert(child.pid, tx);
    Ok((child, rx))
}

fn lock() -> MutexGuard<'static, Waiters> {
    // A panic elsewhere while holding the lock leaves the table itself consistent.
    WAITERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Reaps every child that has ended, delivering the registered ones' statuses.
fn reap_all() {
    let mut waiters = lock();
    loop {
        match wait(WaitOptions::NOHANG) {
            Ok(Some((pid, status))) => {
                let pid = pid.as_raw_nonzero().get().unsigned_abs();
                if let Some(tx) = waiters.remove(&pid) {
                    // The waiter may be gone (its request was cancelled); the child is reaped either way.
                    let _ = tx.send(Ended::from_wait(status));
                }
            }
            Ok(None) | Err(Errno::CHILD) => return,
            Err(Errno::INTR) => continue,
            Err(e) => {
                tracing::warn!("waitpid failed: {e}");
                return;
            }
        }
    }
}
