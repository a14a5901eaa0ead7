//! Where results go: stdout carries only the result (text, raw bytes, or one JSON
//! document with `--json`); logs, progress bars and errors go to stderr. Write errors
//! are returned, never panicked on, so a closed pipe (`sbx cat big | head`) ends quietly.

use std::io::{self, IsTerminal, Write};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// How results are printed.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// One JSON document on stdout instead of text.
    pub json: bool,
}

impl Output {
    /// Prints `value` as one pretty JSON document on stdout.
    pub fn json<T: Serialize + ?Sized>(&self, value: &T) -> io::Result<()> {
        let mut out = io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, value).map_err(io::Error::from)?;
        out.write_all(b"\n")?;
        out.flush()
    }

    /// Prints text lines on stdout.
    pub fn text(&self, text: &str) -> io::Result<()> {
        let mut out = io::stdout().lock();
        out.write_all(text.as_bytes())?;
        if !text.is_empty() && !text.ends_with('\n') {
            out.write_all(b"\n")?;
        }
        out.flush()
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

/// `1.5 MiB`: a byte count for people.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn human_bytes() {
        assert_eq!(super::human_bytes(5), "5 B");
        assert_eq!(super::human_bytes(1536), "1.5 KiB");
        assert_eq!(super::human_bytes(100 << 20), "100.0 MiB");
    }
}
