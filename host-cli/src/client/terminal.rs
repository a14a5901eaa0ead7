//! A command on a pseudo-terminal in the guest: ExecStream with `tty` set, keystrokes and
//! resizes in, the terminal's output out (as [`ExecEvent::Stdout`]).

use atoll_proto::agent::v1 as pb;
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};

use super::{Client, ExecEvent, ExecSpec, Result};

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSize {
    /// Lines.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

impl From<WindowSize> for pb::WindowSize {
    fn from(s: WindowSize) -> Self {
        pb::WindowSize { rows: s.rows.into(), cols: s.cols.into() }
    }
}

/// What the user does to a terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminalInput {
    /// Bytes typed (Ctrl-C is byte 3: the guest's terminal turns it into SIGINT).
    Keys(Bytes),
    /// The window changed size.
    Resize(WindowSize),
}

impl Client {
    /// Runs `spec` on a new pseudo-terminal in the guest with `TERM=term` and `size`;
    /// `input` is typed into it until it ends. `spec.timeout` `None` means no timeout.
    /// Dropping the returned stream kills the command's process group in the guest.
    pub async fn exec_terminal(
        &self,
        spec: &ExecSpec,
        term: &str,
        size: WindowSize,
        input: impl Stream<Item = TerminalInput> + Send + 'static,
    ) -> Result<BoxStream<'static, Result<ExecEvent>>> {
        use pb::exec_stream_input::Input;
        let mut start = self.complete(spec).request();
        start.tty = Some(pb::Tty { term: term.to_owned(), size: Some(size.into()) });
        let start = pb::ExecStreamInput { input: Some(Input::Start(start)) };
        let input = input.map(|i| pb::ExecStreamInput {
            input: Some(match i {
                TerminalInput::Keys(b) => Input::Stdin(b),
                TerminalInput::Resize(s) => Input::Resize(s.into()),
            }),
        });
        // Kept open after the input ends, so the agent never takes it for a client gone.
        let body = stream::once(async { start }).chain(input).chain(stream::pending());
        self.exec_events(body).await
    }
}
