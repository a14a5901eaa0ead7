//! [`SessionSignals`]: the signals a terminal session handles itself. In raw mode
//! Ctrl-C and Ctrl-Z are bytes for the guest, so these come from elsewhere: the
//! window changed (SIGWINCH), the terminal went away (SIGHUP), or someone asked atoll to
//! stop (SIGTERM, SIGINT, SIGQUIT). Handling them (instead of dying) is what lets the
//! session put the terminal back before it exits.

use tokio::signal::unix::{Signal, SignalKind, signal};

use super::TtyError;

/// What a session is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionSignal {
    /// The window changed size.
    Resize,
    /// End the session; exit with 128 + this signal number.
    End(i32),
}

/// The handlers, installed for as long as this lives.
#[derive(Debug)]
pub struct SessionSignals {
    winch: Signal,
    ends: Vec<(i32, Signal)>,
}

impl SessionSignals {
    /// Installs the handlers.
    pub fn install() -> Result<SessionSignals, TtyError> {
        let watch = |kind: SignalKind| signal(kind).map_err(TtyError::Signals);
        let mut ends = Vec::new();
        for (number, kind) in [
            (libc::SIGHUP, SignalKind::hangup()),
            (libc::SIGTERM, SignalKind::terminate()),
            (libc::SIGINT, SignalKind::interrupt()),
            (libc::SIGQUIT, SignalKind::quit()),
        ] {
            ends.push((number, watch(kind)?));
        }
        Ok(SessionSignals { winch: watch(SignalKind::window_change())?, ends })
    }

    /// The next signal.
    pub async fn next(&mut self) -> SessionSignal {
        let ends = self.ends.iter_mut().map(|(n, s)| {
            let n = *n;
            Box::pin(async move {
                s.recv().await;
                n
            })
        });
        tokio::select! {
            _ = self.winch.recv() => SessionSignal::Resize,
            (n, _, _) = futures::future::select_all(ends) => SessionSignal::End(n),
        }
    }
}
