//! The agent link on a real microVM, as sbx uses it: the guest agent serves its
//! virtio-serial port `sbx.agent`, the sandbox's `sbx net-helper` multiplexes calls over
//! QEMU's chardev socket `agent.port` on `<dir>/agent.sock`, and every `sbx -s NAME`
//! call goes there. One source VM, and a fork of its snapshot, whose port `sbx create
//! --from` replugged. Neither has a vhost-device-vsock: nothing sbx does needs vsock.

use std::path::PathBuf;

use sbx_tests::vm::{Sbx, text};
use sbx_tests::vsock_backends_mentioning;

fn dir_of(sbx: &Sbx, name: &str) -> PathBuf {
    PathBuf::from(sbx.json(&["inspect", name])["dir"].as_str().unwrap())
}

/// `sbx -s NAME ARGS`, asserted to succeed; stdout.
fn on(sbx: &Sbx, name: &str, args: &[&str]) -> String {
    let mut all = vec!["-s", name];
    all.extend_from_slice(args);
    let out = sbx.run(&all);
    assert!(out.status.success(), "sbx -s {name} {args:?} failed: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn vm_agent_link_serves_a_vm_its_snapshot_and_a_replugged_fork() {
    let sbx = Sbx::new();
    let created = sbx.create_with("src", &["--net", "none"]);
    let src_dir = dir_of(&sbx, "src");
    assert_eq!(
        created["address"].as_str(),
        Some(format!("unix://{}", src_dir.join("agent.sock").display()).as_str()),
        "a sandbox's agent address is its agent link"
    );
    assert_eq!(
        on(&sbx, "src", &["exec", "--capture", "--", "sh", "-c", "cat /sys/class/virtio-ports/*/name"]),
        "sbx.agent\n"
    );

    // A few MiB both ways.
    let host = tempfile::tempdir().unwrap();
    let up = host.path().join("up.bin");
    std::fs::write(&up, sbx_tests::noise(4 << 20, 11)).unwrap();
    sbx.json(&["cp", up.to_str().unwrap(), "src:/tmp/up.bin"]);
    let back = host.path().join("back.bin");
    sbx.json(&["cp", "src:/tmp/up.bin", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&up).unwrap(), "the bytes changed on the way");

    // The source keeps its link across its snapshot.
    sbx.json(&["snapshot", "create", "src", "--name", "s1"]);
    assert_eq!(on(&sbx, "src", &["exec", "--capture", "--", "echo", "source"]), "source\n");

    // The fork: reached over its own link.
    sbx.create_with("fork", &["--from", "s1"]);
    assert_eq!(vsock_backends_mentioning(sbx.state_dir()), Vec::<String>::new(), "no vsock backend runs");
    assert_eq!(on(&sbx, "fork", &["exec", "--capture", "--", "cat", "/proc/sys/kernel/hostname"]), "fork\n");
    let sum = ["exec", "--capture", "--", "sh", "-c", "sha256sum < /tmp/up.bin"];
    assert_eq!(on(&sbx, "fork", &sum), on(&sbx, "src", &sum));
}
