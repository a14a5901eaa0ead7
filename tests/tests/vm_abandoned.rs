//! A sandbox whose `sbx create` was killed mid-boot: what `sbx ls` says is true, and
//! nothing runs that it does not show as running. The boot is stopped the first time
//! any sbx looks at it; `sbx -s NAME exec` says why; `sbx kill` clears it.

use std::time::Duration;

use sbx_tests::processes_mentioning;
use sbx_tests::vm::{BOOT_TIMEOUT, Sbx, wait_until};

#[test]
fn vm_a_boot_whose_create_was_killed_is_stopped_not_left_running() {
    let sbx = Sbx::new();
    let mut create = sbx.command(&["create", "--name", "p1", "--timeout", BOOT_TIMEOUT]).spawn().unwrap();
    // Killed once its VM runs, before the agent announced itself.
    wait_until("the creator to start QEMU", Duration::from_secs(60), || {
        processes_mentioning(sbx.state_dir()).iter().any(|p| p.contains("qemu-system"))
    });
    create.kill().unwrap();
    create.wait().unwrap();
    let started = processes_mentioning(sbx.state_dir());
    assert!(!started.is_empty(), "the boot left no process to look at");

    // The first look stops it and calls it dead: the two agree from then on.
    assert_eq!(sbx.state_of("p1").as_deref(), Some("dead"));
    wait_until("the abandoned boot's processes to end", Duration::from_secs(10), || {
        processes_mentioning(sbx.state_dir()).is_empty()
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(processes_mentioning(sbx.state_dir()), Vec::<String>::new());
    assert_eq!(sbx.state_of("p1").as_deref(), Some("dead"));

    let err = sbx.fails(&["-s", "p1", "exec", "--", "true"]);
    assert!(err.contains("never finished booting") && err.contains("sbx kill p1"), "{err}");

    sbx.json(&["kill", "p1"]);
    assert_eq!(sbx.states(), vec![]);
    assert!(sbx.sandbox_dirs().is_empty(), "kill left {:?}", sbx.sandbox_dirs());
}
