//! The helper's own log, `net-helper.log`: bounded whatever the guest does. Lines are
//! rate-limited ([`BURST`] at once, then [`PER_SEC`] a second; what the limit drops is
//! counted in the next line that passes), and the file is rotated to
//! `net-helper.log.1` when it would pass [`MAX_BYTES`] (one old file kept). A guest that
//! makes the helper warn on every SYN grows it by at most a few lines a second.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The size at which the log is rotated.
pub const MAX_BYTES: u64 = 1024 * 1024;
/// Lines written at once before the rate limit starts.
pub const BURST: u32 = 50;
/// Lines a second after the burst.
pub const PER_SEC: u32 = 2;

/// The log writer (one `write` per line, as tracing's formatter does).
#[derive(Debug)]
pub struct HelperLog {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    path: PathBuf,
    file: Option<File>,
    size: u64,
    tokens: f64,
    at: Instant,
    suppressed: u64,
}

impl HelperLog {
    /// Appends to `path` (the file the helper's stderr already points at).
    pub fn open(path: &Path) -> io::Result<HelperLog> {
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        Ok(HelperLog {
            state: Mutex::new(State {
                path: path.to_owned(),
                file: Some(file),
                size,
                tokens: f64::from(BURST),
                at: Instant::now(),
                suppressed: 0,
            }),
        })
    }

    /// Where the previous log goes on rotation.
    pub fn rotated_path(path: &Path) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(".1");
        PathBuf::from(name)
    }
}

/// Installs the helper's log as the tracing output (warnings and above, or `RUST_LOG`).
pub fn init(dir: &Path) -> io::Result<()> {
    let log = Arc::new(HelperLog::open(&crate::sandbox::network::config::helper_log_path(dir))?);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(log).with_ansi(false).try_init();
    Ok(())
}

impl Write for &HelperLog {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        s.tokens =
            (s.tokens + now.duration_since(s.at).as_secs_f64() * f64::from(PER_SEC)).min(f64::from(BURST));
        s.at = now;
        if s.tokens < 1.0 {
            s.suppressed += 1;
            return Ok(line.len());
        }
        s.tokens -= 1.0;
        if s.suppressed > 0 {
            let note =
                format!("({} lines suppressed by the rate limit)\n", std::mem::take(&mut s.suppressed));
            s.append(note.as_bytes())?;
        }
        s.append(line)?;
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl State {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.size + bytes.len() as u64 > MAX_BYTES && self.size > 0 {
            self.file = None;
            std::fs::rename(&self.path, HelperLog::rotated_path(&self.path))?;
            let file = open_append(&self.path)?;
            // stderr follows, so a panic message lands in the current file too.
            // SAFETY: dup2 onto fd 2 replaces stderr with a file this process owns; both
            // descriptors are valid for the call.
            unsafe { libc::dup2(file.as_raw_fd(), 2) };
            self.file = Some(file);
            self.size = 0;
        }
        let file = match self.file.as_mut() {
            Some(f) => f,
            None => self.file.insert(open_append(&self.path)?),
        };
        file.write_all(bytes)?;
        self.size += bytes.len() as u64;
        Ok(())
    }
}

/// Refuses a symbolic link in the log's place ([`crate::vmm::safe_fs::open_append`]).
fn open_append(path: &Path) -> io::Result<File> {
    crate::vmm::safe_fs::open_append(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_lines_is_rate_limited_counted_and_the_file_capped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("net-helper.log");
        let log = HelperLog::open(&path).expect("open");
        let line = format!("WARN 1024 connections open; refusing 203.0.113.10:80 {}\n", "x".repeat(100));
        for _ in 0..100_000 {
            (&log).write_all(line.as_bytes()).expect("write");
        }
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text.lines().count(), BURST as usize, "only the burst passed so far");
        // After the limit refills, the next line carries the count of what was dropped.
        std::thread::sleep(std::time::Duration::from_millis(600));
        (&log).write_all(line.as_bytes()).expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        let dropped = 100_000 - BURST as usize;
        assert!(
            text.contains(&format!("({dropped} lines suppressed by the rate limit)")),
            "{}",
            &text[text.len() - 300..]
        );

        // The cap: lines over time (the limit refilled) rotate, never grow past it.
        {
            let mut s = log.state.lock().expect("lock");
            s.size = MAX_BYTES - 10;
            s.tokens = f64::from(BURST);
        }
        (&log).write_all(line.as_bytes()).expect("write");
        assert!(HelperLog::rotated_path(&path).exists(), "rotated");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), line);
    }
}
