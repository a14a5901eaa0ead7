//! A sandbox whose `atoll create` was killed mid-boot: what `atoll ls` says is true, and
//! nothing runs that it does not show as running. The boot is stopped the first time
//! any atoll looks at it; `atoll -s NAME exec` says why; `atoll kill` clears it.

use std::time::Duration;

use atoll_tests::processes_mentioning;
use atoll_tests::vm::{Atoll, BOOT_TIMEOUT, wait_until};

#[test]
fn vm_a_boot_whose_create_was_killed_is_stopped_not_left_running() {
    let atoll = Atoll::new();
    let mut create = atoll.command(&["create", "--name", "p1", "--timeout", BOOT_TIMEOUT]).spawn().unwrap();
    // Killed once its VM runs, before the agent announced itself.
    wait_until("the creator to start QEMU", Duration::from_secs(60), || {
        processes_mentioning(atoll.state_dir()).iter().any(|p| p.contains("qemu-system"))
    });
    create.kill().unwrap();
    create.wait().unwrap();
    let started = processes_mentioning(atoll.state_dir());
    assert!(!started.is_empty(), "the boot left no process to look at");

    // The first look stops it and calls it dead: the two agree from then on.
    assert_eq!(atoll.state_of("p1").as_deref(), Some("dead"));
    // Generous for a machine running the whole suite (the jail's bwrap, QEMU and the
    // network helper each end on their own once stopped).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = processes_mentioning(atoll.state_dir());
        if left.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the abandoned boot's processes still run: {left:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
    assert_eq!(atoll.state_of("p1").as_deref(), Some("dead"));

    let err = atoll.fails(&["-s", "p1", "exec", "--", "true"]);
    assert!(err.contains("never finished booting") && err.contains("atoll kill p1"), "{err}");

    atoll.json(&["kill", "p1"]);
    assert_eq!(atoll.states(), vec![]);
    assert!(atoll.sandbox_dirs().is_empty(), "kill left {:?}", atoll.sandbox_dirs());
}
