//! The agent link on a real microVM: the guest agent serving its virtio-serial port
//! `sbx.agent`, and `sbx agent-link` (run by hand here; sbx itself still talks vsock)
//! multiplexing the CLI's calls over QEMU's chardev socket `agent.port`. One source VM;
//! its snapshot's fork gets its port replugged over QMP first, as a restore will.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use sbx_tests::vm::{HANG_GUARD, Sbx, text, wait_until};
use serde_json::{Value, json};

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

/// A QMP session on `path`, capabilities negotiated.
struct Qmp(BufReader<UnixStream>);

impl Qmp {
    fn connect(path: &Path) -> Qmp {
        let stream = UnixStream::connect(path).expect("connect to QMP");
        stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
        let mut qmp = Qmp(BufReader::new(stream));
        qmp.read();
        qmp.execute(json!({ "execute": "qmp_capabilities" }));
        qmp
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        self.0.read_line(&mut line).expect("read QMP");
        serde_json::from_str(&line).expect("QMP sends JSON lines")
    }

    /// Sends `cmd`; its reply, events read past skipped into `events`.
    fn execute_seeing(&mut self, cmd: Value, events: &mut Vec<String>) -> Value {
        writeln!(self.0.get_mut(), "{cmd}").expect("write QMP");
        loop {
            let msg = self.read();
            match msg.get("event").and_then(Value::as_str) {
                Some(e) => events.push(e.to_owned()),
                None => return msg,
            }
        }
    }

    fn execute(&mut self, cmd: Value) -> Value {
        self.execute_seeing(cmd, &mut Vec::new())
    }

    /// device_del of the agent's port, DEVICE_DELETED, device_add: QEMU refuses the
    /// chardev as "in use" until the event.
    fn replug_agent_port(&mut self) {
        let mut events = Vec::new();
        let del = self.execute_seeing(
            json!({ "execute": "device_del", "arguments": { "id": "agentport0" } }),
            &mut events,
        );
        assert!(del.get("return").is_some(), "device_del: {del}");
        while !events.iter().any(|e| e == "DEVICE_DELETED") {
            if let Some(e) = self.read().get("event").and_then(Value::as_str) {
                events.push(e.to_owned());
            }
        }
        let add = self.execute(json!({ "execute": "device_add", "arguments": {
            "driver": "virtserialport", "bus": "vser0.0", "chardev": "agentport",
            "name": "sbx.agent", "id": "agentport0",
        } }));
        assert!(add.get("return").is_some(), "device_add: {add}");
    }
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

    // The fork: its port replugged before anything connects, then its own link.
    sbx.create_with("fork", &["--from", "s1"]);
    let fork_dir = dir_of(&sbx, "fork");
    Qmp::connect(&fork_dir.join("qmp.sock")).replug_agent_port();
    let fork = Link::start(&sbx, &fork_dir);
    assert_eq!(fork.sbx(&sbx, &["exec", "--capture", "--", "cat", "/proc/sys/kernel/hostname"]), "fork\n");
    assert_eq!(
        fork.sbx(&sbx, &["exec", "--capture", "--", "sh", "-c", "sha256sum < /tmp/up.bin"]),
        src.sbx(&sbx, &["exec", "--capture", "--", "sh", "-c", "sha256sum < /tmp/up.bin"])
    );
}
