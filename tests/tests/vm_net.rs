//! A sandbox's network through the real `atoll` binary and a booted VM, against the test
//! "outside world" (tests/src/netns.rs): atoll, QEMU and the network helper run in the
//! client namespace; the world holds HTTP/HTTPS/echo hosts and a DNS server.
//!
//! - default policy: names resolve, HTTP and HTTPS to a public test host work, and the
//!   private host, the metadata address, the host's own services, the gateway and a
//!   name rebound to a private address are all refused at once, each logged with its
//!   verdict and rule;
//! - an allowlist set live (`atoll net set`) holds the next connection: only the listed
//!   name works, a raw-IP connect to its address (no SNI) is denied, a program with no
//!   proxy settings is held all the same; widening it works without restarting anything;
//! - `--net none`: nothing resolves or connects;
//! - bad rules are usage errors naming the rule and the forms, and a host port in use
//!   for `--publish` fails the create; neither leaves anything behind.

use atoll_tests::netns::{ALLOWED_HOST, CLIENT_ADDR, METADATA_HOST, PRIVATE_HOST, World};
use atoll_tests::processes_mentioning;
use atoll_tests::vm::{Atoll, text};
use serde_json::Value;

/// Fetches a URL from inside the guest and prints `OK <body>` or `FAIL <error>`; TLS
/// certificates are not checked (the world's is self-signed), SNI is sent as usual.
const FETCH: &str = r#"
import socket, ssl, sys, urllib.request
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
try:
    with urllib.request.urlopen(sys.argv[1], timeout=20, context=ctx) as r:
        print("OK", r.read().decode().strip())
except Exception as e:
    print("FAIL", repr(getattr(e, "reason", e)))
"#;

/// `python3 /fetch.py URL` in the guest: `Ok(body)` or `Err(error)`.
fn fetch(atoll: &Atoll, name: &str, url: &str) -> Result<String, String> {
    let out = atoll.run(&["-s", name, "exec", "--", "python3", "/fetch.py", url]);
    assert!(out.status.success(), "fetch {url}: {}", text(&out.stderr));
    let line = text(&out.stdout).trim().to_string();
    match line.split_once(' ') {
        Some(("OK", body)) => Ok(body.to_string()),
        Some(("FAIL", why)) => Err(why.to_string()),
        _ => panic!("fetch {url} printed {line:?}"),
    }
}

/// A refusal that came at once from the helper (a TCP reset: "Connection refused"),
/// not a timeout.
fn refused(atoll: &Atoll, name: &str, url: &str) {
    match fetch(atoll, name, url) {
        Ok(body) => panic!("{url} should be denied, got {body}"),
        Err(why) => assert!(
            why.contains("Connection refused") || why.contains("Connection reset"),
            "{url} failed, but not as a refusal: {why}"
        ),
    }
}

/// The log entries (JSON) whose ip or name is `what`.
fn log_for(log: &Value, what: &str) -> Vec<Value> {
    log.as_array()
        .expect("net log --json is an array")
        .iter()
        .filter(|e| e["ip"] == what || e["name"] == what)
        .cloned()
        .collect()
}

/// Asserts that some TCP entry for `what` has `verdict` and `rule`.
fn logged(log: &Value, what: &str, verdict: &str, rule: &str) {
    logged_as(log, "tcp", what, verdict, rule);
}

/// Asserts that some `kind` entry for `what` has `verdict` and `rule`.
fn logged_as(log: &Value, kind: &str, what: &str, verdict: &str, rule: &str) {
    let entries = log_for(log, what);
    assert!(
        entries.iter().any(|e| e["kind"] == kind && e["verdict"] == verdict && e["rule"] == rule),
        "no {kind} {verdict} by `{rule}` for {what} in the log: {entries:?}"
    );
}

/// A name the policy refuses does not even resolve (the helper's DNS answers REFUSED).
fn unresolvable(atoll: &Atoll, name: &str, url: &str) {
    match fetch(atoll, name, url) {
        Ok(body) => panic!("{url} should be denied, got {body}"),
        Err(why) => assert!(why.contains("gaierror"), "{url} failed, but not in DNS: {why}"),
    }
}

#[test]
fn vm_net_default_policy_allowlist_live_set_and_audit_log() {
    let mut world = World::create();
    world.serve_http_in_client(8080);
    let atoll = Atoll::in_netns(world.client.name());
    let created = atoll.create_with("egress", &["--template", "debian"]);
    let helper = created["net_helper_pid"].as_u64().expect("a network helper pid");
    let script = world.dir().join("fetch.py");
    std::fs::write(&script, FETCH).unwrap();
    let out = atoll.run(&["-s", "egress", "write", "/fetch.py", "--from", script.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Names resolve through the helper's DNS (resolv.conf set by the agent).
    let out = atoll.run(&["-s", "egress", "exec", "--", "getent", "hosts", "allowed.test"]);
    assert!(out.status.success(), "getent: {}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with(&ALLOWED_HOST.to_string()), "{}", text(&out.stdout));

    // Default policy: the public test host over HTTP and HTTPS (SNI passes through).
    let body = fetch(&atoll, "egress", "http://allowed.test/").expect("HTTP to a public host");
    assert_eq!(body, "hello from 203.0.113.10 host=allowed.test sni=-");
    let body = fetch(&atoll, "egress", "https://allowed.test/").expect("HTTPS to a public host");
    assert_eq!(body, "hello from 203.0.113.10 host=allowed.test sni=allowed.test");
    // ... and raw TCP (the echo host).
    let out = atoll.run(&[
        "-s", "egress", "exec", "--", "python3", "-c",
        "import socket; s=socket.create_connection(('echo.test', 7), 20); s.sendall(b'ping'); print(s.recv(4).decode())",
    ]);
    assert_eq!(text(&out.stdout), "ping\n", "{}", text(&out.stderr));
    // Never: a private address, the metadata address, the host's own services (its
    // address and the gateway), a public name rebound to a private address.
    for url in [
        format!("http://{PRIVATE_HOST}/"),
        format!("http://{METADATA_HOST}/latest/meta-data/"),
        format!("http://{CLIENT_ADDR}:8080/"),
        "http://10.0.2.2:8080/".to_string(),
        "http://rebind.test/".to_string(),
    ] {
        refused(&atoll, "egress", &url);
    }
    let log = atoll.json(&["net", "log", "egress"]);
    logged(&log, "allowed.test", "allow", "default");
    logged(&log, &PRIVATE_HOST.to_string(), "deny", "private-range");
    logged(&log, &METADATA_HOST.to_string(), "deny", "private-range");
    logged(&log, &CLIENT_ADDR.to_string(), "deny", "private-range");
    logged(&log, "10.0.2.2", "deny", "private-range");
    let https = log_for(&log, "allowed.test")
        .into_iter()
        .find(|e| e["kind"] == "tcp" && e["port"] == 443 && e["event"] == "close")
        .expect("the HTTPS connection is logged");
    assert!(https["bytes_in"].as_u64() > Some(0) && https["bytes_out"].as_u64() > Some(0), "{https}");
    assert_eq!(https["ip"], ALLOWED_HOST.to_string());
    let denied = atoll.json(&["net", "log", "egress", "--verdict", "deny"]);
    assert!(denied.as_array().unwrap().iter().all(|e| e["verdict"] == "deny"), "{denied}");
    let last = atoll.json(&["net", "log", "egress", "--limit", "1"]);
    assert_eq!(last.as_array().unwrap().len(), 1, "{last}");

    // A strict allowlist, set live: the next connection follows it.
    let set =
        atoll.json(&["net", "set", "egress", "--deny-out", "0.0.0.0/0,::/0", "--allow-out", "allowed.test"]);
    assert_eq!(set["allow_out"], serde_json::json!(["allowed.test"]), "{set}");
    let body = fetch(&atoll, "egress", "https://allowed.test/").expect("the listed name");
    assert!(body.ends_with("sni=allowed.test"), "{body}");
    unresolvable(&atoll, "egress", "https://other.test/");
    unresolvable(&atoll, "egress", "http://denied.test/");
    // Its address, reached by IP, is refused too.
    refused(&atoll, "egress", "http://198.51.100.10/");
    // A raw-IP connect to the allowed name's address (TLS without SNI) is not it.
    refused(&atoll, "egress", &format!("https://{ALLOWED_HOST}/"));
    // A program with no proxy settings at all is held the same: nothing in the guest
    // decides, the helper does.
    let out =
        atoll.run(&["-s", "egress", "exec", "--", "env", "-i", "python3", "/fetch.py", "http://other.test/"]);
    assert!(text(&out.stdout).starts_with("FAIL"), "{}", text(&out.stdout));
    let log = atoll.json(&["net", "log", "egress"]);
    logged_as(&log, "dns", "other.test", "deny", "0.0.0.0/0");
    logged(&log, "198.51.100.10", "deny", "0.0.0.0/0");
    logged(&log, "allowed.test", "allow", "allowed.test");

    // Widened live, without restarting anything.
    let set = atoll.json(&["net", "set", "egress", "--allow-out", "allowed.test,other.test"]);
    assert_eq!(set["deny_out"], serde_json::json!(["0.0.0.0/0", "::/0"]), "the deny list is kept: {set}");
    let body = fetch(&atoll, "egress", "https://other.test/").expect("other.test, now allowed");
    assert!(body.ends_with("sni=other.test"), "{body}");
    let shown = atoll.json(&["net", "show", "egress"]);
    assert_eq!(shown["allow_out"], serde_json::json!(["allowed.test", "other.test"]), "{shown}");
    let info = atoll.json(&["info", "egress"]);
    assert_eq!(info["net_helper_pid"].as_u64(), Some(helper), "the helper was restarted: {info}");

    // A connection that stays open (a tunnel) shows in the log while it is open.
    let tunnel = "import socket, time\n\
        s = socket.create_connection(('other.test', 80), 20)\n\
        s.sendall(b'GET /tunnel HTTP/1.1\\r\\nHost: other.test\\r\\n\\r\\n'); s.recv(4096)\n\
        time.sleep(3600)\n";
    std::fs::write(world.dir().join("tunnel.py"), tunnel).unwrap();
    let out = atoll.run(&[
        "-s",
        "egress",
        "write",
        "/tunnel.py",
        "--from",
        world.dir().join("tunnel.py").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut tunnel_exec =
        atoll.command(&["-s", "egress", "exec", "--", "python3", "/tunnel.py"]).spawn().unwrap();
    let open_tunnel = |log: &Value| {
        let entries = log.as_array().expect("array");
        entries.iter().any(|e| {
            e["event"] == "open"
                && e["name"] == "other.test"
                && !entries.iter().any(|c| c["event"] == "close" && c["conn"] == e["conn"])
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !open_tunnel(&atoll.json(&["net", "log", "egress"])) {
        assert!(std::time::Instant::now() < deadline, "the open tunnel never showed in `atoll net log`");
        assert!(tunnel_exec.try_wait().unwrap().is_none(), "the tunnel's program ended");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let _ = tunnel_exec.kill();
    let _ = tunnel_exec.wait();

    // A connection flood from the guest (root, many sockets that connect and send
    // nothing, each held by the helper while it waits for a name): the helper keeps
    // serving the agent link meanwhile, and its own log stays small.
    let flood = "import resource, socket, time\n\
        resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))\n\
        for _ in range(4):\n\
        \x20   socks = []\n\
        \x20   for i in range(1500):\n\
        \x20       s = socket.socket(); s.setblocking(False)\n\
        \x20       try: s.connect(('198.51.100.10', 80))\n\
        \x20       except BlockingIOError: pass\n\
        \x20       socks.append(s)\n\
        \x20   time.sleep(2)\n\
        \x20   for s in socks: s.close()\n";
    std::fs::write(world.dir().join("flood.py"), flood).unwrap();
    let out = atoll.run(&[
        "-s",
        "egress",
        "write",
        "/flood.py",
        "--from",
        world.dir().join("flood.py").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut flooding =
        atoll.command(&["-s", "egress", "exec", "--", "python3", "/flood.py"]).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    for _ in 0..3 {
        let out = atoll.run(&["-s", "egress", "exec", "--", "echo", "alive"]);
        assert_eq!(text(&out.stdout), "alive\n", "exec during the flood: {}", text(&out.stderr));
    }
    let _ = flooding.wait();
    let helper_log = std::fs::read_to_string(
        atoll.state_dir().join(created["id"].as_str().unwrap()).join("net/net-helper.log"),
    )
    .unwrap_or_default();
    assert!(helper_log.len() < 64 * 1024, "net-helper.log grew to {} bytes", helper_log.len());
    if helper_log.matches("connections open; refusing").count() > 50 {
        assert!(helper_log.contains("suppressed by the rate limit"), "{helper_log}");
    }
    let out = atoll.run(&["-s", "egress", "exec", "--", "echo", "alive"]);
    assert_eq!(text(&out.stdout), "alive\n", "exec after the flood: {}", text(&out.stderr));

    // --follow prints new entries as JSON lines, and ends when the sandbox is killed.
    let mut follow =
        atoll.command(&["net", "log", "egress", "--follow", "--json", "--verdict", "allow"]).spawn().unwrap();
    let lines = std::io::BufReader::new(follow.stdout.take().unwrap());
    fetch(&atoll, "egress", "http://other.test/followed").expect("other.test is allowed now");
    let mut seen = Vec::new();
    for line in std::io::BufRead::lines(lines) {
        let entry: Value = serde_json::from_str(&line.unwrap()).expect("--follow --json prints JSON lines");
        assert_eq!(entry["verdict"], "allow", "{entry}");
        let done = entry["kind"] == "tcp" && entry["name"] == "other.test" && entry["port"] == 80;
        seen.push(entry);
        if done {
            break;
        }
    }
    assert!(!seen.is_empty());

    atoll.json(&["kill", "egress"]);
    let ended = atoll_tests::vm::wait_bounded(follow, std::time::Duration::from_secs(60));
    assert!(ended.is_some_and(|o| o.status.success()), "net log --follow did not end with the sandbox");
    assert!(atoll_tests::pid_gone(helper), "the network helper outlived kill");
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
}

#[test]
fn vm_net_none_resolves_and_connects_nothing() {
    let world = World::create();
    let atoll = Atoll::in_netns(world.client.name());
    atoll.create_with("cut", &["--net", "none"]);
    let out = atoll.run(&[
        "-s", "cut", "exec", "--", "sh", "-c",
        &format!("ls /sys/class/net; nslookup allowed.test; echo dns=$?; nc -w 5 {ALLOWED_HOST} 80 </dev/null; echo tcp=$?"),
    ]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!all.contains("eth0"), "{all}");
    assert!(!all.contains(&ALLOWED_HOST.to_string()) || all.contains("can't connect"), "{all}");
    assert!(all.contains("dns=1") && all.contains("tcp=1"), "{all}");
    let err = atoll.fails(&["net", "set", "cut", "--allow-out", "allowed.test"]);
    assert!(err.contains("no network"), "{err}");
    assert_eq!(atoll.json(&["net", "log", "cut"]), serde_json::json!([]));
    assert_eq!(atoll.json(&["net", "show", "cut"])["network"], "none");
}

#[test]
fn net_bad_rules_and_a_host_port_in_use_at_create_change_nothing() {
    let atoll = Atoll::new();
    for bad in ["http://x/", "10.0.0.0/33", "*.", "pypi.org:0", "pypi.org:70000"] {
        for flag in ["--allow-out", "--deny-out"] {
            let out = atoll.run(&["create", "--name", "never", flag, bad]);
            assert_eq!(out.status.code(), Some(2), "{flag} {bad}: {}", text(&out.stderr));
            let err = text(&out.stderr);
            assert!(
                err.contains(&format!("invalid rule `{bad}`")) && err.contains("a rule is a domain"),
                "{err}"
            );
        }
    }
    let err = atoll.fails(&["create", "--name", "never", "--net", "none", "--allow-out", "pypi.org"]);
    assert!(err.contains("need a network"), "{err}");
    assert!(atoll.sandbox_dirs().is_empty(), "a refused create left {:?}", atoll.sandbox_dirs());
    // A port asked for at create that the host cannot give fails the create, which
    // leaves nothing behind (it is published before QEMU starts).
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let err = atoll.fails(&["create", "--name", "never", "--publish", &format!("{port}:8000")]);
    assert!(err.contains("guest port 8000") && err.contains("already in use"), "{err}");
    assert!(atoll.sandbox_dirs().is_empty(), "a failed create left {:?}", atoll.sandbox_dirs());
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
    let err = atoll.fails(&["net", "set", "nosuch", "--allow-out", "pypi.org"]);
    assert!(err.contains("no sandbox is called `nosuch`"), "{err}");
    let err = atoll.fails(&["net", "log", "nosuch"]);
    assert!(err.contains("no sandbox is called `nosuch`"), "{err}");
}
