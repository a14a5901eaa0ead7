//! [`RawMode`]: the host terminal in raw mode (keystrokes byte by byte, no echo, no
//! signals from Ctrl-C or Ctrl-Z, no output processing), put back as it was when the
//! guard drops, when atoll panics (a hook, since release builds abort on panic and run no
//! destructors), and when a session signal ends the session (the session drops it).

use std::sync::{Mutex, Once};

use rustix::termios::{OptionalActions, Termios};

/// The settings to put back; `Some` while a [`RawMode`] is active.
static SAVED: Mutex<Option<Termios>> = Mutex::new(None);

/// What can go wrong with the host terminal.
#[derive(Debug, thiserror::Error)]
pub enum TtyError {
    /// stdin is not a terminal, so there are no keystrokes to forward.
    #[error(
        "{what} needs a terminal on stdin, and stdin is not one; run it from an interactive shell, \
         or {instead}"
    )]
    NotATerminal {
        /// The command, e.g. "`atoll shell`".
        what: &'static str,
        /// What to run instead without a terminal, in that command's own words.
        instead: &'static str,
    },
    /// The terminal's settings could not be read or changed.
    #[error("could not put the terminal in raw mode")]
    Settings(#[source] std::io::Error),
    /// The signal handlers of a session could not be set up.
    #[error("could not watch the terminal's signals")]
    Signals(#[source] std::io::Error),
}

/// The host terminal in raw mode until this is dropped.
#[derive(Debug)]
pub struct RawMode(());

impl RawMode {
    /// Saves stdin's terminal settings and switches it to raw mode.
    pub fn enter() -> Result<RawMode, TtyError> {
        static HOOK: Once = Once::new();
        let stdin = std::io::stdin();
        let saved = rustix::termios::tcgetattr(&stdin).map_err(|e| TtyError::Settings(e.into()))?;
        let mut raw = saved.clone();
        raw.make_raw();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        *SAVED.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(saved);
        if let Err(e) = rustix::termios::tcsetattr(&stdin, OptionalActions::Now, &raw) {
            restore();
            return Err(TtyError::Settings(e.into()));
        }
        Ok(RawMode(()))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        restore();
    }
}

/// Puts back the saved settings, once.
fn restore() {
    let saved = SAVED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let Some(saved) = saved {
        let _ = rustix::termios::tcsetattr(std::io::stdin(), OptionalActions::Now, &saved);
    }
}
