//! Published ports and the guest NIC, through the real `atoll` binary and booted VMs:
//! a guest server is reached from the host over `atoll port publish` / `--publish`
//! (busybox httpd and nc in `minimal`, `python3 -m http.server` and a WebSocket echo in
//! `debian`), loopback-only guest services included; plain TCP passes both ways with
//! half-closes; unpublish closes the port; a host port in use and bad ports are refused;
//! a published port wakes a paused sandbox; `--net none` has no NIC while a network
//! gets eth0, its route and resolv.conf; a helper that died shows in `atoll info` and the
//! next call says so; `atoll kill` leaves no helper, listener or socket.
//!
//! Each test shares one booted VM across its assertions (CI has two cores).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use atoll_tests::processes_mentioning;
use atoll_tests::vm::{Atoll, text, wait_until};
use serde_json::Value;

/// Generous bound for a guest server to come up under software emulation.
const SERVER_WAIT: Duration = Duration::from_secs(60);

/// The host address a published port reports.
fn published_addr(p: &Value) -> SocketAddr {
    let url = p["url"].as_str().expect("a published port has a url");
    url.trim_start_matches("http://").parse().unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// `GET /` over HTTP/1.0; the whole response, or the error.
fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    Ok(text(&out))
}

/// Waits until `GET path` at `addr` answers 200.
fn wait_http_ok(addr: SocketAddr, path: &str) -> String {
    let mut last = String::new();
    wait_until(&format!("a 200 from {addr}{path}"), SERVER_WAIT, || match http_get(addr, path) {
        Ok(r) if r.starts_with("HTTP/1.") && r.contains(" 200 ") => {
            last = r;
            true
        }
        _ => false,
    });
    last
}

/// Sends `data` through `addr`, half-closes, and returns all that comes back.
fn tcp_round_trip(addr: SocketAddr, data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut reader = s.try_clone()?;
    let back = std::thread::spawn(move || {
        let mut out = Vec::new();
        reader.read_to_end(&mut out).map(|_| out)
    });
    let sent = s.write_all(data).and_then(|()| s.shutdown(Shutdown::Write));
    let back = back.join().expect("the reader thread");
    sent?;
    back
}

/// A connection to `addr` that is refused or reset before any byte comes back.
fn refused(addr: SocketAddr) -> bool {
    match http_get(addr, "/") {
        Err(_) => true,
        Ok(r) => r.is_empty(),
    }
}

fn pseudo_random(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x9e37_79b9;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x.to_le_bytes()[0]
        })
        .collect()
}

fn kill_leaves_nothing(atoll: &Atoll, name: &str, addrs: &[SocketAddr]) {
    let info = atoll.json(&["info", name]);
    let helper = info["net_helper_pid"].as_u64().expect("a running sandbox has a network helper");
    atoll.json(&["kill", name]);
    assert!(atoll_tests::pid_gone(helper), "the network helper (pid {helper}) still runs after kill");
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
    assert_eq!(
        atoll.sandbox_dirs(),
        Vec::<PathBuf>::new(),
        "kill left the sandbox directory (and its sockets)"
    );
    for addr in addrs {
        assert!(TcpStream::connect(addr).is_err(), "{addr} still accepts connections after kill");
    }
}

#[test]
fn vm_ports_minimal_without_a_network_serves_http_and_tcp_both_ways() {
    let atoll = Atoll::new();
    let created = atoll.create_with("web", &["--net", "none", "--publish", "8000"]);
    assert_eq!(created["state"], "running");

    // --net none: no NIC, no atoll.net= for the agent.
    let listing = atoll.sh("web", "ls /sys/class/net; cat /proc/cmdline");
    assert!(
        !listing.contains("eth0") && !listing.contains("atoll.net="),
        "a sandbox without a network: {listing}"
    );

    let info = atoll.json(&["info", "web"]);
    assert_eq!(info["network"]["network"], "none", "{info}");
    assert_eq!(info["network"]["helper"], "running", "{info}");
    let http = &info["network"]["ports"][0];
    assert_eq!(http["guest_port"], 8000, "{info}");
    assert_eq!(http["bind"], "127.0.0.1", "published on loopback by default: {info}");
    let http_addr = published_addr(http);

    // Nothing listens yet: the host connection is reset, the helper's log says why.
    assert!(refused(http_addr), "a port with no guest server answered");

    // A server that listens only on the guest's loopback.
    atoll.sh("web", "mkdir -p /www && echo hello-from-the-guest > /www/index.html");
    let out =
        atoll.run(&["-s", "web", "run", "-d", "--", "httpd", "-f", "-p", "127.0.0.1:8000", "-h", "/www"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = wait_http_ok(http_addr, "/index.html");
    assert!(page.ends_with("hello-from-the-guest\n"), "{page}");

    // A browser gets a host name of the sandbox's own (cookies are per host name, not per
    // port); curl, like browsers, sends `*.localhost` to loopback without asking DNS.
    let browser = http["browser_url"].as_str().expect("a loopback port has a browser_url");
    assert_eq!(browser, format!("http://web.localhost:{}", http_addr.port()), "{info}");
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "30", &format!("{browser}/index.html")])
        .output()
        .expect("curl runs");
    assert_eq!(text(&out.stdout), "hello-from-the-guest\n", "curl {browser}: {}", text(&out.stderr));

    // Plain TCP, 2 MiB each way, with the half-close passed through: nc runs `cat`.
    let out = atoll.run(&["-s", "web", "run", "-d", "--", "nc", "-ll", "-p", "9000", "-e", "cat"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let echo = atoll.json(&["port", "publish", "web", "9000"]);
    let echo_addr = published_addr(&echo);
    wait_until("the nc echo server", SERVER_WAIT, || {
        tcp_round_trip(echo_addr, b"ping").is_ok_and(|b| b == b"ping")
    });
    let data = pseudo_random(2 << 20);
    let back = tcp_round_trip(echo_addr, &data).expect("the echo of 2 MiB");
    assert!(back == data, "the echo came back different ({} bytes of {})", back.len(), data.len());
    let ls = atoll.json(&["port", "ls", "web"]);
    let guest_ports: Vec<u64> =
        ls.as_array().unwrap().iter().map(|p| p["guest_port"].as_u64().unwrap()).collect();
    assert_eq!(guest_ports, [8000, 9000], "{ls}");

    // A host port in use is refused, saying so, and publishes nothing.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let err = atoll.fails(&["port", "publish", "web", &format!("{taken_port}:7000")]);
    assert!(err.contains("already in use") && err.contains(&taken_port.to_string()), "{err}");
    // Bad ports and names are usage errors naming the form.
    for bad in ["0", "70000", "80:0", "x"] {
        let out = atoll.run(&["port", "publish", "web", bad]);
        assert_eq!(out.status.code(), Some(2), "port publish {bad}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("[HOSTPORT:]GUESTPORT"), "{}", text(&out.stderr));
    }
    let err = atoll.fails(&["port", "publish", "nosuch", "8000"]);
    assert!(err.contains("no sandbox is called `nosuch`"), "{err}");
    let err = atoll.fails(&["port", "publish", "web", "8000"]);
    assert!(err.contains("already published"), "{err}");
    let ls = atoll.json(&["port", "ls", "web"]);
    assert_eq!(ls.as_array().unwrap().len(), 2, "a refused publish changed the ports: {ls}");

    // Unpublish closes the listener.
    atoll.json(&["port", "unpublish", "web", "8000"]);
    assert!(TcpStream::connect(http_addr).is_err(), "{http_addr} still accepts after unpublish");
    let err = atoll.fails(&["port", "unpublish", "web", "8000"]);
    assert!(err.contains("not published"), "{err}");

    // A helper that died shows in `atoll info`, and the next call says what to do; kill
    // still cleans up.
    let helper = atoll.json(&["info", "web"])["net_helper_pid"].as_u64().unwrap();
    std::process::Command::new("kill").args(["-KILL", &helper.to_string()]).status().unwrap();
    wait_until("the helper to die", SERVER_WAIT, || atoll_tests::pid_gone(helper));
    let info = atoll.json(&["info", "web"]);
    assert_eq!(info["network"]["helper"], "dead", "{info}");
    let out = atoll.run(&["info", "web"]);
    assert!(text(&out.stdout).contains("helper DEAD"), "{}", text(&out.stdout));
    let err = atoll.fails(&["port", "ls", "web"]);
    assert!(
        err.contains("network helper") && err.contains("not running") && err.contains("atoll kill web"),
        "{err}"
    );
    assert!(TcpStream::connect(echo_addr).is_err(), "a dead helper's port still accepts");
    // A dead sandbox (its QEMU gone) is refused as such.
    let qemu = info["qemu_pid"].as_u64().unwrap();
    std::process::Command::new("kill").args(["-KILL", &qemu.to_string()]).status().unwrap();
    wait_until("QEMU to die", SERVER_WAIT, || atoll_tests::pid_gone(qemu));
    let err = atoll.fails(&["port", "publish", "web", "8000"]);
    assert!(err.contains("`web` is dead") && err.contains("atoll kill web"), "{err}");
    atoll.json(&["kill", "web"]);
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
    assert_eq!(atoll.sandbox_dirs(), Vec::<PathBuf>::new());
    drop(taken);
}

/// A WebSocket echo server from Python's standard library (RFC 6455 framing, unmasked
/// server frames), listening on the guest's 127.0.0.1 only.
const WS_ECHO: &str = r#"
import base64, hashlib, socket, struct, sys
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(sys.argv[1])))
srv.listen()
while True:
    c, _ = srv.accept()
    f = c.makefile("rb")
    key = ""
    while True:
        line = f.readline().decode().strip()
        if not line:
            break
        k, _, v = line.partition(":")
        if k.lower() == "sec-websocket-key":
            key = v.strip()
    accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
    c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % accept).encode())
    while True:
        h = f.read(2)
        if len(h) < 2:
            break
        op, n = h[0] & 0x0F, h[1] & 0x7F
        if n == 126:
            n = struct.unpack(">H", f.read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", f.read(8))[0]
        mask = f.read(4) if h[1] & 0x80 else b"\0\0\0\0"
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(f.read(n)))
        if op == 8:
            c.sendall(b"\x88\x00")
            break
        head = bytes([0x80 | op]) + (bytes([n]) if n < 126 else b"\x7e" + struct.pack(">H", n))
        c.sendall(head + data)
    c.close()
"#;

#[test]
fn vm_ports_debian_python_http_server_websocket_and_the_nic() {
    let atoll = Atoll::new();
    atoll.create_with("py", &["--template", "debian", "--publish", "8000"]);

    // The NIC: eth0 with the default route through the helper, and resolv.conf naming it.
    let nic = atoll.sh("py", "cat /sys/class/net/eth0/address /etc/resolv.conf /proc/net/route");
    assert!(nic.contains("52:54:00:12:34:56"), "{nic}");
    assert!(nic.contains("nameserver 10.0.2.2"), "{nic}");
    assert!(
        nic.lines().any(|l| l.starts_with("eth0\t00000000\t0202000A")),
        "no default route via 10.0.2.2: {nic}"
    );

    let info = atoll.json(&["info", "py"]);
    assert_eq!(info["network"]["network"], "default", "{info}");
    let http_addr = published_addr(&info["network"]["ports"][0]);
    atoll.sh("py", "mkdir -p /srv && echo from-python > /srv/hello.txt");
    let out = atoll.run(&[
        "-s",
        "py",
        "run",
        "-d",
        "--cwd",
        "/srv",
        "--",
        "python3",
        "-m",
        "http.server",
        "8000",
        "--bind",
        "127.0.0.1",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = wait_http_ok(http_addr, "/hello.txt");
    assert!(page.ends_with("from-python\n"), "{page}");

    // WebSocket: a real client (tungstenite) through a published port.
    let ws_file = atoll_tests::vm::short_tempdir();
    let script = ws_file.path().join("ws.py");
    std::fs::write(&script, WS_ECHO).unwrap();
    let out = atoll.run(&["-s", "py", "write", "/srv/ws.py", "--from", script.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = atoll.run(&["-s", "py", "run", "-d", "--", "python3", "/srv/ws.py", "8765"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ws = atoll.json(&["port", "publish", "py", "8765"]);
    let ws_addr = published_addr(&ws);
    let mut socket = None;
    wait_until("the WebSocket server", SERVER_WAIT, || {
        let Ok(stream) = TcpStream::connect(ws_addr) else { return false };
        match tungstenite::client(format!("ws://{ws_addr}/echo"), stream) {
            Ok((s, _)) => {
                socket = Some(s);
                true
            }
            Err(_) => false,
        }
    });
    let mut socket = socket.unwrap();
    for msg in ["hello over a websocket", &"x".repeat(40_000)] {
        socket.send(tungstenite::Message::text(msg)).unwrap();
        let back = socket.read().unwrap();
        assert_eq!(back.to_text().unwrap(), msg);
    }
    socket.close(None).unwrap();

    // A connection to a published port of a paused sandbox resumes it.
    assert_eq!(atoll.json(&["pause", "py"])["state"], "paused");
    let page = http_get(http_addr, "/hello.txt").expect("GET through a paused sandbox's port");
    assert!(page.ends_with("from-python\n"), "{page}");
    assert_eq!(atoll.state_of("py").as_deref(), Some("running"));

    kill_leaves_nothing(&atoll, "py", &[http_addr, ws_addr]);
}
