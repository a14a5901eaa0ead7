//! [`Atoll`]: the real `atoll` binary with a private state directory, for tests that boot
//! microVMs. Every sandbox it leaves is force-killed when it is dropped, and a call that
//! hangs is killed and fails the test instead of hanging the suite.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{data_dir, workspace_bin};

/// Generous bound for a boot under software emulation on a busy 2-core machine.
pub const BOOT_TIMEOUT: &str = "240s";

/// Longer than any single `atoll` call can take here (a boot included): a call still
/// running then is hung. A hang guard, not a timing check.
pub const HANG_GUARD: Duration = Duration::from_secs(300);

/// The `minimal` template's directory; fails the test, saying how to build it, if the
/// template is missing.
pub fn minimal_template_dir() -> PathBuf {
    let dir = data_dir().join("templates/minimal");
    assert!(
        dir.join("template.json").is_file(),
        "the `minimal` template is not built ({} is missing); run rootfs/setup.sh",
        dir.join("template.json").display()
    );
    dir
}

/// An ordinary uid nobody on the host has, which read-write shares are given to when
/// the tests run as root ([`own_as_ordinary_user`]).
pub const SHARE_OWNER: u32 = 4243;

/// When the tests run as root, gives `dir` and everything under it (links themselves,
/// not their targets) to [`SHARE_OWNER`]: QEMU never runs as root, so atoll refuses a
/// read-write share no ordinary user owns. Returns the uid that owns `dir`.
pub fn own_as_ordinary_user(dir: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    if rustix::process::geteuid().is_root() {
        let owner = format!("{SHARE_OWNER}:{SHARE_OWNER}");
        let out = Command::new("chown").args(["-R", "-h", &owner]).arg(dir).output().expect("chown");
        assert!(out.status.success(), "chown: {}", text(&out.stderr));
    }
    std::fs::symlink_metadata(dir).unwrap().uid()
}

/// A temp dir with a short path: Unix socket paths must stay under 108 bytes.
/// Mode 0700: atoll refuses a state directory others may enter.
pub fn short_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new().prefix("atoll-vm-").tempdir_in("/tmp").expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod 700");
    dir
}

/// Bytes as text, lossily, for messages and comparisons.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Waits for `child` up to `limit`; kills it and returns `None` if it is still running.
pub fn wait_bounded(child: Child, limit: Duration) -> Option<Output> {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(limit) {
        Ok(out) => Some(out.expect("wait for the child")),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            None
        }
    }
}

/// Polls `done` until it holds, failing after `limit` (a bound on an event, not a timing
/// assertion).
pub fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `atoll` with its own state directory.
pub struct Atoll {
    state: tempfile::TempDir,
    data: Option<PathBuf>,
    netns: Option<String>,
}

impl Atoll {
    /// With the usual data directory, which must hold the `minimal` template.
    pub fn new() -> Atoll {
        minimal_template_dir();
        Atoll { state: short_tempdir(), data: None, netns: None }
    }

    /// Like [`Atoll::new`], but every `atoll` runs inside the network namespace `netns`
    /// (`ip netns exec`), and so do the QEMU and network helper it starts.
    pub fn in_netns(netns: &str) -> Atoll {
        minimal_template_dir();
        Atoll { state: short_tempdir(), data: None, netns: Some(netns.to_owned()) }
    }

    /// With templates taken from `data` instead of the usual data directory.
    pub fn with_data_dir(data: &Path) -> Atoll {
        Atoll { state: short_tempdir(), data: Some(data.to_path_buf()), netns: None }
    }

    /// The private state directory (`ATOLL_STATE_DIR`).
    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// `atoll ARGS`, ready to spawn, with piped output and no inherited target.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(workspace_bin("atoll"));
                c
            }
            None => Command::new(workspace_bin("atoll")),
        };
        cmd.env_remove("ATOLL_AGENT")
            .env_remove("ATOLL_SANDBOX")
            .env("ATOLL_STATE_DIR", self.state.path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(data) = &self.data {
            cmd.env("ATOLL_DATA_DIR", data);
        }
        cmd
    }

    /// Runs `atoll ARGS`; a run that hangs is killed and fails the test.
    pub fn run(&self, args: &[&str]) -> Output {
        let child = self.command(args).spawn().expect("spawn atoll");
        wait_bounded(child, HANG_GUARD)
            .unwrap_or_else(|| panic!("atoll {args:?} hung for {} s and was killed", HANG_GUARD.as_secs()))
    }

    /// Runs `atoll --json ARGS`, asserts success and parses stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        assert!(out.status.success(), "atoll {args:?} failed: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("atoll {args:?} printed no JSON ({e}): {}", text(&out.stdout)))
    }

    /// Runs `atoll ARGS` and asserts that it fails; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(!out.status.success(), "atoll {args:?} should fail; printed {}", text(&out.stdout));
        text(&out.stderr)
    }

    /// `atoll create --name NAME` with a boot timeout fit for software emulation.
    pub fn create(&self, name: &str) -> Value {
        self.create_with(name, &[])
    }

    /// `atoll create --name NAME ARGS` with a boot timeout fit for software emulation.
    pub fn create_with(&self, name: &str, args: &[&str]) -> Value {
        let mut all = vec!["create", "--name", name, "--timeout", BOOT_TIMEOUT];
        all.extend_from_slice(args);
        self.json(&all)
    }

    /// `atoll -s SANDBOX exec -- sh -c SCRIPT`, waiting up to 30 s for the agent to answer;
    /// asserts that it succeeds and returns its stdout.
    pub fn sh(&self, sandbox: &str, script: &str) -> String {
        let out = self.run(&["-s", sandbox, "--connect-timeout", "30s", "exec", "--", "sh", "-c", script]);
        assert!(out.status.success(), "`{script}` in {sandbox} failed: {}", text(&out.stderr));
        text(&out.stdout)
    }

    /// `atoll ls --json` as (name, state) pairs.
    pub fn states(&self) -> Vec<(String, String)> {
        let list = self.json(&["ls"]);
        list.as_array()
            .expect("ls --json is an array")
            .iter()
            .map(|s| (s["name"].as_str().unwrap().to_string(), s["state"].as_str().unwrap().to_string()))
            .collect()
    }

    /// The state `atoll ls` shows for the sandbox `name`, if it is listed.
    pub fn state_of(&self, name: &str) -> Option<String> {
        self.states().into_iter().find(|(n, _)| n == name).map(|(_, state)| state)
    }

    /// Sandbox directories left in the state directory (not `.snapshots`).
    pub fn sandbox_dirs(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.state.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_type().unwrap().is_dir() && !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .collect()
    }
}

impl Default for Atoll {
    fn default() -> Atoll {
        Atoll::new()
    }
}

impl Drop for Atoll {
    fn drop(&mut self) {
        let _ = self.run(&["kill", "--all", "--force"]);
    }
}
