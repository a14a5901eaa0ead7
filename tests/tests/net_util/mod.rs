//! A real kernel TCP/IP stack as the "guest" of the atoll-net engine, without a VM: a
//! network namespace with a TAP device configured as a sandbox's eth0 (10.0.2.15/24,
//! gateway and DNS 10.0.2.2), whose frames a relay carries to and from the engine's NIC
//! socket in QEMU's `-netdev stream` framing (4-byte big-endian length + frame). The
//! engine runs on its own thread inside the world's client namespace, as the helper
//! would. `curl`, `getent` and `python3` then run in the guest namespace.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use atoll_net::log::{AuditLog, Record};
use atoll_net::policy::Policy;
use atoll_net::{Engine, EngineConfig, EngineHandle, Frames};
use atoll_tests::netns::{NetNs, World, unique_prefix};

const TAP: &str = "eth0";

/// Makes the engine's secrets once the world (its CA) exists.
type MakeSecrets<'a> = Box<dyn FnOnce(&World) -> atoll_net::secrets::Secrets + 'a>;

/// The world, a guest namespace wired to a running engine, and the engine's handle.
pub(crate) struct Rig {
    pub(crate) world: World,
    pub(crate) guest: NetNs,
    pub(crate) engine: EngineHandle,
    pub(crate) log: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    relay: UnixStream,
    socket: PathBuf,
    tap: File,
}

impl Rig {
    /// Everything up, with `policy` in force and the guest's MTU at 1500.
    pub(crate) fn start(policy: Policy) -> Rig {
        Rig::start_with(policy, 1500)
    }

    /// Everything up, with `policy` in force and the guest's MTU at `mtu`.
    pub(crate) fn start_with(policy: Policy, mtu: u16) -> Rig {
        Rig::start_full(policy, mtu, None, None)
    }

    /// Everything up, with the audit log at `log` (its directory must exist).
    pub(crate) fn start_logging_to(policy: Policy, log: PathBuf) -> Rig {
        Rig::start_full(policy, 1500, Some(log), None)
    }

    /// Everything up, swapping `secrets` (docs/secrets.md).
    #[allow(dead_code, reason = "used by the secrets tests only")]
    pub(crate) fn start_with_secrets(
        policy: Policy,
        secrets: impl FnOnce(&World) -> atoll_net::secrets::Secrets,
    ) -> Rig {
        Rig::start_full(policy, 1500, None, Some(Box::new(secrets)))
    }

    fn start_full(policy: Policy, mtu: u16, log: Option<PathBuf>, secrets: Option<MakeSecrets<'_>>) -> Rig {
        let mut world = World::create();
        let secrets = secrets.map(|make| make(&world));
        world.serve_http_in_client(18080);
        let guest = NetNs::create(&format!("{}g", unique_prefix()));
        guest.set_resolv_conf("10.0.2.2".parse().expect("ip"));
        let tap = guest.spawn_in(open_tap).join().expect("tap thread");
        guest.ip(&["link", "set", TAP, "address", "52:54:00:12:34:56", "mtu", &mtu.to_string(), "up"]);
        guest.ip(&["addr", "add", "10.0.2.15/24", "dev", TAP]);
        guest.ip(&["route", "add", "default", "via", "10.0.2.2"]);

        let socket = world.dir().join("net.sock");
        let log = log.unwrap_or_else(|| world.dir().join("net.log"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let config = EngineConfig {
            frames: Frames::Path(socket.clone()),
            log_path: log.clone(),
            policy,
            resolv_conf: world.client.resolv_conf(),
            host_addrs: None,
            stale_flows: Vec::new(),
            secrets,
        };
        world.client.spawn_in(move || {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async move {
                handle_tx.send(Engine::start(config).expect("engine starts")).expect("send handle");
                let _ = stopped.await;
            });
        });
        let engine = handle_rx.recv().expect("engine handle");
        let relay = UnixStream::connect(&socket).expect("connect to the NIC socket");
        spawn_relay(&tap, &relay);
        Rig { world, guest, engine, log, stop: Some(stop), relay, socket, tap }
    }

    /// Closes the NIC connection and opens a new one to the same engine, as a VM
    /// restored from a snapshot (a new QEMU) does; the guest's own stack stays as it was.
    pub(crate) fn reconnect(&mut self) {
        let _ = self.relay.shutdown(std::net::Shutdown::Both);
        self.relay = UnixStream::connect(&self.socket).expect("connect to the NIC socket again");
        spawn_relay(&self.tap, &self.relay);
    }

    /// Runs `program ARGS` in the guest namespace.
    pub(crate) fn run(&self, program: &str, args: &[&str]) -> Output {
        self.guest.exec(program).args(args).output().unwrap_or_else(|e| panic!("run {program}: {e}"))
    }

    /// `curl -sS --max-time 30 --cacert <world cert> ARGS` in the guest.
    pub(crate) fn curl(&self, args: &[&str]) -> Output {
        let cert = self.world.cert();
        let mut all = vec!["-sS", "--max-time", "30", "--cacert", cert.to_str().expect("utf-8")];
        all.extend_from_slice(args);
        self.run("curl", &all)
    }

    /// The audit log's records so far, from each of its files, oldest first.
    pub(crate) fn records(&self) -> Vec<Record> {
        let mut all: Vec<Record> = Vec::new();
        for path in AuditLog::paths(&self.log) {
            for file in [AuditLog::rotated_path(&path), path] {
                let text = std::fs::read_to_string(&file).unwrap_or_default();
                all.extend(text.lines().map(|l| {
                    serde_json::from_str::<Record>(l).unwrap_or_else(|e| panic!("bad log line {l}: {e}"))
                }));
            }
        }
        all.sort_by(|a, b| a.time.cmp(&b.time));
        all
    }

    /// Waits until a record matching `pred` is in the log (a connection's line is
    /// written when it ends, just after the client sees the end) and returns it.
    pub(crate) fn wait_record(&self, what: &str, pred: impl Fn(&Record) -> bool) -> Record {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(r) = self.records().into_iter().find(|r| pred(r)) {
                return r;
            }
            assert!(Instant::now() < deadline, "no log record for {what}; log:\n{:#?}", self.records());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = self.relay.shutdown(std::net::Shutdown::Both);
        self.engine.shutdown();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// stdout of a run that must succeed.
pub(crate) fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed ({:?}): {}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts curl failed with `code` (7: refused; 6: not resolved; 35/56: reset) and
/// returns its stderr.
pub(crate) fn curl_failed(out: &Output, codes: &[i32]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.code().is_some_and(|c| codes.contains(&c)),
        "curl exited {:?}, wanted one of {codes:?}: {stderr}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Opens a TAP device named [`TAP`] in the calling thread's namespace.
fn open_tap() -> File {
    let tun = OpenOptions::new().read(true).write(true).open("/dev/net/tun").expect("open /dev/net/tun");
    let mut req = IfReq {
        name: [0; 16],
        flags: libc::c_short::try_from(libc::IFF_TAP | libc::IFF_NO_PI).unwrap(),
        _pad: [0; 22],
    };
    req.name[..TAP.len()].copy_from_slice(TAP.as_bytes());
    // SAFETY: TUNSETIFF reads and writes one ifreq, which `req` is laid out as.
    let rc = unsafe { libc::ioctl(tun.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut IfReq) };
    assert_eq!(rc, 0, "TUNSETIFF: {}", std::io::Error::last_os_error());
    tun
}

/// Two threads: TAP frames -> framed on the socket, framed from the socket -> TAP.
fn spawn_relay(tap: &File, socket: &UnixStream) {
    let (mut tap_in, mut tap_out) = (tap.try_clone().expect("dup tap"), tap.try_clone().expect("dup tap"));
    let (mut sock_out, mut sock_in) =
        (socket.try_clone().expect("dup socket"), socket.try_clone().expect("dup socket"));
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 4 + 65536];
        loop {
            let Ok(n) = tap_in.read(&mut buf[4..]) else { return };
            if n == 0 {
                return;
            }
            buf[..4].copy_from_slice(&u32::try_from(n).unwrap().to_be_bytes());
            if sock_out.write_all(&buf[..4 + n]).is_err() {
                return;
            }
        }
    });
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536 + 14];
        loop {
            let mut len = [0u8; 4];
            if sock_in.read_exact(&mut len).is_err() {
                return;
            }
            let len = u32::from_be_bytes(len) as usize;
            if len > buf.len() || sock_in.read_exact(&mut buf[..len]).is_err() {
                return;
            }
            if tap_out.write_all(&buf[..len]).is_err() {
                return;
            }
        }
    });
}
