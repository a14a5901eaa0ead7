//! Faults under a real microVM: the VM's QEMU is SIGKILLed while an `atoll exec` is
//! streaming a long command from it. The CLI must end on its own with exit 69 and a
//! message that says the connection was lost (the sandbox's `atoll net-helper`, which
//! serves the agent link on `agent.sock`, outlives QEMU, so this proves the link's
//! stream really sees the end), `atoll ls` must show the sandbox `dead`, and `atoll kill`
//! must leave no process and no state behind. And the sandbox's network helper is
//! SIGKILLed while its guest floods the serial console: QEMU's two logs, which only the
//! helper writes, stay bounded and stop growing.
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
