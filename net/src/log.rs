//! The audit log: one JSON line per connection attempt and per DNS query, in
//! `DIR/net.log`, rotated to `net.log.1` (one old file kept) when it would pass
//! [`ROTATE_BYTES`]. [`Record`] is also what readers (`atoll net log`) parse.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use crate::policy::Verdict;

/// The size at which `net.log` is moved to `net.log.1` and started again.
pub const ROTATE_BYTES: u64 = 4 * 1024 * 1024;

/// What kind of attempt a record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A TCP connection.
    Tcp,
    /// A DNS query.
    Dns,
    /// A UDP datagram other than DNS (always denied).
    Udp,
}

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// When the attempt started, RFC 3339 UTC with milliseconds.
    pub time: String,
    /// TCP connection, DNS query or other UDP.
    pub kind: Kind,
    /// The name asked for: TLS SNI, HTTP Host, the DNS query, or the name the IP was
    /// resolved from; absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// For DNS: the query type (`A`, `AAAA`, `MX`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_type: Option<String>,
    /// Destination address (for DNS: the first address answered, if any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
    /// Destination port (53 for DNS).
    pub port: u16,
    /// Allowed or denied.
    pub verdict: Verdict,
    /// What decided: the rule as written, `private-range`, `default`, or for DNS
    /// and UDP a fixed reason (`udp-blocked`).
    pub rule: String,
    /// Bytes from the sandbox to the destination.
    pub bytes_out: u64,
    /// Bytes from the destination to the sandbox.
    pub bytes_in: u64,
    /// How long the connection lasted, in milliseconds.
    pub duration_ms: u64,
    /// Why an allowed attempt still failed (connect refused, timed out, DNS error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Record {
    /// A record started at `start` with no bytes, duration or error yet.
    pub fn new(start: SystemTime, kind: Kind, verdict: Verdict, rule: String) -> Record {
        Record {
            time: humantime::format_rfc3339_millis(start).to_string(),
            kind,
            name: None,
            query_type: None,
            ip: None,
            port: 0,
            verdict,
            rule,
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            error: None,
        }
    }
}

/// The audit log could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The log file could not be opened or created.
    #[error("cannot open the network audit log {}; check that its directory exists and is writable", path.display())]
    Open {
        /// The log path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The writer of `net.log`: shared by every connection, one `write` per record.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    state: Mutex<LogFile>,
}

#[derive(Debug)]
struct LogFile {
    file: Option<File>,
    size: u64,
}

impl AuditLog {
    /// Opens (appends to) the log at `path`.
    pub fn open(path: &Path) -> Result<AuditLog, LogError> {
        let file = open_append(path).map_err(|source| LogError::Open { path: path.to_owned(), source })?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(AuditLog { path: path.to_owned(), state: Mutex::new(LogFile { file: Some(file), size }) })
    }

    /// The log file's path (`net.log`); the rotated one is [`AuditLog::rotated_path`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the previous log goes on rotation: `net.log.1`.
    pub fn rotated_path(path: &Path) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(".1");
        PathBuf::from(name)
    }

    /// Appends one record. A write failure is reported through `tracing` and otherwise
    /// ignored: the network keeps working when the disk is full.
    pub fn write(&self, record: &Record) {
        let mut line = match serde_json::to_vec(record) {
            Ok(line) => line,
            Err(e) => return tracing::warn!("audit record not serialisable: {e}"),
        };
        line.push(b'\n');
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.size + line.len() as u64 > ROTATE_BYTES && state.size > 0 {
            state.file = None;
            if let Err(e) = std::fs::rename(&self.path, Self::rotated_path(&self.path)) {
                tracing::warn!("cannot rotate {}: {e}", self.path.display());
            }
            state.size = 0;
        }
        if state.file.is_none() {
            match open_append(&self.path) {
                Ok(f) => state.file = Some(f),
                Err(e) => return tracing::warn!("cannot reopen {}: {e}", self.path.display()),
            }
        }
        if let Some(file) = state.file.as_mut() {
            match file.write_all(&line) {
                Ok(()) => state.size += line.len() as u64,
                Err(e) => tracing::warn!("cannot write {}: {e}", self.path.display()),
            }
        }
    }
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(rule: &str) -> Record {
        let mut r = Record::new(SystemTime::UNIX_EPOCH, Kind::Tcp, Verdict::Deny, rule.into());
        r.ip = Some("10.0.0.1".parse().expect("ip"));
        r.port = 443;
        r
    }

    #[test]
    fn records_are_json_lines_that_parse_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("net.log");
        let log = AuditLog::open(&path).expect("open");
        log.write(&record("private-range"));
        let mut allowed = record("default");
        allowed.verdict = Verdict::Allow;
        allowed.name = Some("allowed.test".into());
        allowed.bytes_in = 5;
        log.write(&allowed);
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<Record> = text.lines().map(|l| serde_json::from_str(l).expect("json")).collect();
        assert_eq!(lines, vec![record("private-range"), allowed]);
        assert!(text.starts_with(r#"{"time":"1970-01-01T00:00:00.000Z","kind":"tcp","ip":"10.0.0.1","port":443,"verdict":"deny","rule":"private-range""#), "{text}");
    }

    #[test]
    fn the_log_rotates_and_stays_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("net.log");
        let log = AuditLog::open(&path).expect("open");
        let line_len = serde_json::to_vec(&record("x")).expect("json").len() as u64 + 1;
        let n = 2 * ROTATE_BYTES / line_len + 10;
        for _ in 0..n {
            log.write(&record("x"));
        }
        let size = |p: &Path| std::fs::metadata(p).expect("exists").len();
        assert!(size(&path) <= ROTATE_BYTES);
        assert!(size(&AuditLog::rotated_path(&path)) <= ROTATE_BYTES);
        assert!(size(&path) + size(&AuditLog::rotated_path(&path)) >= ROTATE_BYTES, "one old file kept");
        assert!(!dir.path().join("net.log.2").exists());
    }

    #[test]
    fn an_unwritable_directory_is_a_clear_error() {
        let err = AuditLog::open(Path::new("/nonexistent-dir/net.log")).expect_err("no dir");
        assert!(err.to_string().contains("/nonexistent-dir/net.log"), "{err}");
    }
}
