//! Snapshots, forks and parking of a sandbox with a network, through the `atoll` binary
//! and real microVMs, against the test "outside world" (tests/src/netns.rs): atoll, QEMU
//! and the network helpers run in the client namespace.
//!
//! One source sandbox is booted (`minimal`, a deny rule); it holds an idle connection
//! open when it is saved. Two forks of it each get their own network helper under the
//! snapshot's policy: each resolves names and reaches the allowed host, is refused the
//! denied one, logs only its own connections, gets none of the source's published
//! ports, and sees the connection it inherited reset instead of hung. A fork then parks
//! and comes back with its policy, its published port (same host port) and a working
//! network. Before parking, its helper (as if taken over by its guest) moves that port in
//! its own `net.json` to another host port on every address: the unpark publishes it
//! again only where the operator asked.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use atoll_tests::netns::{CLIENT_ADDR, DENIED_HOST, OTHER_HOST, World};
use atoll_tests::processes_mentioning;
use atoll_tests::vm::{Atoll, text, wait_until};
use serde_json::Value;

/// A job holding an idle connection to the echo host (its stdin is a FIFO nobody writes
/// to), which records how it ended in /tmp/held.done.
const HOLD: &str =
    "mkfifo /tmp/f; sleep 100000 > /tmp/f & nc echo.test 7 < /tmp/f; echo ended=$? > /tmp/held.done";

/// An HTTP GET of the allowed host by name: DNS through the helper, then TCP.
fn get_allowed(atoll: &Atoll, sandbox: &str) -> String {
    atoll.sh(
        sandbox,
        "printf 'GET / HTTP/1.0\\r\\nHost: allowed.test\\r\\n\\r\\n' | nc -w 20 allowed.test 80 | tail -n 1",
    )
}

/// A connection to `ip`:80: `rc=0` when it was let through, `rc=1` when refused.
fn connect(atoll: &Atoll, sandbox: &str, ip: &str) -> String {
    atoll.sh(sandbox, &format!("nc -w 10 {ip} 80 </dev/null >/dev/null 2>&1; echo rc=$?"))
}

/// The TCP log entries of a sandbox for `ip`, as (verdict, rule), one per connection.
fn tcp_log(atoll: &Atoll, sandbox: &str, ip: &str) -> Vec<(String, String)> {
    let log = atoll.json(&["net", "log", sandbox]);
    log.as_array()
        .expect("net log --json is an array")
        .iter()
        // One entry per connection: an allowed one's close line (its open line skipped).
        .filter(|e| e["kind"] == "tcp" && e["ip"] == ip && e["event"] != "open")
        .map(|e| (e["verdict"].as_str().unwrap().to_string(), e["rule"].as_str().unwrap().to_string()))
        .collect()
}

fn dir_of(atoll: &Atoll, name: &str) -> PathBuf {
    PathBuf::from(atoll.json(&["inspect", name])["dir"].as_str().unwrap())
}

const ALLOWED_BODY: &str = "hello from 203.0.113.10 host=allowed.test sni=-\n";

/// Rewrites the `net.json` of the sandbox in `dir` with `change`, as a network helper
/// taken over by its guest can (the helper's file, in its own directory): written as the
/// helper writes it (a temp file renamed over, the helper's owner kept).
fn rewrite_helpers_own_file(dir: &std::path::Path, change: impl FnOnce(&mut Value)) {
    let path = dir.join("net/net.json");
    let meta = std::fs::metadata(&path).unwrap();
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    change(&mut config);
    let tmp = dir.join("net/.net.json.planted");
    std::fs::write(&tmp, serde_json::to_vec(&config).unwrap()).unwrap();
    std::os::unix::fs::chown(&tmp, Some(std::os::unix::fs::MetadataExt::uid(&meta)), None).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
}

/// What a taken-over helper writes to widen its policy: one that allows everything.
fn widen_in_helpers_own_file(dir: &std::path::Path) {
    rewrite_helpers_own_file(dir, |c| c["policy"] = serde_json::json!({ "allow_out": [], "deny_out": [] }));
}

/// What a taken-over helper writes to have the sandbox's next helper publish its ports
/// elsewhere: every published port moved to host port `port`, on every address.
fn plant_ports_in_helpers_own_file(dir: &std::path::Path, port: u16) {
    rewrite_helpers_own_file(dir, |c| {
        for p in c["ports"].as_array_mut().expect("net.json lists its ports") {
            p["bind"] = "0.0.0.0".into();
            p["host_port"] = port.into();
            p["url"] = format!("http://127.0.0.1:{port}").into();
        }
    });
}

/// Runs `f` in the client namespace, where atoll and its helpers run.
fn in_client<R: Send + 'static>(world: &World, f: impl FnOnce() -> R + Send + 'static) -> R {
    world.client.spawn_in(f).join().expect("the thread in the client namespace")
}

/// Whether a TCP connection to `addr` is accepted.
fn accepts(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(5)).is_ok()
}

/// `data` sent to `addr` and what comes back once the write side is closed.
fn round_trip(addr: SocketAddr, data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    conn.write_all(data)?;
    conn.shutdown(std::net::Shutdown::Write)?;
    let mut back = Vec::new();
    conn.read_to_end(&mut back)?;
    Ok(back)
}

#[test]
fn vm_snapshot_net_forks_each_get_their_own_network_and_park_keeps_it() {
    let world = World::create();
    let atoll = Atoll::in_netns(world.client.name());
    let denied = DENIED_HOST.to_string();
    let other = OTHER_HOST.to_string();
    let created = atoll.create_with("src", &["--deny-out", &denied, "--publish", "9000"]);
    let src_helper = created["net_helper_pid"].as_u64().expect("the source has a network helper");
    assert_eq!(get_allowed(&atoll, "src"), ALLOWED_BODY);
    let job = atoll.run(&["-s", "src", "run", "-d", "--", "sh", "-c", HOLD]);
    assert!(job.status.success(), "{}", text(&job.stderr));
    // Established to port 7 (0007), state 01, as the guest's kernel sees it.
    wait_until("the held connection to be up", Duration::from_secs(60), || {
        atoll.sh("src", "grep -c ':0007 01 ' /proc/net/tcp || true").trim() != "0"
    });

    // The source's helper (taken over, say) widens the policy in its own file: the
    // snapshot, the forks and `net show` keep the policy atoll gave it.
    widen_in_helpers_own_file(&dir_of(&atoll, "src"));
    assert_eq!(atoll.json(&["net", "show", "src"])["deny_out"], serde_json::json!([denied]));
    let snap = atoll.json(&["snapshot", "create", "src", "--name", "net1"]);
    assert_eq!(snap["name"], "net1");
    // The source runs on with its own helper and its connection.
    assert_eq!(atoll.json(&["inspect", "src"])["net_helper_pid"].as_u64(), Some(src_helper));
    assert_eq!(get_allowed(&atoll, "src"), ALLOWED_BODY);

    let mut helpers = vec![src_helper];
    for fork in ["f1", "f2"] {
        let info = atoll.create_with(fork, &["--from", "net1"]);
        let helper = info["net_helper_pid"].as_u64().expect("a fork has a network helper");
        assert!(!helpers.contains(&helper), "{fork} shares a network helper");
        helpers.push(helper);
        // The snapshot's policy, and its network works: DNS, an allowed connection, a
        // refused one.
        let shown = atoll.json(&["net", "show", fork]);
        assert_eq!(shown["deny_out"], serde_json::json!([denied]), "{shown}");
        assert_eq!(get_allowed(&atoll, fork), ALLOWED_BODY);
        assert_eq!(connect(&atoll, fork, &denied), "rc=1\n", "{fork} reached the denied host");
        assert_eq!(tcp_log(&atoll, fork, &denied), [("deny".to_string(), denied.clone())]);
        // Published ports belong to the source on the host: a fork gets none.
        assert_eq!(atoll.json(&["port", "ls", fork]), serde_json::json!([]));
        // The connection the source held when saved was reset in the fork, not hung.
        wait_until(&format!("the inherited connection in {fork} to end"), Duration::from_secs(90), || {
            atoll.sh(fork, "cat /tmp/held.done 2>/dev/null || true").starts_with("ended=")
        });
    }
    // Each log holds only its own sandbox's connections.
    assert_eq!(connect(&atoll, "f1", &other), "rc=0\n");
    assert_eq!(tcp_log(&atoll, "f1", &other).len(), 1);
    assert!(tcp_log(&atoll, "f2", &other).is_empty(), "f1's connection is in f2's log");
    assert!(tcp_log(&atoll, "src", &other).is_empty(), "f1's connection is in the source's log");
    assert!(tcp_log(&atoll, "src", &denied).is_empty(), "the forks' denials are in the source's log");
    // The source's own connection is still open.
    assert_eq!(atoll.sh("src", "cat /tmp/held.done 2>/dev/null || echo open"), "open\n");

    // Parking a networked sandbox: no process left, its helper included; a published
    // port is listed without waking it, and comes back at the same host port, on the
    // address it was asked for (loopback), with its guest server (an echo) behind it.
    let out = atoll.run(&["-s", "f2", "run", "-d", "--", "nc", "-ll", "-p", "8000", "-e", "cat"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let port = atoll.json(&["port", "publish", "f2", "8000"]);
    assert_eq!(port["bind"], "127.0.0.1", "{port}");
    let host_port = port["host_port"].as_u64().expect("a host port");
    let asked = SocketAddr::from((Ipv4Addr::LOCALHOST, u16::try_from(host_port).unwrap()));
    wait_until("the echo through the published port", Duration::from_secs(60), || {
        in_client(&world, move || round_trip(asked, b"ping").is_ok_and(|b| b == b"ping"))
    });
    let f2_dir = dir_of(&atoll, "f2");
    // Parking does not carry a policy the helper wrote into its own file either, nor the
    // ports it wrote there: another host port, on every address.
    widen_in_helpers_own_file(&f2_dir);
    let planted =
        in_client(&world, || TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
    plant_ports_in_helpers_own_file(&f2_dir, planted);
    assert_eq!(atoll.json(&["pause", "--to-disk", "f2"])["state"], "parked");
    assert!(processes_mentioning(&f2_dir).is_empty(), "{:?}", processes_mentioning(&f2_dir));
    assert_eq!(atoll.json(&["inspect", "f2"])["network"]["helper"], "parked");
    let listed_parked = atoll.json(&["port", "ls", "f2"]);
    assert_eq!(atoll.state_of("f2").as_deref(), Some("parked"));
    // Any command brings it back, with its network and policy.
    assert_eq!(get_allowed(&atoll, "f2"), ALLOWED_BODY);
    assert_eq!(atoll.state_of("f2").as_deref(), Some("running"));
    // Its port listens where the operator asked, and only there: not at the planted
    // host port, and not on the client's other address.
    let on_planted = SocketAddr::from((Ipv4Addr::LOCALHOST, planted));
    let on_every_address = SocketAddr::from((CLIENT_ADDR, asked.port()));
    let (planted_accepts, wildcard_accepts, echo) = in_client(&world, move || {
        (
            accepts(on_planted),
            accepts(on_every_address),
            round_trip(asked, b"pong").map_err(|e| e.to_string()),
        )
    });
    assert!(!planted_accepts, "the unpark published the host port the helper planted ({on_planted})");
    assert!(
        !wildcard_accepts,
        "the unpark published on every address, as the helper planted ({on_every_address})"
    );
    assert_eq!(echo.as_deref(), Ok(&b"pong"[..]), "the port asked for at {asked}");
    let listed = atoll.json(&["port", "ls", "f2"]);
    assert_eq!(
        (listed[0]["bind"].as_str(), listed[0]["host_port"].as_u64()),
        (Some("127.0.0.1"), Some(host_port)),
        "{listed}"
    );
    // Listed while parked as atoll recorded it, not as the helper's file said.
    assert_eq!(listed_parked[0]["bind"], "127.0.0.1", "{listed_parked}");
    assert_eq!(listed_parked[0]["host_port"].as_u64(), Some(host_port), "{listed_parked}");
    assert_eq!(connect(&atoll, "f2", &denied), "rc=1\n");
    assert_eq!(tcp_log(&atoll, "f2", &denied).len(), 2, "the log goes on across the park");
    assert_eq!(atoll.json(&["port", "ls", "f2"])[0]["host_port"].as_u64(), Some(host_port));
    // `atoll net set` on a parked sandbox brings it back and applies.
    assert_eq!(atoll.json(&["pause", "--to-disk", "f2"])["state"], "parked");
    atoll.json(&["net", "set", "f2", "--deny-out", &format!("{denied},{other}")]);
    assert_eq!(atoll.state_of("f2").as_deref(), Some("running"));
    assert_eq!(connect(&atoll, "f2", &other), "rc=1\n");

    // Restore puts f1 back to the snapshot: the snapshot's policy, f1's own ports.
    atoll.json(&["net", "set", "f1", "--reset"]);
    atoll.json(&["port", "publish", "f1", "8001"]);
    let restored = atoll.json(&["snapshot", "restore", "f1", "net1"]);
    assert_eq!(restored["state"], "running");
    assert_eq!(atoll.json(&["net", "show", "f1"])["deny_out"], serde_json::json!([denied]));
    assert_eq!(atoll.json(&["port", "ls", "f1"])[0]["guest_port"], 8001);
    assert_eq!(connect(&atoll, "f1", &denied), "rc=1\n");
    assert_eq!(get_allowed(&atoll, "f1"), ALLOWED_BODY);

    let state = atoll.state_dir().to_path_buf();
    atoll.json(&["kill", "--all"]);
    assert!(processes_mentioning(&state).is_empty(), "{:?}", processes_mentioning(&state));
    for pid in helpers {
        assert!(atoll_tests::pid_gone(pid), "network helper {pid} outlived kill");
    }
    let _: Value = atoll.json(&["snapshot", "rm", "net1"]);
}
