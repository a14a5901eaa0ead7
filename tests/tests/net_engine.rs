//! The atoll-net engine end to end with a real kernel TCP/IP stack as the guest (a TAP
//! device in a namespace, relayed to the engine's NIC socket in QEMU's stream
//! framing) against the test "outside world": real `curl`, `getent` and `python3`.
//! netvm's VM tests prove the same through QEMU and the `atoll` binary.

mod net_util;

use atoll_net::log::{Event, Kind};
use atoll_net::policy::{Policy, Verdict};
use atoll_tests::netns::{ALLOWED_HOST, CLIENT_ADDR, MANY_COUNT, MANY_NAME, METADATA_HOST, PRIVATE_HOST};
use net_util::{Rig, curl_failed, ok};

fn policy(allow: &[&str], deny: &[&str]) -> Policy {
    Policy::from_lists(allow, deny).expect("valid policy")
}

/// curl's exit code for "connection refused" (the guest got a RST to its SYN).
const REFUSED: i32 = 7;
/// curl's exit codes for a reset during the TLS handshake or the request.
const RESET: [i32; 2] = [35, 56];

#[test]
fn default_policy_reaches_public_hosts_and_refuses_private_ones_at_once() {
    let rig = Rig::start(Policy::default());
    let getent = ok(&rig.run("getent", &["hosts", "allowed.test"]));
    assert!(getent.starts_with(&ALLOWED_HOST.to_string()), "{getent}");
    assert_eq!(
        ok(&rig.curl(&["https://allowed.test/"])),
        "hello from 203.0.113.10 host=allowed.test sni=allowed.test\n"
    );
    assert_eq!(ok(&rig.curl(&["http://other.test/"])), "hello from 198.51.100.10 host=other.test sni=-\n");
    let echo = ok(&rig.run(
        "python3",
        &["-c", "import socket; s=socket.create_connection(('echo.test', 7)); s.sendall(b'ping'); print(s.recv(4).decode())"],
    ));
    assert_eq!(echo, "ping\n");

    // Private, link-local (metadata), the rebinding name, the gateway and the host's own
    // address: each is served in the world or the client namespace (see net_world.rs),
    // and each is refused at the SYN: curl says "connection refused", never times out.
    for url in [
        format!("http://{PRIVATE_HOST}/"),
        format!("http://{METADATA_HOST}/latest/meta-data/"),
        "http://rebind.test/".to_string(),
        "http://10.0.2.2:18080/".to_string(),
        format!("http://{CLIENT_ADDR}:18080/"),
    ] {
        let err = curl_failed(&rig.curl(&[&url]), &[REFUSED]);
        assert!(err.contains("refused") || err.contains("Couldn't connect"), "{url}: {err}");
    }

    let https = rig.wait_record("the HTTPS connection", |r| {
        r.kind == Kind::Tcp && r.port == 443 && r.event == Some(Event::Close)
    });
    let open = rig.wait_record("its open line", |r| r.event == Some(Event::Open) && r.conn == https.conn);
    assert_eq!((open.verdict, open.bytes_in), (Verdict::Allow, 0), "{open:?}");
    assert_eq!((https.verdict, https.rule.as_str()), (Verdict::Allow, "default"));
    assert_eq!(https.name.as_deref(), Some("allowed.test"));
    assert!(https.bytes_in > 0 && https.bytes_out > 0, "{https:?}");
    for ip in [PRIVATE_HOST, METADATA_HOST, CLIENT_ADDR] {
        let r = rig.wait_record(&format!("{ip}"), |r| r.ip == Some(ip.into()));
        assert_eq!((r.verdict, r.rule.as_str()), (Verdict::Deny, "private-range"), "{r:?}");
    }
    let rebind =
        rig.wait_record("rebind.test", |r| r.kind == Kind::Tcp && r.name.as_deref() == Some("rebind.test"));
    assert_eq!(rebind.verdict, Verdict::Deny);
    let dns =
        rig.wait_record("the DNS query", |r| r.kind == Kind::Dns && r.query_type.as_deref() == Some("A"));
    assert_eq!(
        (dns.verdict, dns.ip, dns.name.as_deref()),
        (Verdict::Allow, Some(ALLOWED_HOST.into()), Some("allowed.test"))
    );
}

#[test]
fn udp_other_than_dns_is_blocked_and_logged() {
    let rig = Rig::start(Policy::default());
    let out = rig.run(
        "python3",
        &[
            "-c",
            "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(10); \
             s.connect(('203.0.113.10', 9999)); s.send(b'x'); \
             exec('try:\\n s.recv(1)\\nexcept ConnectionRefusedError:\\n print(\"refused\")')",
        ],
    );
    assert_eq!(ok(&out), "refused\n", "ICMP port unreachable comes back at once");
    let r = rig.wait_record("the UDP datagram", |r| r.kind == Kind::Udp);
    assert_eq!((r.verdict, r.rule.as_str(), r.port), (Verdict::Deny, "udp-blocked", 9999));
}

#[test]
fn an_allowlist_lets_only_its_names_through() {
    let rig = Rig::start(policy(&["allowed.test", "echo.test"], &["0.0.0.0/0", "::/0"]));
    assert_eq!(
        ok(&rig.curl(&["https://allowed.test/"])),
        "hello from 203.0.113.10 host=allowed.test sni=allowed.test\n"
    );
    assert_eq!(ok(&rig.curl(&["http://allowed.test/"])), "hello from 203.0.113.10 host=allowed.test sni=-\n");
    // A raw-TCP protocol by name (no SNI, no Host) claims nothing: judged by IP rules
    // only (fail closed), so the allowed name it resolved does not let it through.
    let echo = ok(&rig.run(
        "python3",
        &[
            "-c",
            "import socket; s=socket.create_connection(('echo.test', 7)); s.sendall(b'ping')\n\
              try: print(s.recv(4) or b'closed')\nexcept ConnectionResetError: print('reset')",
        ],
    ));
    assert_eq!(echo, "reset\n");

    // Names not on the list do not even resolve.
    assert!(!rig.run("getent", &["hosts", "other.test"]).status.success());
    curl_failed(&rig.curl(&["https://other.test/"]), &[6]);
    // A raw IP, even the allowed name's own address (already resolved): TLS without SNI
    // and HTTP with an IP as Host connect by IP, and IPs are denied.
    curl_failed(&rig.curl(&["-k", "https://203.0.113.10/"]), &RESET);
    curl_failed(&rig.curl(&["http://203.0.113.10/"]), &RESET);
    // An allowed SNI sent to an address that name never resolved to: nothing resolved
    // to that address, so no first bytes could make it allowed; refused at the SYN.
    curl_failed(
        &rig.curl(&["--resolve", "allowed.test:443:198.51.100.10", "https://allowed.test/"]),
        &[REFUSED],
    );
    // A name the DNS refused, sent to an allowed name's address.
    curl_failed(&rig.curl(&["--resolve", "other.test:443:203.0.113.10", "https://other.test/"]), &RESET);
    // An address nothing resolved to: refused at the SYN.
    curl_failed(&rig.curl(&["http://203.0.113.20/"]), &[REFUSED]);

    let raw =
        rig.wait_record("the raw-IP HTTPS", |r| r.kind == Kind::Tcp && r.port == 443 && r.name.is_none());
    assert_eq!((raw.verdict, raw.rule.as_str()), (Verdict::Deny, "0.0.0.0/0"), "{raw:?}");
    let spoof = rig
        .wait_record("the spoofed SNI", |r| r.kind == Kind::Tcp && r.name.as_deref() == Some("other.test"));
    assert_eq!((spoof.verdict, spoof.rule.as_str()), (Verdict::Deny, "0.0.0.0/0"));
    let elsewhere =
        rig.wait_record("the SNI elsewhere", |r| r.ip == Some("198.51.100.10".parse().expect("ip")));
    assert_eq!(elsewhere.verdict, Verdict::Deny);
    let dns = rig
        .wait_record("the refused query", |r| r.kind == Kind::Dns && r.name.as_deref() == Some("other.test"));
    assert_eq!(dns.verdict, Verdict::Deny);
    let good = rig.wait_record("the allowed HTTPS", |r| r.port == 443 && r.verdict == Verdict::Allow);
    assert_eq!((good.rule.as_str(), good.name.as_deref()), ("allowed.test", Some("allowed.test")));
}

#[test]
fn set_policy_applies_to_the_next_connection() {
    let rig = Rig::start(Policy::default());
    ok(&rig.curl(&["https://allowed.test/"]));
    rig.engine.set_policy(policy(&[], &["allowed.test"]));
    assert_eq!(rig.engine.policy(), policy(&[], &["allowed.test"]));
    curl_failed(&rig.curl(&["https://allowed.test/"]), &[6]);
    // Past the DNS (the address is known): the SNI is still denied.
    curl_failed(&rig.curl(&["--resolve", "allowed.test:443:203.0.113.10", "https://allowed.test/"]), &RESET);
    ok(&rig.curl(&["https://other.test/"]));
    rig.engine.set_policy(Policy::default());
    ok(&rig.curl(&["https://allowed.test/"]));
    let denied = rig.wait_record("the denied SNI", |r| r.kind == Kind::Tcp && r.verdict == Verdict::Deny);
    assert_eq!((denied.rule.as_str(), denied.name.as_deref()), ("allowed.test", Some("allowed.test")));
}

#[test]
fn a_slow_connect_out_holds_the_guest_syn_without_refusing_it() {
    let rig = Rig::start(Policy::default());
    rig.world.set_link(false);
    // The guest's SYN is held while the connect out retries; the guest retransmits its
    // SYN meanwhile (after 1 s, 3 s), and those must not be answered with RST.
    let cert = rig.world.cert();
    let curl = rig
        .guest
        .exec("curl")
        .args(["-sS", "--max-time", "60", "--cacert"])
        .arg(&cert)
        .arg(format!("http://{ALLOWED_HOST}/"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn curl");
    std::thread::sleep(std::time::Duration::from_millis(2500));
    rig.world.set_link(true);
    let out = curl.wait_with_output().expect("curl");
    assert_eq!(ok(&out), format!("hello from {ALLOWED_HOST} host={ALLOWED_HOST} sni=-\n"));
}

#[test]
fn a_large_dns_answer_is_truncated_over_udp_and_served_over_tcp() {
    let rig = Rig::start(Policy::default());
    let out = ok(&rig.run("getent", &["ahostsv4", MANY_NAME]));
    let addrs: std::collections::BTreeSet<&str> =
        out.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(addrs.len(), usize::from(MANY_COUNT), "{out}");
    // Asked twice: over UDP (answer truncated) and again over TCP.
    rig.wait_record("the query over TCP", |_| {
        let asked = rig
            .records()
            .iter()
            .filter(|r| r.name.as_deref() == Some(MANY_NAME) && r.query_type.as_deref() == Some("A"))
            .count();
        asked >= 2
    });
}

#[test]
fn many_concurrent_connections_to_one_endpoint_each_get_their_own_answer() {
    let rig = Rig::start(Policy::default());
    let script = "import concurrent.futures, urllib.request\n\
        def get(i):\n\
        \x20   return urllib.request.urlopen('http://allowed.test/?%d' % i, timeout=30).read()\n\
        with concurrent.futures.ThreadPoolExecutor(64) as pool:\n\
        \x20   bodies = list(pool.map(get, range(200)))\n\
        print(sum(b == b'hello from 203.0.113.10 host=allowed.test sni=-\\n' for b in bodies))\n";
    assert_eq!(ok(&rig.run("python3", &["-c", script])), "200\n");
}

#[test]
fn shutdown_removes_the_nic_socket_and_a_taken_path_is_a_clear_error() {
    let rig = Rig::start(Policy::default());
    let socket = rig.world.dir().join("net.sock");
    assert!(socket.exists());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let err = runtime
        .block_on(async {
            let config = atoll_net::EngineConfig::new(
                atoll_net::Frames::Path(socket.clone()),
                rig.world.dir().join("second.log"),
                Policy::default(),
            );
            atoll_net::Engine::start(config)
        })
        .expect_err("the path is taken");
    assert!(err.to_string().contains("net.sock"), "{err}");
    assert!(!rig.world.dir().join("second.log").exists(), "a failed start leaves no file");
    let err = runtime
        .block_on(async {
            let config = atoll_net::EngineConfig::new(
                atoll_net::Frames::Path(rig.world.dir().join("other.sock")),
                rig.world.dir().join("no-such-dir/net.log"),
                Policy::default(),
            );
            atoll_net::Engine::start(config)
        })
        .expect_err("the log's directory is missing");
    assert!(err.to_string().contains("no-such-dir/net.log"), "{err}");
    assert!(!rig.world.dir().join("other.sock").exists(), "a failed start leaves no socket");
    rig.engine.shutdown();
    assert!(!socket.exists(), "the socket file is gone after shutdown");
}

#[test]
fn a_closed_port_is_refused_and_logged_as_a_failed_allow() {
    let rig = Rig::start(Policy::default());
    curl_failed(&rig.curl(&["http://allowed.test:81/"]), &[REFUSED]);
    let r = rig.wait_record("port 81", |r| r.port == 81 && r.event == Some(Event::Close));
    assert_eq!(r.verdict, Verdict::Allow);
    assert!(r.error.as_deref().is_some_and(|e| e.contains("refused")), "{r:?}");
}

#[test]
fn bulk_transfers_arrive_whole_both_ways_with_large_frames() {
    // 65520 is the MTU the guest uses (as with passt): frames up to 64 KiB.
    let rig = Rig::start_with(Policy::default(), 65520);
    let size = 64 * 1024 * 1024;
    let out = rig.curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{size_download}",
        &format!("http://allowed.test/bytes/{size}"),
    ]);
    assert_eq!(ok(&out), size.to_string());
    let upload = rig.world.dir().join("upload");
    std::fs::write(&upload, vec![7u8; size]).expect("write upload");
    let sent = rig.curl(&["--data-binary", &format!("@{}", upload.display()), "http://allowed.test/count"]);
    assert_eq!(ok(&sent), format!("received {size} bytes\n"));
    let down = rig.wait_record("the download", |r| r.kind == Kind::Tcp && r.bytes_in > size as u64);
    assert!(down.bytes_out > 0, "{down:?}");
    let up = rig.wait_record("the upload", |r| r.kind == Kind::Tcp && r.bytes_out > size as u64);
    assert!(up.bytes_in > 0, "{up:?}");
}

#[test]
fn a_new_nic_connection_resets_the_connections_the_guest_had_open() {
    // A restored guest still holds the connections it had open when it was saved; one it
    // only reads from must end with a reset, not hang.
    let mut rig = Rig::start(Policy::default());
    let script = "import socket, sys\n\
        s = socket.create_connection(('echo.test', 7), 20)\n\
        s.sendall(b'ping'); assert s.recv(4) == b'ping'\n\
        print('connected', flush=True)\n\
        try:\n\
        \x20   print('read', s.recv(1))\n\
        except ConnectionResetError:\n\
        \x20   print('reset')\n";
    let mut reader = rig
        .guest
        .exec("python3")
        .args(["-c", script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 in the guest");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(reader.stdout.take().unwrap()));
    assert_eq!(lines.next().unwrap().unwrap(), "connected");
    let open = rig.engine.open_flows();
    assert!(
        open.iter().any(|(guest, remote)| guest.ip().to_string() == "10.0.2.15" && remote.port() == 7),
        "the engine lists the open connection: {open:?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(reader.try_wait().unwrap().is_none(), "the reader waits while the connection is up");
    rig.reconnect();
    let done = atoll_tests::vm::wait_bounded(reader, std::time::Duration::from_secs(60))
        .expect("the guest's connection hung after the NIC reconnected");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let _ = done;
    assert_eq!(rest, ["reset"], "the guest's read ended with a reset");
    // A new connection works on the new NIC connection.
    let out = rig.curl(&["http://allowed.test/"]);
    assert_eq!(ok(&out), "hello from 203.0.113.10 host=allowed.test sni=-\n");
}

/// The attacks on a name-dependent verdict, from the guest, against an allowlist of
/// `allowed.test` where `shared.test` shares its address (as sites share a CDN address):
/// each tries to reach `shared.test` without a parseable claim in time, or with a second
/// claim on a connection allowed for the first. Each prints `reset ...` or `got ...`.
const CLAIM_ATTACKS: &str = r#"
import socket, ssl, struct, sys, time
IP, CA = '203.0.113.10', sys.argv[1]

def recv_all(s):
    data = b''
    while True:
        c = s.recv(65536)
        if not c:
            return data
        data += c

def hello(name, pad):
    sni = struct.pack('!HBH', len(name) + 3, 0, len(name)) + name
    ext = struct.pack('!HH', 21, pad) + b'\0' * pad + struct.pack('!HH', 0, len(sni)) + sni
    body = b'\x03\x03' + b'\x07' * 32 + b'\x00' + b'\x00\x02\x13\x01' + b'\x01\x00' + struct.pack('!H', len(ext)) + ext
    hs = b'\x01' + struct.pack('!I', len(body))[1:] + body
    return b''.join(b'\x16\x03\x01' + struct.pack('!H', len(hs[i:i + 16000])) + hs[i:i + 16000]
                    for i in range(0, len(hs), 16000))

def delayed():
    s = socket.create_connection((IP, 443), 20)
    time.sleep(4.5)
    t = ssl.create_default_context(cafile=CA).wrap_socket(s, server_hostname='shared.test')
    t.sendall(b'GET / HTTP/1.1\r\nHost: shared.test\r\nConnection: close\r\n\r\n')
    return recv_all(t)

def raw(port, data):
    s = socket.create_connection((IP, port), 20)
    s.sendall(data)
    return recv_all(s)

def keep_alive():
    s = socket.create_connection((IP, 80), 20)
    s.sendall(b'GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n')
    first = b''
    while b'sni=' not in first:
        first += s.recv(65536)
    print('first', first.split(b'\r\n\r\n')[-1].decode().strip(), flush=True)
    s.sendall(b'GET / HTTP/1.1\r\nHost: shared.test\r\n\r\n')
    return recv_all(s)

for what, attack in [
    ('control-small-hello', lambda: raw(443, hello(b'allowed.test', 100))[:1]),
    ('delayed-hello', delayed),
    ('padded-hello', lambda: raw(443, hello(b'shared.test', 20000))),
    ('blank-line-http', lambda: raw(80, b'\r\nGET / HTTP/1.1\r\nHost: shared.test\r\nConnection: close\r\n\r\n')),
    ('garbage', lambda: raw(80, b'\x00\x01\x02 not a protocol\r\n')),
    ('escape-sni', lambda: raw(443, hello(b'allowed.test\x1b[2J', 100))),
    ('second-hello', lambda: raw(443, hello(b'allowed.test', 100) + hello(b'shared.test', 100))),
    ('keep-alive', keep_alive),
]:
    try:
        print(what, 'got', repr(attack()[:40]), flush=True)
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError) as e:
        print(what, 'reset', type(e).__name__, flush=True)
"#;

#[test]
fn a_name_dependent_verdict_fails_closed_and_later_claims_are_checked() {
    let rig = Rig::start(policy(&["allowed.test"], &["0.0.0.0/0", "::/0"]));
    ok(&rig.run("getent", &["hosts", "allowed.test"]));
    let cert = rig.world.cert();
    let out = ok(&rig.run("python3", &["-c", CLAIM_ATTACKS, cert.to_str().expect("utf-8")]));
    let line = |what: &str| {
        out.lines().find(|l| l.starts_with(&format!("{what} "))).unwrap_or_else(|| panic!("no {what}: {out}"))
    };
    // The hand-made ClientHello reaches the server when its name is allowed (it answers
    // with a handshake record or an alert), so a reset of the padded one is the policy's.
    let control = line("control-small-hello");
    assert!(
        control.starts_with("control-small-hello got b'\\x16'")
            || control.starts_with("control-small-hello got b'\\x15'"),
        "{out}"
    );
    for attack in [
        "delayed-hello",
        "padded-hello",
        "blank-line-http",
        "garbage",
        "escape-sni",
        "second-hello",
        "keep-alive",
    ] {
        assert!(line(attack).starts_with(&format!("{attack} reset")), "{attack} got through: {out}");
    }
    assert_eq!(line("first"), "first hello from 203.0.113.10 host=allowed.test sni=-", "{out}");
    assert!(!out.contains("host=shared.test"), "shared.test was reached: {out}");

    // Each is logged as refused, by the IP rules (the allowlist's 0.0.0.0/0).
    let denied = |port: u16, name: Option<&str>| {
        rig.records()
            .into_iter()
            .filter(|r| {
                r.kind == Kind::Tcp
                    && r.port == port
                    && r.verdict == Verdict::Deny
                    && r.rule == "0.0.0.0/0"
                    && (name.is_none() || r.name.as_deref() == name)
            })
            .count()
    };
    rig.wait_record("the delayed and padded hellos", |_| denied(443, None) >= 2);
    rig.wait_record("the blank-line request", |_| denied(80, Some("shared.test")) >= 2);
    rig.wait_record("the garbage", |_| denied(80, Some("allowed.test")) >= 1);
    // An SNI that is no host name is judged as none, and logged escaped.
    let escaped = rig.wait_record("the escape-sequence SNI", |r| r.invalid_name.is_some());
    assert_eq!(escaped.invalid_name.as_deref(), Some("allowed.test\\x1b[2J"), "{escaped:?}");
    assert_eq!((escaped.verdict, escaped.rule.as_str()), (Verdict::Deny, "0.0.0.0/0"));
    let kept = rig.wait_record("the kept-alive connection", |r| {
        r.event == Some(Event::Close) && r.verdict == Verdict::Deny && r.port == 80
    });
    assert_eq!(kept.name.as_deref(), Some("shared.test"), "{kept:?}");
    assert!(kept.error.as_deref().is_some_and(|e| e.contains("later request")), "{kept:?}");
    let second = rig.wait_record("the second ClientHello", |r| {
        r.event == Some(Event::Close) && r.verdict == Verdict::Deny && r.port == 443
    });
    assert_eq!(second.name.as_deref(), Some("shared.test"), "{second:?}");
    let opened = rig.wait_record("its open line", |r| r.event == Some(Event::Open) && r.conn == kept.conn);
    assert_eq!((opened.verdict, opened.name.as_deref()), (Verdict::Allow, Some("allowed.test")));
}

/// Sends `sys.argv[1]` DNS queries for distinct names from 8 threads, each waiting for
/// its answer (or 1 s).
const DNS_FLOOD: &str = r#"
import socket, struct, sys, threading
def worker(k, n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1)
    for i in range(n):
        name = b''.join(bytes([len(p)]) + p for p in [b'q%d-%d' % (k, i), b'flood', b'test']) + b'\0'
        s.sendto(struct.pack('!HHHHHH', i & 0xffff, 0x0100, 1, 0, 0, 0) + name + b'\0\x01\0\x01', ('10.0.2.2', 53))
        try:
            s.recv(4096)
        except socket.timeout:
            pass
n = int(sys.argv[1])
threads = [threading.Thread(target=worker, args=(k, n // 8)) for k in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print('done')
"#;

#[test]
fn an_open_tunnel_is_logged_while_open_and_a_dns_flood_does_not_flush_it() {
    let rig = Rig::start(Policy::default());
    let script = "import socket, sys\n\
        s = socket.create_connection(('echo.test', 7), 20)\n\
        s.sendall(b'ping'); assert s.recv(4) == b'ping'\n\
        print('connected', flush=True)\n\
        sys.stdin.read()\n";
    let mut tunnel = rig
        .guest
        .exec("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 in the guest");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(tunnel.stdout.take().unwrap()));
    assert_eq!(lines.next().unwrap().unwrap(), "connected");
    // Open now, and logged as open: a tunnel shows while it lasts.
    let open = rig.wait_record("the tunnel's open line", |r| r.port == 7 && r.event == Some(Event::Open));
    assert_eq!((open.verdict, open.name.as_deref()), (Verdict::Allow, Some("echo.test")), "{open:?}");
    assert!(!rig.records().iter().any(|r| r.conn == open.conn && r.event == Some(Event::Close)));

    // A DNS flood: rate-limited and counted, in its own file; the tunnel's line stays.
    assert_eq!(ok(&rig.run("python3", &["-c", DNS_FLOOD, "2400"])), "done\n");
    let summary = rig.wait_record("the count of suppressed DNS lines", |r| {
        r.kind == Kind::Dns && r.rule == "rate-limited" && r.suppressed.is_some_and(|n| n > 0)
    });
    let dns_lines = rig.records().iter().filter(|r| r.kind == Kind::Dns && r.suppressed.is_none()).count();
    assert!(dns_lines < 2000, "the flood was not limited: {dns_lines} DNS lines ({summary:?})");
    assert!(rig.records().contains(&open), "the tunnel's open line was flushed away by the flood");

    // Closed: its close line, with the bytes, pairs with the open one.
    drop(tunnel.stdin.take());
    atoll_tests::vm::wait_bounded(tunnel, std::time::Duration::from_secs(30)).expect("python3 ends");
    let close =
        rig.wait_record("the tunnel's close line", |r| r.conn == open.conn && r.event == Some(Event::Close));
    assert_eq!((close.bytes_out, close.bytes_in), (4, 4), "{close:?}");
}

#[test]
fn an_address_the_host_gains_later_is_denied_and_port_25_is_closed_by_default() {
    let rig = Rig::start(Policy::default());
    // Before: a public address, allowed (nothing answers there, so the connect fails).
    let late = "198.51.100.77";
    // (Another port: the connect out of this try may still be retrying later.)
    curl_failed(&rig.curl(&["--max-time", "3", &format!("http://{late}:18081/")]), &[REFUSED, 28]);
    let before = rig.wait_record("the first try", |r| r.ip == Some(late.parse().expect("ip")));
    assert_eq!(before.verdict, Verdict::Allow, "{before:?}");
    // The host gains the address (its HTTP service listens on every address): from then
    // on it is the host's own, refused at the SYN, though the engine read its addresses
    // at start.
    rig.world.client.ip(&["addr", "add", &format!("{late}/32"), "dev", "lo"]);
    assert!(
        rig.world
            .client
            .exec("curl")
            .args(["-sf", "-o", "/dev/null", &format!("http://{late}:18080/")])
            .status()
            .expect("curl")
            .success()
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let err = curl_failed(&rig.curl(&[&format!("http://{late}:18080/")]), &[REFUSED]);
    assert!(err.contains("refused") || err.contains("Couldn't connect"), "{err}");
    let after = rig.wait_record("the refused try", |r| {
        r.ip == Some(late.parse().expect("ip")) && r.verdict == Verdict::Deny
    });
    assert_eq!(after.rule, "private-range");

    curl_failed(&rig.curl(&["http://allowed.test:25/"]), &[REFUSED]);
    let smtp = rig.wait_record("port 25", |r| r.port == 25);
    assert_eq!((smtp.verdict, smtp.rule.as_str()), (Verdict::Deny, "port-25-blocked"));
    rig.engine.set_policy(policy(&["allowed.test:25"], &[]));
    // Opened by a rule naming the port: it goes out (nothing listens on 25 in the world;
    // the verdict depends on the Host, so the guest's handshake completed first and the
    // failed connect out resets it).
    curl_failed(&rig.curl(&["http://allowed.test:25/"]), &[REFUSED, 56]);
    let opened = rig.wait_record("port 25 opened", |r| r.port == 25 && r.verdict == Verdict::Allow);
    assert_eq!(opened.rule, "allowed.test:25");
}

#[test]
fn a_connection_flood_is_held_at_the_flow_limit_and_the_engine_still_serves() {
    let rig = Rig::start(policy(&["other.test"], &["0.0.0.0/0", "::/0"]));
    ok(&rig.run("getent", &["hosts", "other.test"]));
    // 3000 connections that complete their handshake and send nothing: each is held
    // while the engine waits for a name (the verdict depends on it).
    let flood = "import resource, socket, time\n\
        resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))\n\
        socks = []\n\
        for i in range(3000):\n\
        \x20   s = socket.socket(); s.setblocking(False)\n\
        \x20   try: s.connect(('198.51.100.10', 80))\n\
        \x20   except BlockingIOError: pass\n\
        \x20   socks.append(s)\n\
        print('flooding', flush=True)\n\
        time.sleep(6)\n";
    let mut flooding = rig
        .guest
        .exec("python3")
        .args(["-c", flood])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 in the guest");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(flooding.stdout.take().unwrap()));
    assert_eq!(lines.next().unwrap().unwrap(), "flooding");
    let mut most = 0;
    for _ in 0..20 {
        most = most.max(rig.engine.open_flows().len());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(most <= atoll_net::stack::MAX_FLOWS, "{most} flows held");
    assert!(most > 100, "the flood did not load the engine ({most} flows): the test proves nothing");
    // DNS is still answered during the flood.
    ok(&rig.run("getent", &["hosts", "other.test"]));
    atoll_tests::vm::wait_bounded(flooding, std::time::Duration::from_secs(60)).expect("the flood ends");
    // Afterwards the held flows are gone and a new connection works.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while rig.engine.open_flows().len() > 10 {
        assert!(std::time::Instant::now() < deadline, "{} flows still held", rig.engine.open_flows().len());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(ok(&rig.curl(&["http://other.test/"])), "hello from 198.51.100.10 host=other.test sni=-\n");
}

/// A small tmpfs, unmounted on drop: a disk that can be filled.
struct SmallFs(tempfile::TempDir);

impl SmallFs {
    fn mount(kib: u32) -> SmallFs {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("mount");
        assert!(
            out.status.success(),
            "mount tmpfs (tests need root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallFs(dir)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn egress_stops_while_the_audit_log_cannot_be_written() {
    let disk = SmallFs::mount(256);
    let rig = Rig::start_logging_to(Policy::default(), disk.0.path().join("net.log"));
    let direct = ["--resolve", "allowed.test:80:203.0.113.10", "http://allowed.test/"];
    assert_eq!(ok(&rig.curl(&direct)), "hello from 203.0.113.10 host=allowed.test sni=-\n");
    assert_eq!(rig.engine.log_health().error, None);
    // The disk fills up: the next connection's open line cannot be written, so the
    // connection is refused rather than carried unlogged.
    let filler = disk.0.path().join("filler");
    let _ = std::fs::write(&filler, vec![0u8; 512 * 1024]);
    // (The log's last page may still hold a few lines.)
    let mut tries = 0;
    let refused = loop {
        let out = rig.curl(&direct);
        if !out.status.success() {
            break out;
        }
        tries += 1;
        assert!(tries < 50, "50 connections went out with the disk full");
    };
    curl_failed(&refused, &[REFUSED]);
    let health = rig.engine.log_health();
    assert!(health.error.as_deref().is_some_and(|e| e.contains("net.log")), "{health:?}");
    assert!(health.failed_writes >= 1);
    // DNS is refused too while the last line failed.
    assert!(!rig.run("getent", &["hosts", "other.test"]).status.success());
    // Space again: egress resumes, logged.
    std::fs::remove_file(&filler).expect("rm filler");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = rig.curl(&direct);
        if out.status.success() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "egress did not resume: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(rig.engine.log_health().error, None);
    // No connection went out unlogged: one open line for each that got through (the
    // first, the `tries` the log's last page still had room for, the one after space
    // came back), none for the refused ones, and no torn line.
    let opens = rig
        .records()
        .into_iter()
        .filter(|r| r.event == Some(Event::Open) && r.port == 80 && r.verdict == Verdict::Allow)
        .count();
    assert_eq!(opens, tries + 2, "{tries} connections went out while the disk was full");
}

#[test]
fn a_half_open_connection_from_the_guest_is_dropped() {
    let rig = Rig::start(Policy::default());
    // The guest's kernel sends its SYN and nothing after it (its ACKs, data and resets
    // are dropped on the way out): the engine is left with a handshake that never
    // completes, as under a SYN flood.
    for flags in ["ACK", "RST"] {
        let out = rig.run(
            "iptables",
            &[
                "-A",
                "OUTPUT",
                "-p",
                "tcp",
                "--dport",
                "80",
                "--tcp-flags",
                "SYN,ACK,RST",
                flags,
                "-j",
                "DROP",
            ],
        );
        ok(&out);
    }
    let mut half = rig
        .guest
        .exec("python3")
        .args([
            "-c",
            "import socket, time; s = socket.create_connection(('203.0.113.10', 80), 20); time.sleep(600)",
        ])
        .spawn()
        .expect("python3 in the guest");
    let to_80 = |rig: &Rig| rig.engine.open_flows().iter().any(|(_, remote)| remote.port() == 80);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !to_80(&rig) {
        assert!(std::time::Instant::now() < deadline, "the half-open connection never reached the engine");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // It is dropped once the guest stayed silent for the timeout (90 s), not kept.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    while to_80(&rig) {
        assert!(std::time::Instant::now() < deadline, "the half-open connection was never dropped");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let _ = half.kill();
    let _ = half.wait();
}
