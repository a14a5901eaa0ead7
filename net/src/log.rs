//! The audit log: JSON lines, one per TCP connection when it opens and when it closes
//! (one line for a refused one), per DNS query and per other-UDP destination.
//! [`Record`] is also what readers (`atoll net log`) parse.
//!
//! Each kind has its own file and budget, so that one cannot flush another away
//! ([`AuditLog::paths`]): allowed TCP in `net.log` (the largest, [`ROTATE_BYTES`]),
//! refused TCP in `net-denied.log`, DNS and UDP in `net-dns.log` (each
//! [`LIMITED_ROTATE_BYTES`]). Each file is rotated to `<file>.1` (one old file kept).
//! Refused TCP, DNS and UDP lines are also rate-limited ([`LIMITED_BURST`] at once,
//! [`LIMITED_PER_SEC`] a second after that); what a limit drops is counted and written
//! as one `rule: "rate-limited"` line with `suppressed: N`.
//!
//! A line that cannot be written is an error the caller sees ([`AuditLog::try_write`]);
//! the engine then refuses egress rather than carry it unlogged, and
//! [`AuditLog::health`] tells the helper's status (and so `atoll info`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use crate::policy::Verdict;

/// The size at which `net.log` (allowed TCP) is moved to `net.log.1` and started again.
pub const ROTATE_BYTES: u64 = 8 * 1024 * 1024;
/// The same for the rate-limited files (refused TCP; DNS and UDP).
pub const LIMITED_ROTATE_BYTES: u64 = 2 * 1024 * 1024;
/// Lines a rate-limited file takes at once before its limit starts.
pub const LIMITED_BURST: u32 = 200;
/// Lines a second a rate-limited file takes after its burst.
pub const LIMITED_PER_SEC: u32 = 20;

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
    /// Why an allowed attempt still failed (connect refused, timed out, DNS error), or
    /// why an allowed connection was reset later (a later request named another host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For an allowed TCP connection: `open` (written when it is decided, before
    /// anything goes out) or `close` (when it ends, with bytes and duration). Absent on
    /// the single line of a refused connection, and on DNS and UDP lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<Event>,
    /// The connection's number, the same on its `open` and `close` lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conn: Option<u64>,
    /// An SNI or Host that is not a valid host name, escaped (`\xNN`); the connection
    /// was judged as naming no host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_name: Option<String>,
    /// On a `rate-limited` line: how many lines of this kind the limit dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppressed: Option<u64>,
    /// On a `request` line of an intercepted connection: the secrets whose placeholder
    /// was replaced by the value (names only, never a value; docs/secrets.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// On a `request` line: a placeholder left unswapped, and why (another host, SNI
    /// and Host differ, no value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// Which line of an allowed TCP connection a record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    /// The connection was allowed and is being opened.
    Open,
    /// The connection ended.
    Close,
    /// One HTTP request on a connection intercepted for a secret (docs/secrets.md).
    Request,
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
            event: None,
            conn: None,
            invalid_name: None,
            suppressed: None,
            secret: None,
            warning: None,
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

/// A line could not be written.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "cannot write the network audit log {path}: {reason}; the sandbox's egress is refused until it can be written (free disk space, check the sandbox directory)"
)]
pub struct LogWriteError {
    /// The file.
    pub path: String,
    /// The cause, as text.
    pub reason: String,
}

/// Whether the log is being written.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LogHealth {
    /// Lines that could not be written since the engine started.
    pub failed_writes: u64,
    /// The last failure, while it lasts (cleared by the next line written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The writer of the audit files: shared by every connection, one `write` per record.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    files: [Mutex<LogFile>; 3],
    health: Mutex<LogHealth>,
}

#[derive(Debug)]
struct LogFile {
    path: PathBuf,
    rotate_at: u64,
    file: Option<File>,
    size: u64,
    limit: Option<Bucket>,
}

/// A token bucket with the count of what it refused since the last line it let through.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
    suppressed: u64,
    kind: Kind,
}

impl Bucket {
    fn new(kind: Kind) -> Bucket {
        Bucket { tokens: f64::from(LIMITED_BURST), at: Instant::now(), suppressed: 0, kind }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * f64::from(LIMITED_PER_SEC);
        self.tokens = (self.tokens + refill).min(f64::from(LIMITED_BURST));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }
}

/// Which file a record goes to.
fn class(record: &Record) -> usize {
    match (record.kind, record.verdict) {
        // Both lines of an allowed connection, its close line even when it was reset
        // for a later denied claim.
        (Kind::Tcp, _) if record.event.is_some() => 0,
        (Kind::Tcp, Verdict::Allow) => 0,
        (Kind::Tcp, Verdict::Deny) => 1,
        (Kind::Dns | Kind::Udp, _) => 2,
    }
}

impl AuditLog {
    /// Opens (appends to) the log at `path` and its sibling files ([`AuditLog::paths`]).
    pub fn open(path: &Path) -> Result<AuditLog, LogError> {
        let [tcp, denied, dns] = Self::paths(path);
        let file = |path: PathBuf, rotate_at, limit: Option<Kind>| {
            let file = open_append(&path).map_err(|source| LogError::Open { path: path.clone(), source })?;
            let size = file.metadata().map(|m| m.len()).unwrap_or(0);
            Ok::<_, LogError>(Mutex::new(LogFile {
                path,
                rotate_at,
                file: Some(file),
                size,
                limit: limit.map(Bucket::new),
            }))
        };
        let files = [
            file(tcp, ROTATE_BYTES, None)?,
            file(denied, LIMITED_ROTATE_BYTES, Some(Kind::Tcp))?,
            file(dns, LIMITED_ROTATE_BYTES, Some(Kind::Dns))?,
        ];
        Ok(AuditLog { path: path.to_owned(), files, health: Mutex::default() })
    }

    /// The log file's path (`net.log`); the rotated one is [`AuditLog::rotated_path`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The files of the log at `path` (`DIR/net.log`): allowed TCP (`net.log`), refused
    /// TCP (`net-denied.log`), DNS and UDP (`net-dns.log`); each rotates to `<file>.1`.
    pub fn paths(path: &Path) -> [PathBuf; 3] {
        let sibling = |what: &str| {
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let name = match path.extension() {
                Some(ext) => format!("{stem}-{what}.{}", ext.to_string_lossy()),
                None => format!("{stem}-{what}"),
            };
            path.with_file_name(name)
        };
        [path.to_owned(), sibling("denied"), sibling("dns")]
    }

    /// Where the previous log goes on rotation: `net.log.1`.
    pub fn rotated_path(path: &Path) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(".1");
        PathBuf::from(name)
    }

    /// Appends one record; a failure is recorded in [`AuditLog::health`] and otherwise
    /// ignored. Egress that must not go unlogged uses [`AuditLog::try_write`].
    pub fn write(&self, record: &Record) {
        let _ = self.try_write(record);
    }

    /// Appends one record (or counts it, when its kind's rate limit drops it).
    pub fn try_write(&self, record: &Record) -> Result<(), LogWriteError> {
        let mut file = self.files[class(record)].lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bucket) = file.limit.as_mut() {
            if !bucket.take() {
                return Ok(());
            }
            if bucket.suppressed > 0 {
                let summary = suppressed_line(bucket);
                self.append(&mut file, &summary)?;
            }
        }
        self.append(&mut file, record)
    }

    /// Writes the count of lines the rate limits dropped since their last line, if any
    /// (the engine calls it now and then, so a flood that stopped is still counted).
    pub fn flush_suppressed(&self) {
        for file in &self.files {
            let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
            let Some(bucket) = file.limit.as_mut() else { continue };
            if bucket.suppressed > 0 {
                let summary = suppressed_line(bucket);
                let _ = self.append(&mut file, &summary);
            }
        }
    }

    /// Whether lines are being written, and the failures so far.
    pub fn health(&self) -> LogHealth {
        self.health.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// True while the last line was written (or none failed).
    pub fn healthy(&self) -> bool {
        self.health.lock().unwrap_or_else(|e| e.into_inner()).error.is_none()
    }

    fn append(&self, state: &mut LogFile, record: &Record) -> Result<(), LogWriteError> {
        let result = append(state, record);
        let mut health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        match &result {
            Ok(()) => health.error = None,
            Err(e) => {
                health.failed_writes += 1;
                health.error = Some(e.to_string());
                tracing::warn!("{e}");
            }
        }
        result
    }
}

fn suppressed_line(bucket: &mut Bucket) -> Record {
    let mut summary = Record::new(SystemTime::now(), bucket.kind, Verdict::Deny, "rate-limited".into());
    summary.suppressed = Some(std::mem::take(&mut bucket.suppressed));
    summary
}

fn append(state: &mut LogFile, record: &Record) -> Result<(), LogWriteError> {
    let failed = |reason: String| LogWriteError { path: state.path.display().to_string(), reason };
    let mut line = serde_json::to_vec(record).map_err(|e| failed(e.to_string()))?;
    line.push(b'\n');
    if state.size + line.len() as u64 > state.rotate_at && state.size > 0 {
        state.file = None;
        if let Err(e) = std::fs::rename(&state.path, AuditLog::rotated_path(&state.path)) {
            tracing::warn!("cannot rotate {}: {e}", state.path.display());
        }
        state.size = 0;
    }
    if state.file.is_none() {
        state.file = Some(open_append(&state.path).map_err(|e| failed(e.to_string()))?);
    }
    let file = state.file.as_mut().ok_or_else(|| failed("not open".into()))?;
    if let Err(e) = file.write_all(&line) {
        // A line written in part is cut off again, so the next one starts a line.
        let _ = file.set_len(state.size);
        return Err(failed(e.to_string()));
    }
    state.size += line.len() as u64;
    Ok(())
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(verdict: Verdict, rule: &str) -> Record {
        let mut r = Record::new(SystemTime::UNIX_EPOCH, Kind::Tcp, verdict, rule.into());
        r.ip = Some("10.0.0.1".parse().expect("ip"));
        r.port = 443;
        r
    }

    fn lines(path: &Path) -> Vec<Record> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).expect("json")).collect()
    }

    #[test]
    fn records_are_json_lines_that_parse_back_each_kind_in_its_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("net.log");
        let log = AuditLog::open(&path).expect("open");
        log.write(&record(Verdict::Deny, "private-range"));
        let mut allowed = record(Verdict::Allow, "default");
        allowed.name = Some("allowed.test".into());
        allowed.event = Some(Event::Open);
        allowed.conn = Some(7);
        allowed.bytes_in = 5;
        log.write(&allowed);
        let mut dns = Record::new(SystemTime::UNIX_EPOCH, Kind::Dns, Verdict::Allow, "default".into());
        dns.name = Some("allowed.test".into());
        log.write(&dns);
        let [tcp, denied, dns_path] = AuditLog::paths(&path);
        assert_eq!(tcp, path);
        assert_eq!(denied, dir.path().join("net-denied.log"));
        assert_eq!(dns_path, dir.path().join("net-dns.log"));
        assert_eq!(lines(&tcp), vec![allowed]);
        assert_eq!(lines(&denied), vec![record(Verdict::Deny, "private-range")]);
        assert_eq!(lines(&dns_path), vec![dns]);
        let text = std::fs::read_to_string(&denied).expect("read");
        assert!(text.starts_with(r#"{"time":"1970-01-01T00:00:00.000Z","kind":"tcp","ip":"10.0.0.1","port":443,"verdict":"deny","rule":"private-range""#), "{text}");
        assert!(std::fs::read_to_string(&tcp).expect("read").contains(r#""event":"open","conn":7"#));
        assert!(log.healthy());
    }

    #[test]
    fn the_log_rotates_and_stays_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("net.log");
        let log = AuditLog::open(&path).expect("open");
        let line = record(Verdict::Allow, "x");
        let line_len = serde_json::to_vec(&line).expect("json").len() as u64 + 1;
        let n = 2 * ROTATE_BYTES / line_len + 10;
        for _ in 0..n {
            log.write(&line);
        }
        let size = |p: &Path| std::fs::metadata(p).expect("exists").len();
        assert!(size(&path) <= ROTATE_BYTES);
        assert!(size(&AuditLog::rotated_path(&path)) <= ROTATE_BYTES);
        assert!(size(&path) + size(&AuditLog::rotated_path(&path)) >= ROTATE_BYTES, "one old file kept");
        assert!(!dir.path().join("net.log.2").exists());
    }

    #[test]
    fn a_dns_flood_is_rate_limited_counted_and_never_touches_the_tcp_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("net.log");
        let log = AuditLog::open(&path).expect("open");
        let mut exfil = record(Verdict::Allow, "default");
        exfil.name = Some("exfil.test".into());
        log.write(&exfil);
        let flood = 100_000u64;
        for i in 0..flood {
            let mut q = Record::new(SystemTime::now(), Kind::Dns, Verdict::Allow, "default".into());
            q.name = Some(format!("x{i}.flood.test"));
            log.write(&q);
        }
        log.flush_suppressed();
        assert_eq!(lines(&path), vec![exfil], "the TCP line stays, alone in its file");
        let [_, _, dns] = AuditLog::paths(&path);
        let written = lines(&dns);
        let named = written.iter().filter(|r| r.suppressed.is_none()).count() as u64;
        let suppressed: u64 = written.iter().filter_map(|r| r.suppressed).sum();
        assert_eq!(named + suppressed, flood, "every query is either written or counted");
        assert!(named < flood / 10, "the flood was limited: {named} lines written");
        assert!(written.iter().any(|r| r.rule == "rate-limited" && r.kind == Kind::Dns));
        assert!(std::fs::metadata(&dns).expect("exists").len() <= LIMITED_ROTATE_BYTES);
    }

    #[test]
    fn a_write_that_fails_is_an_error_and_shows_in_the_health() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("net.log");
        let log = AuditLog::open(&path).expect("open");
        log.try_write(&record(Verdict::Allow, "x")).expect("first line");
        // The next line rotates into a directory that is gone: the file cannot be
        // reopened, so the line is not written.
        log.files[0].lock().expect("lock").size = ROTATE_BYTES;
        std::fs::remove_dir_all(dir.path()).expect("rm");
        let err = log.try_write(&record(Verdict::Allow, "x")).expect_err("no directory");
        assert!(err.to_string().contains("egress is refused"), "{err}");
        assert!(!log.healthy());
        let health = log.health();
        assert_eq!(health.failed_writes, 1);
        assert!(health.error.is_some_and(|e| e.contains("net.log")));
    }

    #[test]
    fn an_unwritable_directory_is_a_clear_error() {
        let err = AuditLog::open(Path::new("/nonexistent-dir/net.log")).expect_err("no dir");
        assert!(err.to_string().contains("/nonexistent-dir/net.log"), "{err}");
    }
}
