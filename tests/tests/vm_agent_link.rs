//! The agent link on a real microVM, as atoll uses it: the guest agent serves its
//! virtio-serial port `atoll.agent`, the sandbox's `atoll net-helper` multiplexes calls over
//! QEMU's chardev socket `agent.port` on `<dir>/agent.sock`, and every `atoll -s NAME`
//! call goes there. One source VM, and a fork of its snapshot, whose port `atoll create
//! --from` replugged. Neither has a vhost-device-vsock: nothing atoll does needs vsock.

use std::path::PathBuf;

use atoll_tests::vm::{Atoll, text};
use atoll_tests::vsock_backends_mentioning;

fn dir_of(atoll: &Atoll, name: &str) -> PathBuf {
    PathBuf::from(atoll.json(&["inspect", name])["dir"].as_str().unwrap())
}

/// `atoll -s NAME ARGS`, asserted to succeed; stdout.
fn on(atoll: &Atoll, name: &str, args: &[&str]) -> String {
    let mut all = vec!["-s", name];
    all.extend_from_slice(args);
    let out = atoll.run(&all);
    assert!(out.status.success(), "atoll -s {name} {args:?} failed: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn vm_agent_link_serves_a_vm_its_snapshot_and_a_replugged_fork() {
    let atoll = Atoll::new();
    let created = atoll.create_with("src", &["--net", "none"]);
    let src_dir = dir_of(&atoll, "src");
    assert_eq!(
        created["address"].as_str(),
        Some(format!("unix://{}", src_dir.join("net/agent.sock").display()).as_str()),
        "a sandbox's agent address is its agent link"
    );
    assert_eq!(
        on(&atoll, "src", &["exec", "--capture", "--", "sh", "-c", "cat /sys/class/virtio-ports/*/name"]),
        "atoll.agent\n"
    );

    // A few MiB both ways.
    let host = tempfile::tempdir().unwrap();
    let up = host.path().join("up.bin");
    std::fs::write(&up, atoll_tests::noise(4 << 20, 11)).unwrap();
    atoll.json(&["cp", up.to_str().unwrap(), "src:/tmp/up.bin"]);
    let back = host.path().join("back.bin");
    atoll.json(&["cp", "src:/tmp/up.bin", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&up).unwrap(), "the bytes changed on the way");

    // The source keeps its link across its snapshot.
    atoll.json(&["snapshot", "create", "src", "--name", "s1"]);
    assert_eq!(on(&atoll, "src", &["exec", "--capture", "--", "echo", "source"]), "source\n");

    // The fork: reached over its own link.
    atoll.create_with("fork", &["--from", "s1"]);
    assert_eq!(vsock_backends_mentioning(atoll.state_dir()), Vec::<String>::new(), "no vsock backend runs");
    assert_eq!(
        on(&atoll, "fork", &["exec", "--capture", "--", "cat", "/proc/sys/kernel/hostname"]),
        "fork\n"
    );
    let sum = ["exec", "--capture", "--", "sh", "-c", "sha256sum < /tmp/up.bin"];
    assert_eq!(on(&atoll, "fork", &sum), on(&atoll, "src", &sum));
}
