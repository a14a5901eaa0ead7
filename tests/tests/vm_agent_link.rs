//! The agent link on a real microVM: the guest agent serving its virtio-serial port
//! `sbx.agent`, and `sbx agent-link` (run by hand here; sbx itself still talks vsock)
//! multiplexing the CLI's calls over QEMU's chardev socket `agent.port`. One source VM,
//! and a fork of its snapshot, whose port `sbx create --from` replugged.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use sbx_tests::vm::{Sbx, text, wait_until};

/// `sbx agent-link` for one sandbox directory, killed when dropped.
struct Link {
    child: Child,
    addr: String,
}

impl Link {
    fn start(sbx: &Sbx, dir: &Path) -> Link {
        let socket = dir.join("agent.sock");
        let port = dir.join("agent.port");
        let child = sbx
            .command(&["agent-link", "--port", port.to_str().unwrap(), "--socket", socket.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sbx agent-link");
        wait_until("sbx agent-link to make agent.sock", Duration::from_secs(60), || socket.exists());
        Link { child, addr: format!("unix://{}", socket.display()) }
    }

    /// `sbx --agent unix://.../agent.sock ARGS`, asserted to succeed; stdout.
    fn sbx(&self, sbx: &Sbx, args: &[&str]) -> String {
        let mut all = vec!["--agent", self.addr.as_str(), "--connect-timeout", "60s"];
        all.extend_from_slice(args);
        let out = sbx.run(&all);
        assert!(out.status.success(), "sbx {args:?} over the link failed: {}", text(&out.stderr));
        text(&out.stdout)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dir_of(sbx: &Sbx, name: &str) -> PathBuf {
    PathBuf::from(sbx.json(&["inspect", name])["dir"].as_str().unwrap())
}

#[test]
fn vm_agent_link_serves_a_vm_its_snapshot_and_a_replugged_fork() {
    let sbx = Sbx::new();
    sbx.create_with("src", &["--net", "none"]);
    let src = Link::start(&sbx, &dir_of(&sbx, "src"));
    assert_eq!(
        src.sbx(&sbx, &["exec", "--capture", "--", "sh", "-c", "cat /sys/class/virtio-ports/*/name"]),
        "sbx.agent\n"
    );

    // A few MiB both ways, and a streamed exec with stdin.
    let host = tempfile::tempdir().unwrap();
    let up = host.path().join("up.bin");
    std::fs::write(&up, sbx_tests::noise(4 << 20, 11)).unwrap();
    src.sbx(&sbx, &["cp", up.to_str().unwrap(), ":/tmp/up.bin"]);
    let back = host.path().join("back.bin");
    src.sbx(&sbx, &["cp", ":/tmp/up.bin", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&up).unwrap(), "the bytes changed on the way");

    // The source keeps its link across its snapshot.
    sbx.json(&["snapshot", "create", "src", "--name", "s1"]);
    assert_eq!(src.sbx(&sbx, &["exec", "--capture", "--", "echo", "source"]), "source\n");

    // The fork: sbx replugged its port while it was stopped, so a link made now finds
    // the guest agent in a fresh session of its port.
    sbx.create_with("fork", &["--from", "s1"]);
    let fork = Link::start(&sbx, &dir_of(&sbx, "fork"));
    assert_eq!(fork.sbx(&sbx, &["exec", "--capture", "--", "cat", "/proc/sys/kernel/hostname"]), "fork\n");
    assert_eq!(
        fork.sbx(&sbx, &["exec", "--capture", "--", "sh", "-c", "sha256sum < /tmp/up.bin"]),
        src.sbx(&sbx, &["exec", "--capture", "--", "sh", "-c", "sha256sum < /tmp/up.bin"])
    );
}
