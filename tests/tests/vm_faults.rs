//! Faults under a real microVM: the VM's QEMU is SIGKILLed while an `sbx exec` is
//! streaming a long command from it. The CLI must end on its own with exit 69 and a
//! message that says the connection was lost (vhost-device-vsock outlives QEMU, so this
//! proves the hybrid-vsock stream really sees the end), `sbx ls` must show the sandbox
//! `dead`, and `sbx kill` must leave no process and no state behind.
//!
//! These boot the `minimal` template that `rootfs/setup.sh` builds into the sbx data
//! directory; without it they fail and say so. Each test has its own state directory.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use sbx_tests::{data_dir, pid_gone, processes_mentioning};
use serde_json::Value;

/// Generous bound for a boot under software emulation on a busy 2-core machine.
const BOOT_TIMEOUT: &str = "240s";
/// A call still running after this long is hung (a hang guard, not a timing check).
const HANG_GUARD: Duration = Duration::from_secs(300);
/// How long the CLI may take to notice its VM is gone before we call it hung.
const DEAD_VM_GUARD: Duration = Duration::from_secs(60);

/// `sbx` with its own state directory; every sandbox left is force-killed on drop.
struct Sbx {
    state: tempfile::TempDir,
}

impl Sbx {
    fn new() -> Sbx {
        let template = data_dir().join("templates/minimal/template.json");
        assert!(
            template.is_file(),
            "the `minimal` template is not built ({} is missing); run rootfs/setup.sh",
            template.display()
        );
        let state = tempfile::Builder::new().prefix("sbx-vf-").tempdir_in("/tmp").expect("tempdir");
        Sbx { state }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(sbx_tests::workspace_bin("sbx"));
        cmd.env_remove("SBX_AGENT")
            .env_remove("SBX_SANDBOX")
            .env("SBX_STATE_DIR", self.state.path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Runs `sbx ARGS`; a run that hangs is killed and fails the test.
    fn run(&self, args: &[&str]) -> Output {
        let child = self.command(args).spawn().expect("spawn sbx");
        wait_bounded(child, HANG_GUARD).unwrap_or_else(|| panic!("sbx {args:?} hung and was killed"))
    }

    /// Runs `sbx --json ARGS`, asserts success and parses stdout.
    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        assert!(out.status.success(), "sbx {args:?} failed: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("sbx {args:?} printed no JSON ({e}): {}", text(&out.stdout)))
    }

    fn state_of(&self, name: &str) -> Option<String> {
        let list = self.json(&["ls"]);
        list.as_array()
            .expect("ls --json is an array")
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s["state"].as_str().unwrap().to_string())
    }

    fn sandbox_dirs(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.state.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_type().unwrap().is_dir())
            .map(|e| e.path())
            .collect()
    }
}

impl Drop for Sbx {
    fn drop(&mut self) {
        let _ = self.run(&["kill", "--all", "--force"]);
    }
}

/// Waits for `child` up to `limit`; kills it and returns `None` if it is still running.
fn wait_bounded(child: Child, limit: Duration) -> Option<Output> {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(limit) {
        Ok(out) => Some(out.expect("wait for sbx")),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            None
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Polls `done` until it holds, failing after `limit` (a bound on an event, not a timing
/// assertion).
fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn vm_killed_under_an_open_exec_ends_the_cli_with_a_clear_error_and_kill_cleans_up() {
    let sbx = Sbx::new();
    let created = sbx.json(&["create", "--name", "doomed", "--timeout", BOOT_TIMEOUT]);
    let qemu_pid = created["qemu_pid"].as_u64().expect("a running sandbox has a QEMU pid");
    let vhost_pid = created["vhost_pid"].as_u64().expect("a running sandbox has a vhost-device-vsock pid");
    let inspected = sbx.json(&["inspect", "doomed"]);
    assert_eq!(inspected["qemu_pid"].as_u64(), Some(qemu_pid), "{inspected}");

    // A long call, open on the VM: we know it is running once its first line arrives.
    let mut exec = sbx
        .command(&["-s", "doomed", "exec", "--", "sh", "-c", "echo started; exec sleep 600"])
        .spawn()
        .expect("spawn sbx exec");
    let mut stdout = BufReader::new(exec.stdout.take().expect("stdout"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("read the exec's first line");
    assert_eq!(first, "started\n", "the exec did not start");

    let killed = Command::new("kill").args(["-KILL", &qemu_pid.to_string()]).status().expect("run kill");
    assert!(killed.success(), "could not SIGKILL QEMU {qemu_pid}");

    // The CLI ends by itself: exit 69 (EX_UNAVAILABLE) and it says the connection is lost.
    let out = wait_bounded(exec, DEAD_VM_GUARD).expect("sbx exec hung after its VM was killed");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "sbx exec: {err}");
    assert!(err.contains("lost the connection to the agent"), "{err}");
    assert!(err.contains("check that the VM is still running"), "{err}");

    // vhost-device-vsock outlived QEMU here; ls still reports the sandbox as dead.
    wait_until("QEMU to be reaped or gone", DEAD_VM_GUARD, || pid_gone(qemu_pid));
    assert_eq!(sbx.state_of("doomed").as_deref(), Some("dead"));

    // A new call on the dead sandbox fails at once and says why.
    let again = sbx.run(&["-s", "doomed", "exec", "--", "true"]);
    assert!(!again.status.success(), "exec on a dead sandbox succeeded");
    let again_err = text(&again.stderr);
    assert!(again_err.contains("doomed"), "{again_err}");

    // kill cleans up: no process, no state directory.
    let out = sbx.run(&["kill", "doomed"]);
    assert!(out.status.success(), "sbx kill failed: {}", text(&out.stderr));
    assert!(pid_gone(vhost_pid), "vhost-device-vsock {vhost_pid} survived sbx kill");
    assert_eq!(processes_mentioning(sbx.state.path()), Vec::<String>::new());
    assert_eq!(sbx.sandbox_dirs(), Vec::<PathBuf>::new());
    assert_eq!(sbx.state_of("doomed"), None);
}
