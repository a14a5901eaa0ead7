//! Where results go: stdout carries only the result (text, raw bytes, or one JSON
//! document with `--json`); logs, progress bars and errors go to stderr. Write errors
//! are returned, never panicked on. A write to a stdout whose reader went away (`atoll
//! cat big | head`) fails with [`StdoutClosed`] inside its `io::Error`: that, and only
//! that, ends `atoll` quietly. A broken pipe anywhere else (the agent's socket) is an
//! error like any other, so it can never pass for success.
//!
//! [`escape_controls`]: every string a guest controls (file names, job commands, its
//! error text, names in the network log) goes through it before human-readable output,
//! so that an escape sequence in a file name cannot move the cursor, retitle the
//! terminal, set the clipboard or forge a line. `--json` output is left as it is (JSON
//! escapes control characters itself).

use std::borrow::Cow;
use std::io::{self, IsTerminal, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use tokio::io::AsyncWrite;

/// The reader of `atoll`'s stdout went away: how pipelines like `atoll cat big | head`
/// end. Carried inside the `io::Error` of the failed write.
#[derive(Debug, thiserror::Error)]
#[error("the reader of stdout went away")]
pub struct StdoutClosed;

/// True when `e`, anywhere in its chain, is a write to stdout that found no reader.
pub fn is_stdout_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.is::<StdoutClosed>()
            || c.downcast_ref::<io::Error>()
                .and_then(|e| e.get_ref())
                .is_some_and(|inner| inner.is::<StdoutClosed>())
    })
}

/// `s` with each control character (C0, DEL, C1: what a terminal acts on) written as
/// an escape, `\x1b` or `\u{9b}` (`\n`, `\r`, `\t` by name); ordinary text, other
/// Unicode included, is returned as it is. For one-line fields: a name, a command.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// [`escape_controls`] keeping line breaks: for text of several lines (an error
/// message, whose lines may quote the guest).
pub fn escape_controls_keep_lines(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

fn escape(s: &str, keep_lines: bool) -> Cow<'_, str> {
    let wanted = |c: char| c.is_control() && !(keep_lines && c == '\n');
    if !s.chars().any(wanted) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            c if !wanted(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x80 => {
                use std::fmt::Write as _;
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c => out.extend(c.escape_unicode()),
        }
    }
    Cow::Owned(out)
}

/// Marks a failed write to stdout: a broken pipe there means the reader went away.
fn on_stdout(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        io::Error::new(io::ErrorKind::BrokenPipe, StdoutClosed)
    } else {
        e
    }
}

/// The process's stdout for async writes, whose broken pipe is a [`StdoutClosed`].
pub fn stdout() -> Stdout {
    Stdout(tokio::io::stdout())
}

/// See [`stdout`].
pub struct Stdout(tokio::io::Stdout);

impl AsyncWrite for Stdout {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf).map_err(on_stdout)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx).map_err(on_stdout)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx).map_err(on_stdout)
    }
}

/// Writes `bytes` to stdout synchronously (see [`stdout`]).
pub fn write_stdout(bytes: &[u8]) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(bytes).and_then(|()| out.flush()).map_err(on_stdout)
}

/// How results are printed.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// One JSON document on stdout instead of text.
    pub json: bool,
}

impl Output {
    /// Prints `value` as one pretty JSON document on stdout.
    pub fn json<T: Serialize + ?Sized>(&self, value: &T) -> io::Result<()> {
        let mut doc = serde_json::to_vec_pretty(value).map_err(io::Error::from)?;
        doc.push(b'\n');
        write_stdout(&doc)
    }

    /// Prints `value` as JSON with `--json`, else `text`.
    pub fn json_or_text<T: Serialize + ?Sized>(&self, value: &T, text: &str) -> io::Result<()> {
        if self.json { self.json(value) } else { self.text(text) }
    }

    /// Prints text lines on stdout.
    pub fn text(&self, text: &str) -> io::Result<()> {
        if text.is_empty() || text.ends_with('\n') {
            write_stdout(text.as_bytes())
        } else {
            write_stdout(format!("{text}\n").as_bytes())
        }
    }

    /// A byte-count progress bar on stderr, drawn only when stderr is a terminal and
    /// the output is not JSON; hidden otherwise.
    pub fn progress(&self, total: Option<u64>, label: &str) -> ProgressBar {
        if self.json || !io::stderr().is_terminal() {
            return ProgressBar::hidden();
        }
        let bar = match total {
            Some(n) => ProgressBar::new(n),
            None => ProgressBar::no_length(),
        };
        let template = match total {
            Some(_) => "{msg} {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} {eta}",
            None => "{msg} {spinner} {bytes} {bytes_per_sec}",
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        bar.set_message(label.to_string());
        bar
    }
}

/// `1.5 MiB`: a byte count for people, written once for both sides in atoll-proto.
pub use atoll_proto::units::human_bytes;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_other_text_is_kept() {
        assert!(matches!(escape_controls("plain name é 名"), Cow::Borrowed("plain name é 名")));
        assert_eq!(escape_controls("a\x1b]52;c;aGk=\x07b"), "a\\x1b]52;c;aGk=\\x07b");
        assert_eq!(escape_controls("x\u{9b}31m\x7f"), "x\\u{9b}31m\\x7f");
        assert_eq!(escape_controls("two\nlines\r\t"), "two\\nlines\\r\\t");
        assert_eq!(escape_controls_keep_lines("two\nlines\x1b[2J"), "two\nlines\\x1b[2J");
        for c in (0u32..0x20).chain(0x7f..0xa0).filter_map(char::from_u32) {
            let out = escape_controls(&c.to_string()).into_owned();
            assert!(!out.chars().any(char::is_control), "{c:?} -> {out:?}");
        }
    }
}
