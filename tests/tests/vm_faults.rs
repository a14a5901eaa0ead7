//! Faults under a real microVM: the VM's QEMU is SIGKILLed while an `atoll exec` is
//! streaming a long command from it. The CLI must end on its own with exit 69 and a
//! message that says the connection was lost (the sandbox's `atoll net-helper`, which
//! serves the agent link on `agent.sock`, outlives QEMU, so this proves the link's
//! stream really sees the end), `atoll ls` must show the sandbox `dead`, and `atoll kill`
//! must leave no process and no state behind. And the sandbox's network helper is
//! SIGKILLed while its guest floods the serial console: QEMU's two logs, which only the
//! helper writes, stay bounded and stop growing. And a restore whose network helper
//! fails to start, while its QEMU (started beside it) runs, leaves no process, no
//! sandbox directory and no cgroup.
//!
//! These boot the `minimal` template that `rootfs/setup.sh` builds into the atoll data
//! directory; without it they fail and say so. Each test has its own state directory.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use atoll_tests::vm::{Atoll, text, wait_bounded, wait_until};
use atoll_tests::{pid_gone, processes_mentioning, vsock_backends_mentioning};
/// How long the CLI may take to notice its VM is gone before we call it hung.
const DEAD_VM_GUARD: Duration = Duration::from_secs(60);

#[test]
fn vm_killed_under_an_open_exec_ends_the_cli_with_a_clear_error_and_kill_cleans_up() {
    let atoll = Atoll::new();
    let created = atoll.create("doomed");
    let qemu_pid = created["qemu_pid"].as_u64().expect("a running sandbox has a QEMU pid");
    let helper_pid = created["net_helper_pid"].as_u64().expect("a running sandbox has a net-helper pid");
    assert_eq!(vsock_backends_mentioning(atoll.state_dir()), Vec::<String>::new(), "no vsock backend runs");
    let inspected = atoll.json(&["inspect", "doomed"]);
    assert_eq!(inspected["qemu_pid"].as_u64(), Some(qemu_pid), "{inspected}");

    // A long call, open on the VM: we know it is running once its first line arrives.
    let mut exec = atoll
        .command(&["-s", "doomed", "exec", "--", "sh", "-c", "echo started; exec sleep 600"])
        .spawn()
        .expect("spawn atoll exec");
    let mut stdout = BufReader::new(exec.stdout.take().expect("stdout"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("read the exec's first line");
    assert_eq!(first, "started\n", "the exec did not start");

    let killed = Command::new("kill").args(["-KILL", &qemu_pid.to_string()]).status().expect("run kill");
    assert!(killed.success(), "could not SIGKILL QEMU {qemu_pid}");

    // The CLI ends by itself: exit 69 (EX_UNAVAILABLE) and it says the connection is lost.
    let out = wait_bounded(exec, DEAD_VM_GUARD).expect("atoll exec hung after its VM was killed");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "atoll exec: {err}");
    assert!(err.contains("lost the connection to the agent"), "{err}");
    assert!(err.contains("check that the VM is still running"), "{err}");

    // The net-helper outlived QEMU here; ls still reports the sandbox as dead.
    wait_until("QEMU to be reaped or gone", DEAD_VM_GUARD, || pid_gone(qemu_pid));
    assert_eq!(atoll.state_of("doomed").as_deref(), Some("dead"));

    // A new call on the dead sandbox fails at once and says why.
    let again = atoll.run(&["-s", "doomed", "exec", "--", "true"]);
    assert!(!again.status.success(), "exec on a dead sandbox succeeded");
    let again_err = text(&again.stderr);
    assert!(again_err.contains("doomed"), "{again_err}");

    // kill cleans up: no process, no state directory.
    let out = atoll.run(&["kill", "doomed"]);
    assert!(out.status.success(), "atoll kill failed: {}", text(&out.stderr));
    assert!(pid_gone(helper_pid), "the net-helper {helper_pid} survived atoll kill");
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
    assert_eq!(atoll.sandbox_dirs(), Vec::<PathBuf>::new());
    assert_eq!(atoll.state_of("doomed"), None);
}

/// Where the network helper writes QEMU's logs; past this they are cut to their end
/// (`sandbox::network::helper::console`), and a read more may be in before the cut.
const LOG_BOUND: u64 = (1 << 20) + (64 << 10);

/// The attack on the logs' bound: root in the guest writes to `/dev/ttyS0` without end
/// (a background job), then the sandbox's network helper, which alone writes
/// `vm/console.log` and `qemu.log` and keeps them bounded, dies as a crashed one would
/// (SIGKILL; a hostile guest may crash its userspace TCP/IP stack). Neither file grows
/// any more, both within the bound, while QEMU runs on (it drops the console's output);
/// `atoll kill` still cleans up. (When QEMU appended the console to the file itself, the
/// file grew by the guest's whole output once the helper was gone.)
#[test]
fn vm_helper_killed_under_a_console_flood_leaves_both_logs_bounded() {
    let atoll = Atoll::new();
    let created = atoll.create("flooder");
    let qemu_pid = created["qemu_pid"].as_u64().expect("a running sandbox has a QEMU pid");
    let helper_pid = created["net_helper_pid"].as_u64().expect("a running sandbox has a net-helper pid");
    let dir = atoll.sandbox_dirs().pop().expect("the sandbox's directory");
    let (console, qemu_log) = (dir.join("vm/console.log"), dir.join("qemu.log"));
    let size = |p: &PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);

    let out = atoll.run(&[
        "-s",
        "flooder",
        "run",
        "-d",
        "--",
        "sh",
        "-c",
        "while :; do cat /bin/busybox /bin/busybox > /dev/ttyS0; done",
    ]);
    assert!(out.status.success(), "the flood did not start: {}", text(&out.stderr));
    // The flood reaches the console while the helper lives (it writes the file).
    let before = size(&console);
    wait_until("the flood to reach console.log", Duration::from_secs(60), || size(&console) != before);

    let killed = Command::new("kill").args(["-KILL", &helper_pid.to_string()]).status().expect("run kill");
    assert!(killed.success(), "could not SIGKILL the helper {helper_pid}");
    wait_until("the helper to be gone", Duration::from_secs(10), || pid_gone(helper_pid));
    let (console_then, log_then) = (size(&console), size(&qemu_log));
    // Several seconds of flooding: about 1 MB at the rate measured under emulation.
    for _ in 0..10 {
        std::thread::sleep(Duration::from_secs(1));
        assert!(!pid_gone(qemu_pid), "QEMU ended once its helper was gone");
        let (c, l) = (size(&console), size(&qemu_log));
        assert!(c <= LOG_BOUND && l <= LOG_BOUND, "console.log {c} bytes, qemu.log {l} bytes");
        assert_eq!((c, l), (console_then, log_then), "a log grew once its helper was gone");
    }
    let out = atoll.run(&["kill", "flooder"]);
    assert!(out.status.success(), "atoll kill failed: {}", text(&out.stderr));
    assert!(pid_gone(qemu_pid), "QEMU {qemu_pid} survived atoll kill");
    assert_eq!(atoll.sandbox_dirs(), Vec::<PathBuf>::new());
}

/// The sandbox cgroups (`atoll/<id>`, `atoll/<id>.net`) of the host, v1's `pids`
/// hierarchy or v2's tree.
fn sandbox_cgroups() -> std::collections::BTreeSet<PathBuf> {
    let root = ["/sys/fs/cgroup/pids/atoll", "/sys/fs/cgroup/atoll"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_dir());
    let Some(root) = root else { return Default::default() };
    std::fs::read_dir(root).unwrap().filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_dir()).collect()
}

/// A restore starts QEMU without waiting for its network helper (the sockets QEMU
/// connects to are atoll's, handed to the helper: `jail::wire`, `jail::held`). When that
/// helper cannot start (here: the operator's `ATOLL_SECRETS_CA_FILE` holds no
/// certificate, which it checks as it starts), the create fails saying why, and the
/// QEMU already started is ended with it: no process, no sandbox directory, and no new
/// cgroup left empty (other tests' live sandboxes may add groups meanwhile; theirs hold
/// processes).
#[test]
fn vm_a_restore_whose_helper_fails_leaves_no_qemu_directory_or_cgroup() {
    let atoll = Atoll::new();
    // The first create of the shape boots and saves the template snapshot.
    atoll.create("first");
    let out = atoll.run(&["kill", "first"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Outside the state directory, whose view in the helper's jail is its own.
    let ca_dir = tempfile::tempdir().unwrap();
    let bad_ca = ca_dir.path().join("bad-ca.pem");
    std::fs::write(&bad_ca, "not a certificate\n").unwrap();
    let before = sandbox_cgroups();
    let out = atoll
        .command(&["-vv", "create", "--name", "doomed", "--timeout", atoll_tests::vm::BOOT_TIMEOUT])
        .env("ATOLL_SECRETS_CA_FILE", &bad_ca)
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "the create succeeded: {err}");
    assert!(err.contains("restore: QEMU released"), "the restore started QEMU: {err}");
    assert!(
        err.contains("the network helper did not come up") && err.contains("holds no PEM certificate"),
        "{err}"
    );
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
    assert_eq!(atoll.sandbox_dirs(), Vec::<PathBuf>::new());
    let empty_new = || -> Vec<PathBuf> {
        let empty =
            |g: &PathBuf| std::fs::read_to_string(g.join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty());
        sandbox_cgroups().difference(&before).filter(|g| empty(g)).cloned().collect()
    };
    if !empty_new().is_empty() {
        // A group another test is making at this moment is empty for a few ms.
        std::thread::sleep(Duration::from_secs(2));
    }
    assert_eq!(empty_new(), Vec::<PathBuf>::new(), "a cgroup of the failed create is left");
}
