//! Copies out of a guest whose agent is taken over (issue 30 item 7), attacked from
//! where that attacker sits: the agent's end of the gRPC contract. A fake agent process
//! (`hostile-agent`, the generated tonic server) serves zip bombs, too many entries,
//! names that climb out, links, duplicates, streams that stall or never end and files
//! longer than announced, and the real `atoll` binary copies from it (`cp :/d`, `cp
//! :/f`, `download`, and the `sandbox_files_download_dir` MCP tool).
//!
//! Each case must fail with a message that names what was refused (and the flag that
//! raises a cap), leave nothing at or beside the destination (only the canary the test
//! put there, unchanged, and nothing above it), keep atoll's peak RSS (`wait4`'s
//! `ru_maxrss`) far below what the bomb inflates to, and end in bounded time. The same
//! fake serving an honest zip gives the right files.

mod cli_util;
mod hostile_util;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cli_util::{McpStdio, atoll_cmd};
use hostile_util::{Host, Hostile};

/// No case may run longer (the stall cases wait out a 3 s idle timeout).
const BOUND: Duration = Duration::from_secs(60);
/// atoll's peak RSS must stay under this; the bombs inflate to 256 MiB.
const RSS_CAP_KIB: i64 = 96 * 1024;
/// What the bombs inflate to.
const BOMB_BYTES: usize = 256 << 20;
/// The cap most cases copy under.
const CAP: &str = "8388608";

/// What one run of atoll did.
struct Ran {
    code: Option<i32>,
    stderr: String,
    peak_rss_kib: i64,
    took: Duration,
}

/// Runs `cmd` to its end (killed past [`BOUND`] plus a margin), with its peak RSS.
// The child is reaped by `wait4`, which clippy does not see.
#[allow(clippy::zombie_processes)]
fn run(mut cmd: Command, stdin: &[u8]) -> Ran {
    let started = Instant::now();
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_vec();
    std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let pid = i32::try_from(child.id()).unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if done_rx.recv_timeout(BOUND + Duration::from_secs(30)).is_err() {
            // SAFETY: kill(2) on our own child's pid, which we have not reaped yet.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child with valid out-pointers.
    let got = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(got, pid, "wait4");
    let _ = done_tx.send(());
    let _ = out.join().unwrap();
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Ran {
        code,
        stderr: String::from_utf8_lossy(&err.join().unwrap()).into_owned(),
        peak_rss_kib: usage.ru_maxrss,
        took: started.elapsed(),
    }
}

// ------------------------------------------------------------------- raw zips

/// One entry of a hand-made zip: whatever the writer says, true or not.
#[derive(Clone)]
struct Raw {
    name: String,
    /// Bytes as stored (deflated unless `method` is 0).
    stored: Vec<u8>,
    method: u16,
    crc: u32,
    /// The uncompressed size the headers claim.
    claimed: u32,
    /// Unix mode (with its type bits).
    mode: u32,
    /// Point this central entry at entry N's local header and data instead of its own.
    shares: Option<usize>,
    /// No local header of its own: its index entry points at this offset (a local
    /// header with its name, hidden inside another entry's stored data).
    hidden_at: Option<u32>,
}

/// A deflated entry of `len` bytes of `byte`, made without holding them all.
fn entry(name: &str, byte: u8, len: usize) -> Raw {
    let mut enc = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
    let mut crc = flate2::Crc::new();
    let piece = vec![byte; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(piece.len());
        enc.write_all(&piece[..n]).unwrap();
        crc.update(&piece[..n]);
        left -= n;
    }
    Raw {
        name: name.into(),
        stored: enc.finish().unwrap(),
        method: 8,
        crc: crc.sum(),
        claimed: u32::try_from(len).unwrap_or(u32::MAX),
        mode: 0o100644,
        shares: None,
        hidden_at: None,
    }
}

fn file(name: &str, content: &[u8]) -> Raw {
    let mut crc = flate2::Crc::new();
    crc.update(content);
    Raw {
        name: name.into(),
        stored: content.to_vec(),
        method: 0,
        crc: crc.sum(),
        claimed: u32_of(content.len()),
        mode: 0o100644,
        shares: None,
        hidden_at: None,
    }
}

fn dir(name: &str) -> Raw {
    Raw { mode: 0o040755, ..file(name, b"") }
}

fn symlink(name: &str, target: &str) -> Raw {
    Raw { mode: 0o120777, ..file(name, target.as_bytes()) }
}

fn u32_of(n: usize) -> u32 {
    u32::try_from(n).expect("test zips stay under 4 GiB")
}

fn u16_of(n: usize) -> u16 {
    u16::try_from(n).expect("test names stay short")
}

/// `e`'s local header and data.
fn local(e: &Raw) -> Vec<u8> {
    let mut out = 0x0403_4b50u32.to_le_bytes().to_vec();
    for v in [20u16, 0, e.method, 0, 0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for v in [e.crc, u32_of(e.stored.len()), e.claimed] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for v in [u16_of(e.name.len()), 0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(e.name.as_bytes());
    out.extend_from_slice(&e.stored);
    out
}

/// Writes `entries` as a zip at `path` (local headers, data, index, end record).
fn write_zip(path: &Path, entries: &[Raw]) {
    let mut out = Vec::new();
    let mut offsets = Vec::new();
    for e in entries {
        if e.shares.is_some() || e.hidden_at.is_some() {
            offsets.push(e.hidden_at.unwrap_or(0));
            continue;
        }
        offsets.push(u32_of(out.len()));
        out.extend_from_slice(&local(e));
    }
    let index_at = u32_of(out.len());
    for (i, e) in entries.iter().enumerate() {
        let (src, at) = match e.shares {
            Some(n) => (&entries[n], offsets[n]),
            None => (e, offsets[i]),
        };
        out.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        for v in [0x0314u16, 20, 0, src.method, 0, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [src.crc, u32_of(src.stored.len()), e.claimed] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [u16_of(e.name.len()), 0, 0, 0, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [e.mode << 16, at] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(e.name.as_bytes());
    }
    let index_len = u32_of(out.len()) - index_at;
    let count = u16::try_from(entries.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    for v in [0u16, 0, count, count] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for v in [index_len, index_at] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&0u16.to_le_bytes());
    std::fs::write(path, out).unwrap();
}

// ------------------------------------------------------------------- the host side

/// Runs `atoll --agent ADDR ARGS` and checks it failed as a refusal should.
fn refused(case: &str, agent: &Hostile, host: &Host, args: &[&str], says: &[&str]) -> Ran {
    let ran = run(atoll_cmd(&agent.addr(), args), b"");
    assert!(ran.code.is_some_and(|c| c != 0), "{case}: exit {:?}: {}", ran.code, ran.stderr);
    for s in says {
        assert!(ran.stderr.contains(s), "{case}: the message does not say `{s}`: {}", ran.stderr);
    }
    assert!(ran.took < BOUND, "{case}: took {:?}", ran.took);
    assert!(ran.peak_rss_kib < RSS_CAP_KIB, "{case}: atoll's peak RSS was {} KiB", ran.peak_rss_kib);
    host.untouched(case);
    ran
}

/// `cp :/d DST` under `cap` bytes and 1000 entries, giving up after 3 s of silence.
fn cp_dir(host: &Host, cap: &str) -> Vec<String> {
    let dst = host.dst().to_str().unwrap().to_owned();
    ["cp", ":/d", &dst, "--max-unpacked-bytes", cap, "--max-entries", "1000", "--idle-timeout", "3s"]
        .map(String::from)
        .to_vec()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A folder copied from a hostile agent: each hostile zip is refused whole.
#[test]
fn hostile_zips_are_refused_and_leave_nothing() {
    let zips = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let zip = |name: &str, entries: Vec<Raw>| {
        let p = zips.path().join(name);
        write_zip(&p, &entries);
        p
    };
    let zeros = entry("zeros", 0, BOMB_BYTES);
    let bomb = zip("bomb.zip", vec![zeros.clone()]);
    assert!(std::fs::metadata(&bomb).unwrap().len() < 512 << 10, "the bomb is small");
    let liar = Raw { claimed: 100, ..zeros };
    let liar = zip("liar.zip", vec![liar]);
    let mut overlap = vec![entry("f0", 0, 4 << 20)];
    for i in 1..64 {
        overlap.push(Raw { shares: Some(0), ..entry(&format!("f{i}"), 0, 0) });
        overlap[i].claimed = 4 << 20;
    }
    let overlap = zip("overlap.zip", overlap);
    // Names and headers that agree, data that overlaps: the stored entry `a` holds
    // `b`'s whole local header and deflated bomb, and the index points at both.
    let inner = entry("b", 0, 64 << 20);
    let outer = file("a", &local(&inner));
    let hidden = Raw { hidden_at: Some(30 + 1), ..inner };
    let nested = zip("nested.zip", vec![outer, hidden]);
    let many = zip("many.zip", (0..60_000).map(|i| file(&format!("{i}"), b"")).collect());
    let link_target = outside.path().to_str().unwrap().to_owned();
    // One folder 32,000 levels deep (a 64 KB name), then a bomb: refused by its depth
    // before anything is written. Unpacked, the bomb's refusal left a staging folder
    // that could not be removed (a handle per level; deeper still, the stack overflowed
    // and atoll aborted).
    let deep = zip("deep.zip", vec![dir(&"a/".repeat(32_000)), entry("z", 0, 16 << 20)]);

    let cases: Vec<(&str, PathBuf, Vec<&str>)> = vec![
        ("a deflate bomb", bomb.clone(), vec!["more than 8388608 bytes", "--max-unpacked-bytes"]),
        ("headers that lie about sizes", liar, vec!["nothing was extracted"]),
        ("entries sharing one bomb's data", overlap, vec!["header inconsistency", "nothing was extracted"]),
        ("an entry hidden inside another's data", nested, vec!["overlapping", "nothing was extracted"]),
        ("more entries than the cap", many, vec!["60000 entries, over the limit of 1000", "--max-entries"]),
        (
            "`../x`",
            zip("up.zip", vec![file("ok", b"ok"), file("../x", b"x")]),
            vec!["`../x` would land outside"],
        ),
        (
            "`/abs`",
            zip("abs.zip", vec![file("ok", b"ok"), file("/tmp/abs", b"x")]),
            vec!["`/tmp/abs` would land outside"],
        ),
        (
            "`a/../../x`",
            zip("mid.zip", vec![dir("a/"), file("a/../../x", b"x")]),
            vec!["`a/../../x` would land outside"],
        ),
        (
            "a link out, then a file through it",
            zip("link.zip", vec![symlink("l", &link_target), file("l/x", b"x")]),
            vec!["`l` is a symlink"],
        ),
        ("a name twice", zip("dup.zip", vec![file("x", b"one"), file("x", b"two")]), vec!["twice"]),
        (
            "a file that becomes a folder",
            zip("filedir.zip", vec![file("a", b"file"), file("a/b", b"below")]),
            vec!["both a file and a folder"],
        ),
        ("garbage after the end record", zip("junk.zip", vec![]), vec!["not a well-formed zip"]),
        (
            "a folder 32,000 levels deep",
            deep,
            vec!["32000 levels deep, over the 256", "nothing was extracted"],
        ),
    ];
    // A zip of no entries is fine; garbage after its end record is not.
    let junk = zips.path().join("junk.zip");
    let mut bytes = std::fs::read(&junk).unwrap();
    bytes.extend_from_slice(b"trailing junk");
    std::fs::write(&junk, bytes).unwrap();

    for (case, zip, says) in cases {
        let agent = Hostile::start("zip", Some(&zip));
        let host = Host::new();
        let ran = refused(case, &agent, &host, &strs(&cp_dir(&host, CAP)), &says);
        eprintln!("{case}: {} KiB peak, {:?}: {}", ran.peak_rss_kib, ran.took, ran.stderr.trim());
    }
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0, "written through the link");

    // The flag that raises the cap lets the same bomb through, whole.
    let agent = Hostile::start("zip", Some(&bomb));
    let host = Host::new();
    let args = cp_dir(&host, "300000000");
    let ran = run(atoll_cmd(&agent.addr(), &strs(&args)), b"");
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert_eq!(std::fs::metadata(host.dst().join("zeros")).unwrap().len(), BOMB_BYTES as u64);
    assert!(ran.peak_rss_kib < RSS_CAP_KIB, "inflating 256 MiB took {} KiB of RSS", ran.peak_rss_kib);
}

/// The positive control: the same fake serving an honest zip gives the right files.
#[test]
fn an_honest_zip_from_the_same_fake_lands_whole() {
    let zips = tempfile::tempdir().unwrap();
    let path = zips.path().join("ok.zip");
    let mut exe = file("a/run.sh", b"#!/bin/sh\necho hi\n");
    exe.mode = 0o104777;
    write_zip(&path, &[dir("a/"), exe, entry("a/b/zeros", 0, 1 << 20), file("top", b"top\n"), dir("empty/")]);
    let agent = Hostile::start("zip", Some(&path));
    let host = Host::new();
    let ran = run(atoll_cmd(&agent.addr(), &strs(&cp_dir(&host, CAP))), b"");
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(
        !ran.stderr.contains('\x1b') && !ran.stderr.contains('\x07'),
        "a guest's escapes reached the terminal"
    );
    assert!(ran.stderr.contains("s0\\u{1b}]0;pwned"), "the first entries left out are named: {}", ran.stderr);
    assert!(ran.stderr.contains("left out 5 more entries"), "{}", ran.stderr);
    let dst = host.dst();
    assert_eq!(std::fs::read(dst.join("a/run.sh")).unwrap(), b"#!/bin/sh\necho hi\n");
    assert_eq!(std::fs::read(dst.join("a/b/zeros")).unwrap(), vec![0u8; 1 << 20]);
    assert_eq!(std::fs::read(dst.join("top")).unwrap(), b"top\n");
    assert!(dst.join("empty").is_dir());
    let mode = std::fs::metadata(dst.join("a/run.sh")).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode & 0o7002, 0, "setuid or world-writable from the guest: {mode:o}");
    let mut left: Vec<_> =
        std::fs::read_dir(host.root.path().join("host")).unwrap().map(|e| e.unwrap().file_name()).collect();
    left.sort();
    assert_eq!(left, ["canary", "out"], "no staging left beside it");
}

/// Folders deep and long-named within the caps (16 of 256 levels of 250-byte names, a
/// 1 MB index) cost atoll their bytes, not their depth times their length: each folder
/// above each entry once held as its own path took 8 MB an entry (170 MB here; with the
/// default --max-entries a 200 MB index of such names asked for tens of GB).
#[test]
fn deep_long_names_cost_their_bytes() {
    let zips = tempfile::tempdir().unwrap();
    let path = zips.path().join("long.zip");
    let level = format!("{}/", "c".repeat(250));
    let names: Vec<String> = (0..16).map(|i| format!("x{i:02}/{}", level.repeat(255))).collect();
    write_zip(&path, &names.iter().map(|n| dir(n)).collect::<Vec<_>>());
    let agent = Hostile::start("zip", Some(&path));
    let host = Host::new();
    let ran = run(atoll_cmd(&agent.addr(), &strs(&cp_dir(&host, CAP))), b"");
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(ran.peak_rss_kib < RSS_CAP_KIB, "atoll's peak RSS was {} KiB", ran.peak_rss_kib);
    for name in &names {
        let mut at =
            rustix::fs::open(host.dst(), rustix::fs::OFlags::PATH, rustix::fs::Mode::empty()).unwrap();
        for part in name.trim_end_matches('/').split('/') {
            at = rustix::fs::openat(
                &at,
                part,
                rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
                rustix::fs::Mode::empty(),
            )
            .unwrap_or_else(|e| panic!("{part}: {e}"));
        }
    }
}

/// Streams that stall or never end, for folders (`cp`, `download`) and single files.
#[test]
fn streams_that_stall_or_never_end_are_given_up() {
    let host = Host::new();
    let dst = host.dst();
    let dst = dst.to_str().unwrap();
    let zip_out = host.root.path().join("host/out.zip");
    let zip_out = zip_out.to_str().unwrap();
    let cp_flags = ["--max-unpacked-bytes", CAP, "--max-entries", "1000", "--idle-timeout", "3s"];
    let cases: Vec<(&str, &str, Vec<&str>, Vec<&str>)> = vec![
        (
            "a folder's zip that stalls",
            "zip-stall",
            [&["cp", ":/d", dst][..], &cp_flags].concat(),
            vec!["sent nothing for 3", "--idle-timeout"],
        ),
        (
            "a folder's zip that never ends",
            "zip-endless",
            [&["cp", ":/d", dst][..], &cp_flags].concat(),
            vec!["--max-unpacked-bytes 8388608", "--max-entries 1000"],
        ),
        (
            "a zip download that stalls",
            "zip-stall",
            vec!["download", "/d", "-o", zip_out, "--idle-timeout", "3s"],
            vec!["sent nothing for 3", "--idle-timeout"],
        ),
        (
            "a zip download that never ends",
            "zip-endless",
            vec!["download", "/d", "-o", zip_out, "--max-bytes", "5000000"],
            vec!["passed --max-bytes 5000000", "raise --max-bytes"],
        ),
        (
            "a zip with no summary",
            "zip-no-summary",
            [&["cp", ":/d", dst][..], &cp_flags].concat(),
            vec!["without its summary"],
        ),
        (
            "a file longer than announced",
            "file",
            [&["cp", ":/f", dst][..], &cp_flags].concat(),
            vec!["more than the 10 bytes it announced"],
        ),
        (
            "a file that stalls",
            "file-stall",
            [&["cp", ":/f", dst][..], &cp_flags].concat(),
            vec!["sent nothing for 3", "--idle-timeout"],
        ),
        (
            "a file of no announced size that never ends",
            "file-unsized",
            [&["cp", ":/f", dst][..], &cp_flags].concat(),
            vec!["--max-unpacked-bytes 8388608"],
        ),
    ];
    let no_summary = tempfile::NamedTempFile::new().unwrap();
    write_zip(no_summary.path(), &[file("x", b"x")]);
    for (case, mode, args, says) in cases {
        let arg = match mode {
            "file" => Some(Path::new("104857600")),
            "zip-no-summary" => Some(no_summary.path()),
            _ => None,
        };
        let agent = Hostile::start(mode, arg);
        let ran = refused(case, &agent, &host, &args, &says);
        eprintln!("{case}: {} KiB peak, {:?}: {}", ran.peak_rss_kib, ran.took, ran.stderr.trim());
    }
}

/// `sandbox_files_download_dir` against a zip that never ends: a tool error at its
/// 10 MiB inline cap, memory bounded, and the server keeps serving.
#[test]
fn the_mcp_tool_gives_up_on_a_zip_that_never_ends() {
    mcp_tool_gives_up("zip-endless", "is over the 10 MiB inline limit", 2);
}

/// `sandbox_files_download_dir` against a zip that stalls: a tool error after the 60 s
/// a transfer may go silent by default, once.
#[test]
fn the_mcp_tool_gives_up_on_a_zip_that_stalls() {
    mcp_tool_gives_up("zip-stall", "the agent sent nothing for 60 s", 1);
}

/// `atoll mcp --idle-timeout 3s`: both tools that read from the guest
/// (`sandbox_files_download_dir` against a zip that stalls, `sandbox_files_read`
/// against a file that stalls after 5 of its 10 bytes) give up after 3 s of silence, not
/// the default 60, with a tool error that names the flag; the server keeps serving.
#[test]
fn mcp_idle_timeout_bounds_every_read_from_the_guest() {
    let cases = [
        ("zip-stall", "sandbox_files_download_dir", serde_json::json!({"path": "/d"})),
        ("file-stall", "sandbox_files_read", serde_json::json!({"path": "/f"})),
    ];
    for (mode, tool, args) in cases {
        let agent = Hostile::start(mode, None);
        let mut mcp = McpStdio::start(atoll_cmd(&agent.addr(), &["mcp", "--idle-timeout", "3s"]));
        for id in 2..4 {
            let started = Instant::now();
            let reply = mcp.call_tool(id, tool, args.clone());
            let took = started.elapsed();
            assert_eq!(reply["result"]["isError"], true, "{tool}: {reply}");
            let text = reply["result"]["content"][0]["text"].as_str().unwrap_or_default();
            for says in ["the agent sent nothing for 3 s", "`atoll mcp` wait longer with --idle-timeout"] {
                assert!(text.contains(says), "{tool}: the error does not say `{says}`: {text}");
            }
            assert!(took < Duration::from_secs(30), "{tool} took {took:?}, as if the 60 s default held");
        }
    }
}

/// `atoll mcp` against a hostile agent in `mode`: `calls` calls of
/// `sandbox_files_download_dir`, each a tool error that `says`, in bounded time and RSS.
fn mcp_tool_gives_up(mode: &str, says: &str, calls: u64) {
    let agent = Hostile::start(mode, None);
    let mut mcp = McpStdio::start(atoll_cmd(&agent.addr(), &["mcp"]));
    let pid = mcp.pid();
    for id in 2..2 + calls {
        let started = Instant::now();
        let reply = mcp.call_tool(id, "sandbox_files_download_dir", serde_json::json!({"path": "/d"}));
        let result = &reply["result"];
        assert_eq!(result["isError"], true, "{reply}");
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains(says), "{reply}");
        let took = started.elapsed();
        assert!(took < BOUND + Duration::from_secs(30), "the tool call took {took:?}");
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hwm: i64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(hwm < RSS_CAP_KIB, "atoll mcp's peak RSS was {hwm} KiB");
}
