//! The test "outside world" for network tests (needs root; CI is root): network
//! namespaces made with `ip netns`, joined by a veth pair.
//!
//! - namespace *world* holds the test hosts on documentation (and deliberately
//!   private) addresses, served by `tests/netns/world.py`: HTTP :80 and HTTPS :443
//!   (one self-signed certificate for every test name, [`World::cert`]) on every
//!   address, a TCP echo on :7; and dnsmasq on [`WORLD_DNS`] answering the test names.
//! - namespace *client* is where the code under test runs (atoll, QEMU, the network
//!   helper): default route into the world, `/etc/netns/<client>/resolv.conf` naming
//!   the world's dnsmasq, so `ip netns exec <client> ...` resolves through it.
//!
//! Everything is removed on drop; names are unique per world (parallel tests); nothing
//! targets an address outside these namespaces. A machine where namespaces cannot be
//! made fails the test loudly.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The world's end of the veth pair; also its DNS server (dnsmasq).
pub const WORLD_DNS: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// The MAC address of the world's end of the veth pair.
const WORLD_MAC: &str = "02:00:c0:00:02:01";
/// The client namespace's address (the "host" the sandbox must not reach).
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// `allowed.test`: HTTP and HTTPS.
pub const ALLOWED_HOST: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
/// `echo.test`: the TCP echo on port 7 (and HTTP/HTTPS too).
pub const ECHO_HOST: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 11);
/// `denied.test`.
pub const DENIED_HOST: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 20);
/// `other.test`, a second network.
pub const OTHER_HOST: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
/// A private address with servers on it; `rebind.test` points here.
pub const PRIVATE_HOST: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 10);
/// The cloud metadata address, with servers on it.
pub const METADATA_HOST: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);

/// A name with [`MANY_COUNT`] A records (198.51.100.100 and up): its answer is over
/// 512 bytes, so a plain UDP answer is truncated and the client retries over TCP.
pub const MANY_NAME: &str = "many.test";
/// How many addresses [`MANY_NAME`] has.
pub const MANY_COUNT: u8 = 40;

/// A second name on `allowed.test`'s address (as sites share a CDN address): what a
/// guest allowed only `allowed.test` must not reach by claiming it.
pub const SHARED_NAME: &str = "shared.test";

/// The names dnsmasq answers, and their addresses.
pub const NAMES: [(&str, Ipv4Addr); 6] = [
    ("allowed.test", ALLOWED_HOST),
    (SHARED_NAME, ALLOWED_HOST),
    ("echo.test", ECHO_HOST),
    ("denied.test", DENIED_HOST),
    ("other.test", OTHER_HOST),
    ("rebind.test", PRIVATE_HOST),
];

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Runs `ip ARGS`, panicking with its stderr when it fails.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run `ip` (install iproute2)");
    assert!(
        out.status.success(),
        "`ip {}` failed (network tests need root and iproute2): {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace, deleted (with its `/etc/netns/<name>`) on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Makes the namespace `name` with its loopback up (a stale one of that name, left
    /// by a killed run with the same pid, is replaced).
    pub fn create(name: &str) -> NetNs {
        if Path::new("/run/netns").join(name).exists() {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
        ip(&["netns", "add", name]);
        let ns = NetNs { name: name.to_owned() };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n <name> ARGS`.
    pub fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// A command that runs `program` inside the namespace (`ip netns exec`), which also
    /// sees `/etc/netns/<name>/resolv.conf` as `/etc/resolv.conf`.
    pub fn exec(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Writes `/etc/netns/<name>/resolv.conf` naming `nameserver`.
    pub fn set_resolv_conf(&self, nameserver: Ipv4Addr) {
        let dir = self.etc_dir();
        std::fs::create_dir_all(&dir).expect("create /etc/netns/<ns>");
        std::fs::write(
            dir.join("resolv.conf"),
            format!("nameserver {nameserver}\noptions timeout:2 attempts:2\n"),
        )
        .expect("write resolv.conf");
    }

    /// The resolv.conf that programs in the namespace use.
    pub fn resolv_conf(&self) -> PathBuf {
        self.etc_dir().join("resolv.conf")
    }

    fn etc_dir(&self) -> PathBuf {
        Path::new("/etc/netns").join(&self.name)
    }

    /// Runs `f` on a new thread that has joined the namespace: sockets it (or a tokio
    /// runtime it builds) opens live there.
    pub fn spawn_in<F, R>(&self, f: F) -> std::thread::JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let path = Path::new("/run/netns").join(&self.name);
        std::thread::spawn(move || {
            let ns = File::open(&path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
            // SAFETY: setns moves only this thread into the namespace; the fd is open.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {}: {}", path.display(), std::io::Error::last_os_error());
            f()
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
        let _ = std::fs::remove_dir_all(self.etc_dir());
    }
}

/// A unique prefix for namespace and interface names (short: interface names are at
/// most 15 bytes).
pub fn unique_prefix() -> String {
    format!("sx{}n{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The outside world and the client namespace facing it.
pub struct World {
    /// Where the test hosts live.
    pub world: NetNs,
    /// Where the code under test runs.
    pub client: NetNs,
    world_link: String,
    children: Vec<Child>,
    dir: tempfile::TempDir,
}

impl World {
    /// Builds both namespaces, starts the test hosts and dnsmasq, and waits until the
    /// client resolves `allowed.test`.
    pub fn create() -> World {
        let prefix = unique_prefix();
        let world = NetNs::create(&format!("{prefix}w"));
        let client = NetNs::create(&format!("{prefix}c"));
        let (wv, cv) = (format!("{prefix}a"), format!("{prefix}b"));
        ip(&[
            "link",
            "add",
            &wv,
            "netns",
            world.name(),
            "type",
            "veth",
            "peer",
            "name",
            &cv,
            "netns",
            client.name(),
        ]);
        world.ip(&["link", "set", &wv, "address", WORLD_MAC]);
        world.ip(&["addr", "add", &format!("{WORLD_DNS}/24"), "dev", &wv]);
        world.ip(&["link", "set", &wv, "up"]);
        for host in [ALLOWED_HOST, ECHO_HOST, DENIED_HOST, OTHER_HOST, PRIVATE_HOST, METADATA_HOST] {
            world.ip(&["addr", "add", &format!("{host}/32"), "dev", "lo"]);
        }
        client.ip(&["addr", "add", &format!("{CLIENT_ADDR}/24"), "dev", &cv]);
        client.ip(&["link", "set", &cv, "up"]);
        client.ip(&["route", "add", "default", "via", &WORLD_DNS.to_string()]);
        // A fixed neighbour: with the link cut (World::set_link), connects out then retry
        // instead of failing on a lost ARP entry.
        client.ip(&[
            "neigh",
            "replace",
            &WORLD_DNS.to_string(),
            "lladdr",
            WORLD_MAC,
            "nud",
            "permanent",
            "dev",
            &cv,
        ]);
        client.set_resolv_conf(WORLD_DNS);

        let dir = tempfile::tempdir().expect("tempdir");
        let mut w = World { world, client, world_link: wv, children: Vec::new(), dir };
        w.make_cert();
        w.start_hosts();
        w.start_dns();
        w
    }

    /// The CA certificate of every HTTPS test host's certificate, for `curl --cacert`.
    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    /// A scratch directory removed with the world.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Keeps `child` until the world is dropped, then kills it.
    pub fn adopt(&mut self, child: Child) {
        self.children.push(child);
    }

    /// Cuts (or restores) the wire between client and world: with it down, packets to
    /// the world are silently dropped, so connects out hang and retry (a slow network).
    pub fn set_link(&self, up: bool) {
        self.world.ip(&["link", "set", &self.world_link, if up { "up" } else { "down" }]);
    }

    /// Starts an HTTP server in the client namespace on 0.0.0.0:`port` (a "host
    /// service" the sandbox must not reach) and waits until it accepts.
    pub fn serve_http_in_client(&mut self, port: u16) {
        let child = self
            .client
            .exec("python3")
            .args(["-m", "http.server", "--bind", "0.0.0.0", &port.to_string()])
            .current_dir(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn python3 -m http.server");
        self.adopt(child);
        let url = format!("http://127.0.0.1:{port}/");
        self.wait_until(&format!("the client's HTTP server on :{port}"), || {
            self.client
                .exec("curl")
                .args(["-sf", "-o", "/dev/null", &url])
                .status()
                .is_ok_and(|s| s.success())
        });
    }

    /// A CA ([`World::cert`]) and the hosts' leaf signed by it for every test name (a
    /// CA and a leaf, as real servers have: rustls refuses a CA certificate served as a
    /// server's own).
    fn make_cert(&self) {
        let dir = self.dir.path();
        let names: Vec<String> = NAMES.iter().map(|(n, _)| format!("DNS:{n}")).collect();
        let ext = dir.join("leaf.ext");
        std::fs::write(
            &ext,
            format!(
                "subjectAltName={}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
                names.join(",")
            ),
        )
        .expect("write leaf.ext");
        let openssl = |args: &[&std::ffi::OsStr]| {
            let out = Command::new("openssl")
                .args(args)
                .output()
                .expect("run openssl (rootfs/setup.sh --with-test-tools installs it)");
            assert!(out.status.success(), "openssl failed: {}", String::from_utf8_lossy(&out.stderr));
        };
        let p = |name: &str| dir.join(name).into_os_string();
        let s = std::ffi::OsStr::new;
        let ec = [s("-newkey"), s("ec"), s("-pkeyopt"), s("ec_paramgen_curve:prime256v1"), s("-nodes")];
        let (ca_key, ca, key, csr, leaf) =
            (p("ca-key.pem"), self.cert().into_os_string(), p("key.pem"), p("leaf.csr"), p("leaf.pem"));
        let mut args = vec![s("req"), s("-x509")];
        args.extend(ec);
        args.extend([
            s("-keyout"),
            &ca_key,
            s("-out"),
            &ca,
            s("-days"),
            s("2"),
            s("-subj"),
            s("/CN=atoll test world CA"),
        ]);
        args.extend([
            s("-addext"),
            s("basicConstraints=critical,CA:TRUE"),
            s("-addext"),
            s("keyUsage=critical,keyCertSign,cRLSign"),
        ]);
        openssl(&args);
        let mut args = vec![s("req"), s("-new")];
        args.extend(ec);
        args.extend([s("-keyout"), &key, s("-out"), &csr, s("-subj"), s("/CN=atoll test world")]);
        openssl(&args);
        let ext = ext.into_os_string();
        openssl(&[
            s("x509"),
            s("-req"),
            s("-in"),
            &csr,
            s("-CA"),
            &ca,
            s("-CAkey"),
            &ca_key,
            s("-CAcreateserial"),
            s("-out"),
            &leaf,
            s("-days"),
            s("2"),
            s("-extfile"),
            &ext,
        ]);
    }

    fn start_hosts(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("netns/world.py");
        let mut child = self
            .world
            .exec("python3")
            .arg(script)
            .arg(self.dir.path().join("leaf.pem"))
            .arg(self.dir.path().join("key.pem"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn world.py");
        let stdout = child.stdout.take().expect("stdout");
        self.adopt(child);
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("read world.py");
        assert_eq!(line.trim(), "ready", "world.py did not start its servers");
    }

    fn start_dns(&mut self) {
        let mut cmd = self.world.exec("dnsmasq");
        cmd.args([
            "--keep-in-foreground",
            "--no-resolv",
            "--no-hosts",
            "--conf-file=/dev/null",
            "--bind-interfaces",
            "--user=root",
            "--pid-file",
        ])
        .arg(format!("--listen-address={WORLD_DNS}"));
        for (name, addr) in NAMES {
            cmd.arg(format!("--address=/{name}/{addr}"));
        }
        for i in 0..MANY_COUNT {
            cmd.arg(format!("--host-record={MANY_NAME},198.51.100.{}", 100 + u16::from(i)));
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn dnsmasq (rootfs/setup.sh --with-test-tools installs dnsmasq-base)");
        self.adopt(child);
        self.wait_until("dnsmasq", || {
            self.client
                .exec("getent")
                .args(["hosts", "allowed.test"])
                .output()
                .is_ok_and(|o| o.status.success())
        });
    }

    fn wait_until(&self, what: &str, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ready() {
            assert!(Instant::now() < deadline, "{what} did not come up within 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
