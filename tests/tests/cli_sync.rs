//! What reaches the disk and when: `atoll write` and `atoll cp` leave flushing to the
//! kernel unless given `--sync`, and then flush the destination before they return,
//! on whichever side it is. Proved by tracing the real agent's (or the real `atoll`'s)
//! sync system calls with strace.

mod cli_util;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use atoll_tests::{Agent, noise, workspace_bin};
use cli_util::{atoll, atoll_stdin, ok, s};

/// The system calls that flush data to disk.
const SYNC_CALLS: &str = "trace=fsync,fdatasync,syncfs,sync,sync_file_range";

/// strace attached to a running process, logging its sync calls with the paths of
/// their file descriptors (`fsync(7</dir/file>)`).
struct Tracer {
    strace: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tracer {
    /// Attaches to every thread of `pid` (and those it starts later) and returns once
    /// all of them are traced. `pid` must allow it: [`Agent::start_traceable`].
    fn attach(pid: u32) -> Tracer {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("strace.log");
        let mut strace = Command::new(strace_bin())
            .args(["-f", "-qq", "-y", "-e", SYNC_CALLS, "-o"])
            .arg(&log)
            .args(["-p", &pid.to_string()])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn strace");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !all_threads_traced_by(pid, strace.id()) {
            if let Ok(Some(status)) = strace.try_wait() {
                panic!(
                    "strace could not attach to {pid} ({status}); it needs ptrace rights over it \
                     (CAP_SYS_PTRACE, or a `kernel.yama.ptrace_scope` of 0 or 1)"
                );
            }
            assert!(Instant::now() < deadline, "strace did not attach to {pid} within 20 s");
            std::thread::sleep(Duration::from_millis(10));
        }
        Tracer { strace, log, _dir: dir }
    }

    /// Detaches and returns the sync calls seen, one per line.
    fn finish(mut self) -> Vec<String> {
        // SIGINT makes strace detach and flush its log; the traced process runs on.
        let _ = Command::new("kill").args(["-INT", &self.strace.id().to_string()]).status();
        let _ = self.strace.wait();
        sync_lines(&self.log)
    }
}

/// `strace`, or a failure that says how to get it.
fn strace_bin() -> &'static str {
    let found = Command::new("strace").arg("-V").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    assert!(found, "strace is not installed; `rootfs/setup.sh --with-test-tools` installs it");
    "strace"
}

fn all_threads_traced_by(pid: u32, tracer: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    let tracer = tracer.to_string();
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("status")).is_ok_and(|status| {
            status
                .lines()
                .any(|l| l.starts_with("TracerPid:") && l.split_whitespace().nth(1) == Some(&tracer))
        })
    })
}

/// `dir` as strace prints it: symlinks resolved.
fn real(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir).unwrap()
}

/// The lines of an strace log that are sync calls (not signals or exits).
fn sync_lines(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().filter(|l| l.contains("sync")).map(str::to_owned).collect()
}

/// Runs the real `atoll` under strace; returns its sync calls.
fn traced_atoll(addr: &str, args: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("strace.log");
    let out = Command::new(strace_bin())
        .args(["-f", "-qq", "-y", "-e", SYNC_CALLS, "-o"])
        .arg(&log)
        .arg("--")
        .arg(workspace_bin("atoll"))
        .args(["--agent", addr])
        .args(args)
        .env_remove("ATOLL_AGENT")
        .env_remove("ATOLL_SANDBOX")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run atoll under strace");
    ok(&out);
    sync_lines(&log)
}

/// How many of `calls` are `call` on a descriptor whose path, as strace prints it
/// (`<path>`), contains `path_part`.
fn count(calls: &[String], call: &str, path_part: &str) -> usize {
    calls.iter().filter(|l| l.contains(&format!("{call}(")) && l.contains(path_part)).count()
}

#[test]
fn a_write_is_flushed_only_with_sync() {
    let agent = Agent::start_traceable();
    let dir = real(agent.dir.path()).join("work");
    std::fs::create_dir(&dir).unwrap();
    let addr = agent.address();
    let tracer = Tracer::attach(agent.pid());

    let plain = dir.join("plain.txt");
    ok(&atoll_stdin(&addr, &["write", s(&plain)], &[b'p'; 1024]));
    let unsynced = tracer.finish();
    assert_eq!(std::fs::read(&plain).unwrap(), vec![b'p'; 1024]);
    assert!(unsynced.is_empty(), "a write without --sync flushed: {unsynced:#?}");

    // Small (whole in one message) and large (streamed) writes take different paths.
    let big_src = dir.with_file_name("big.src");
    std::fs::write(&big_src, noise(3 << 20, 7)).unwrap();
    for (name, args) in [("small.txt", None), ("big.bin", Some(&big_src))] {
        let target = dir.join(name);
        let tracer = Tracer::attach(agent.pid());
        match args {
            None => ok(&atoll_stdin(&addr, &["write", "--sync", s(&target)], &[b's'; 1024])),
            Some(src) => ok(&atoll(&addr, &["write", "--sync", "--from", s(src), s(&target)])),
        };
        let calls = tracer.finish();
        let temp = format!("<{}/.atoll-write-", s(&dir));
        assert_eq!(count(&calls, "fsync", &temp), 1, "{name}: the temp file was not fsynced: {calls:#?}");
        let parent = format!("<{}>", s(&dir));
        assert_eq!(count(&calls, "fsync", &parent), 1, "{name}: the directory was not fsynced: {calls:#?}");
    }
    assert_eq!(std::fs::read(dir.join("small.txt")).unwrap(), vec![b's'; 1024]);
    assert_eq!(std::fs::read(dir.join("big.bin")).unwrap(), noise(3 << 20, 7));
}

#[test]
fn cp_sync_flushes_the_destination_on_either_side() {
    let agent = Agent::start_traceable();
    let addr = agent.address();
    let host_dir = tempfile::tempdir().unwrap();
    let host = real(host_dir.path());
    let tree = host.join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    std::fs::write(tree.join("a.txt"), b"a").unwrap();
    std::fs::write(tree.join("sub/b.txt"), b"b").unwrap();
    let guest = &real(agent.dir.path());

    // Host to guest, a directory: the agent extracts it and, with --sync, flushes its
    // filesystem once; without, not at all.
    let tracer = Tracer::attach(agent.pid());
    ok(&atoll(&addr, &["cp", s(&tree), &format!(":{}/plain", s(guest))]));
    let plain = tracer.finish();
    assert!(plain.is_empty(), "cp of a directory without --sync flushed: {plain:#?}");
    let tracer = Tracer::attach(agent.pid());
    ok(&atoll(&addr, &["cp", "--sync", s(&tree), &format!(":{}/synced", s(guest))]));
    let synced = tracer.finish();
    assert_eq!(count(&synced, "syncfs", &format!("<{}/synced>", s(guest))), 1, "{synced:#?}");
    assert_eq!(std::fs::read(guest.join("synced/sub/b.txt")).unwrap(), b"b");

    // Host to guest, a file: WriteFile with sync.
    let tracer = Tracer::attach(agent.pid());
    ok(&atoll(&addr, &["cp", "--sync", s(&tree.join("a.txt")), &format!(":{}/a.txt", s(guest))]));
    let calls = tracer.finish();
    assert_eq!(count(&calls, "fsync", &format!("<{}/.atoll-write-", s(guest))), 1, "{calls:#?}");

    // Guest to host: atoll itself flushes the file, or the filesystem of the directory.
    let back = host.join("back.txt");
    let calls = traced_atoll(&addr, &["cp", &format!(":{}/a.txt", s(guest)), s(&back)]);
    assert!(calls.is_empty(), "cp to the host without --sync flushed: {calls:#?}");
    let back = host.join("back-synced.txt");
    let calls = traced_atoll(&addr, &["cp", "--sync", &format!(":{}/a.txt", s(guest)), s(&back)]);
    assert_eq!(count(&calls, "fsync", &format!("<{}/", s(&host))), 1, "the file was not fsynced: {calls:#?}");
    assert_eq!(
        count(&calls, "fsync", &format!("<{}>", s(&host))),
        1,
        "its directory was not fsynced: {calls:#?}"
    );
    assert_eq!(std::fs::read(&back).unwrap(), b"a");
    let back_tree = host.join("back-tree");
    let calls = traced_atoll(&addr, &["cp", "--sync", &format!(":{}/synced", s(guest)), s(&back_tree)]);
    assert_eq!(count(&calls, "syncfs", &format!("<{}>", s(&back_tree))), 1, "{calls:#?}");
    assert_eq!(std::fs::read(back_tree.join("sub/b.txt")).unwrap(), b"b");
}
