//! The host's own terminal, for `atoll shell` and `atoll exec -t`: raw mode that is always
//! put back ([`raw`]), the window's size, and the signals a session reacts to
//! ([`signals`]: SIGWINCH becomes a resize, SIGHUP/SIGTERM/SIGINT/SIGQUIT end it).

pub mod raw;
pub mod signals;

use std::io::IsTerminal;

use crate::client::WindowSize;

pub use raw::{RawMode, TtyError};
pub use signals::{SessionSignal, SessionSignals};

/// True when stdin is a terminal (a session needs one to read keystrokes from).
pub fn stdin_is_terminal() -> bool {
    std::io::stdin().is_terminal()
}

/// The window's size, from stdin's terminal (or stdout's); `None` when neither knows.
pub fn window_size() -> Option<WindowSize> {
    [rustix::termios::tcgetwinsize(std::io::stdin()), rustix::termios::tcgetwinsize(std::io::stdout())]
        .into_iter()
        .flatten()
        .find(|w| w.ws_row > 0 && w.ws_col > 0)
        .map(|w| WindowSize { rows: w.ws_row, cols: w.ws_col })
}

/// `TERM` to pass to the guest: the host's own, or empty for the agent's default.
pub fn term() -> String {
    std::env::var("TERM").unwrap_or_default()
}
