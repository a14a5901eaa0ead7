//! The agent link end to end with a stand-in for the VM's virtio-serial port: the
//! real agent serves the link (`--link-device`) on a pseudo-terminal's slave in raw
//! mode, a bridge in this test plays QEMU's chardev socket (`agent.port`, one host
//! connection at a time, bytes to and from the pty's master), and the real `atoll
//! agent-link` multiplexer serves `agent.sock`, which the real `atoll` CLI (the typed
//! client) calls. The pty is NOT a virtio-serial port: its "no host" and replug
//! behaviour (EOF, `ENODEV`) are not exercised here, only a VM shows those.
//!
//! A pty never reports a host leaving, as a virtio port may not: when the bridge
//! drops its connection and the multiplexer connects again, the agent's HTTP/2 session
//! is still open and reads the new SYNC as garbage; the link must recover from that.

mod cli_util;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use atoll_tests::Agent;
use cli_util::{atoll, atoll_cmd, atoll_stdin, code, ok, s, sha256_file, stderr};
use rustix::pty::OpenptFlags;

/// A pty whose slave is raw (no echo, no line editing): a clean byte pipe.
fn raw_pty() -> (File, OwnedFd, PathBuf) {
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = rustix::pty::openpt(flags).expect("openpt");
    rustix::pty::grantpt(&master).expect("grantpt");
    rustix::pty::unlockpt(&master).expect("unlockpt");
    let name = rustix::pty::ptsname(&master, Vec::new()).expect("ptsname");
    let slave = rustix::pty::ioctl_tiocgptpeer(&master, flags).expect("open the pty's slave");
    let mut t = rustix::termios::tcgetattr(&slave).expect("tcgetattr");
    t.make_raw();
    rustix::termios::tcsetattr(&slave, rustix::termios::OptionalActions::Now, &t).expect("tcsetattr");
    (File::from(master), slave, PathBuf::from(name.into_string().expect("pts path")))
}

/// QEMU's part: `agent.port` accepts one host connection at a time; the guest's bytes
/// go to the current one, the current one's bytes to the guest.
struct Bridge {
    current: Arc<Mutex<Option<UnixStream>>>,
    _slave: OwnedFd,
}

impl Bridge {
    fn start(master: File, slave: OwnedFd, port: &Path) -> Bridge {
        let listener = UnixListener::bind(port).expect("bind agent.port");
        let current: Arc<Mutex<Option<UnixStream>>> = Arc::default();
        let mut from_guest = master.try_clone().expect("dup master");
        let out = current.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while let Ok(n @ 1..) = from_guest.read(&mut buf) {
                if let Some(host) = out.lock().unwrap().as_mut() {
                    let _ = host.write_all(&buf[..n]);
                }
            }
        });
        let slot = current.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let mut from_host = conn.try_clone().expect("dup conn");
                *slot.lock().unwrap() = Some(conn);
                let mut to_guest = master.try_clone().expect("dup master");
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 65536];
                    while let Ok(n @ 1..) = from_host.read(&mut buf) {
                        if to_guest.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Bridge { current, _slave: slave }
    }

    /// Closes the host connection, as QEMU does when the VM goes away.
    fn drop_host(&self) {
        if let Some(host) = self.current.lock().unwrap().take() {
            let _ = host.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// `atoll agent-link`, killed when dropped.
struct Link(Child);

impl Link {
    fn start(port: &Path, socket: &Path) -> Link {
        Self::start_with(port, socket, &[])
    }

    fn start_with(port: &Path, socket: &Path, extra: &[&str]) -> Link {
        let child = Command::new(atoll_tests::workspace_bin("atoll"))
            .args(["agent-link", "--port", s(port), "--socket", s(socket)])
            .args(extra)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn atoll agent-link");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "atoll agent-link did not make {}", socket.display());
            std::thread::sleep(Duration::from_millis(10));
        }
        Link(child)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn exec_streams_and_files_cross_the_link_and_survive_a_reconnect() {
    let (master, slave, pts) = raw_pty();
    let agent = Agent::start_with(&["--link-device", s(&pts)]);
    let dir = tempfile::tempdir().unwrap();
    let port = dir.path().join("agent.port");
    let socket = dir.path().join("agent.sock");
    let bridge = Bridge::start(master, slave, &port);
    let _link = Link::start(&port, &socket);
    let addr = format!("unix://{}", socket.display());

    // Exec (unary), then ExecStream with stdin in and output out.
    assert_eq!(ok(&atoll(&addr, &["exec", "--capture", "--", "echo", "over the link"])), "over the link\n");
    let out =
        atoll_stdin(&addr, &["exec", "--", "sh", "-c", "tr a-z A-Z; echo done >&2; exit 3"], b"streamed\n");
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "STREAMED\n");
    assert!(stderr(&out).contains("done"), "{}", stderr(&out));

    // A few MiB up and back down: many DATA frames, flow control both ways.
    let host = tempfile::tempdir().unwrap();
    let src = host.path().join("up.bin");
    std::fs::write(&src, atoll_tests::noise(6 << 20, 7)).unwrap();
    let guest = agent.dir.path().join("landed.bin");
    ok(&atoll(&addr, &["cp", s(&src), &format!(":{}", s(&guest))]));
    assert_eq!(sha256_file(&guest), sha256_file(&src), "host -> guest changed the bytes");
    let back = host.path().join("back.bin");
    ok(&atoll(&addr, &["cp", &format!(":{}", s(&guest)), s(&back)]));
    assert_eq!(sha256_file(&back), sha256_file(&src), "guest -> host changed the bytes");

    // QEMU drops the host connection; the multiplexer connects again, and the agent,
    // which saw no end of its session, finds the new SYNC.
    bridge.drop_host();
    assert_eq!(ok(&atoll(&addr, &["exec", "--capture", "--", "echo", "again"])), "again\n");
    drop(agent);
}

#[test]
fn a_client_that_goes_away_cancels_its_call_in_the_guest() {
    let (master, slave, pts) = raw_pty();
    let agent = Agent::start_with(&["--link-device", s(&pts)]);
    let dir = tempfile::tempdir().unwrap();
    let (port, socket) = (dir.path().join("agent.port"), dir.path().join("agent.sock"));
    let _bridge = Bridge::start(master, slave, &port);
    let _link = Link::start(&port, &socket);
    let addr = format!("unix://{}", socket.display());
    let pidfile = agent.dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 1000", pidfile.display());
    let mut client = atoll_cmd(&addr, &["exec", "--", "sh", "-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn atoll exec");
    let pid = eventually("the command to start", || {
        std::fs::read_to_string(&pidfile).ok().and_then(|p| p.trim().parse::<u32>().ok())
    });
    // SIGKILL: the client says nothing, its connection to agent.sock just closes.
    client.kill().unwrap();
    client.wait().unwrap();
    eventually("the guest command to be killed", || atoll_tests::pid_reaped(pid).then_some(()));
    // The link is still there for the next client.
    assert_eq!(ok(&atoll(&addr, &["exec", "--capture", "--", "echo", "next"])), "next\n");
}

#[test]
fn calls_fail_unavailable_when_the_link_stays_down() {
    let dir = tempfile::tempdir().unwrap();
    // No QEMU behind agent.port: the link never comes up.
    let (port, socket) = (dir.path().join("agent.port"), dir.path().join("agent.sock"));
    let _link = Link::start_with(&port, &socket, &["--wait", "200ms"]);
    let out = atoll(&format!("unix://{}", socket.display()), &["exec", "--capture", "--", "true"]);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("could not reach the agent: the VM did not answer over its agent link within 200ms"),
        "{}",
        stderr(&out)
    );
}

/// gRPC's C core (grpcio for Python, Ruby, PHP...) sends a Unix socket's path,
/// percent-encoded, as `:authority`, which HTTP/2 servers refuse as no authority: the
/// multiplexer must serve such a call as the agent does (atoll-proto's `AuthorityFix`).
/// Spoken here in raw HTTP/2, as no Rust client can send that authority.
#[test]
fn a_call_whose_authority_is_the_socket_path_is_served() {
    let (master, slave, pts) = raw_pty();
    let _agent = Agent::start_with(&["--link-device", s(&pts)]);
    let dir = tempfile::tempdir().unwrap();
    let (port, socket) = (dir.path().join("agent.port"), dir.path().join("agent.sock"));
    let _bridge = Bridge::start(master, slave, &port);
    let _link = Link::start(&port, &socket);

    let mut conn = UnixStream::connect(&socket).expect("connect to agent.sock");
    conn.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let authority = s(&socket).trim_start_matches('/').replace('/', "%2F");
    // HPACK "literal header field without indexing, new name", no Huffman coding.
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/atoll.agent.v1.Agent/Info"),
        (":authority", authority.as_str()),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        block.push(0);
        for text in [name, value] {
            // A 7-bit length prefix holds up to 126.
            block.push(u8::try_from(text.len()).ok().filter(|n| *n < 127).expect("a short header"));
            block.extend_from_slice(text.as_bytes());
        }
    }
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(0x4, 0, 0, &[]));
    out.extend(h2_frame(0x1, 0x4, 1, &block));
    // An empty InfoRequest: uncompressed, length 0; END_STREAM.
    out.extend(h2_frame(0x0, 0x1, 1, &[0, 0, 0, 0, 0]));
    conn.write_all(&out).unwrap();

    loop {
        let mut head = [0u8; 9];
        conn.read_exact(&mut head).expect("the multiplexer answers");
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        conn.read_exact(&mut payload).unwrap();
        match kind {
            0x4 if flags & 0x1 == 0 => conn.write_all(&h2_frame(0x4, 0x1, 0, &[])).unwrap(),
            0x3 if stream == 1 => panic!("the call was reset (RST_STREAM {payload:?})"),
            0x7 => panic!("the multiplexer ended the connection (GOAWAY {payload:?})"),
            // The InfoResponse: a gRPC message of more than its 5-byte prefix.
            0x0 if stream == 1 && len > 5 => break,
            _ => {}
        }
    }
}

/// One HTTP/2 frame (RFC 9113 section 4.1).
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("a small frame");
    let mut f = len.to_be_bytes()[1..].to_vec();
    f.extend([kind, flags]);
    f.extend(stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Polls `f` until it yields, for up to 30 s.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
