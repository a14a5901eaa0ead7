//! Secrets swapped at egress (docs/secrets.md), through the real atoll-net engine with a
//! real kernel stack and curl as the guest (net_util), against the netns world's HTTPS
//! hosts: the value reaches only the secret's host, over a verified connection, only
//! when SNI and Host agree, and never shows in the guest's responses or the audit log.
//! The VM and CLI path is in vm_secrets.rs.

#[allow(dead_code, reason = "this test uses part of the shared rig")]
mod net_util;

use std::sync::{Arc, Mutex};

use atoll_net::policy::Policy;
use atoll_net::secrets::{Bound, SecretSource, Secrets};
use net_util::{Rig, ok};

const PLACEHOLDER: &str = "atoll-secret-gh-0123456789abcdef";
const VALUE: &str = "ghp_REAL_VALUE_never_in_guest";
const ROTATED: &str = "ghp_ROTATED_value_2";

/// The bindings, changed by the test as `atoll secret` would change the files.
#[derive(Default)]
struct Bindings(Mutex<Vec<Bound>>);

impl SecretSource for Bindings {
    fn bound(&self, _with_values: bool) -> Vec<Bound> {
        self.0.lock().unwrap().clone()
    }
}

fn gh(value: &str) -> Bound {
    Bound {
        name: "gh".into(),
        placeholder: PLACEHOLDER.into(),
        hosts: vec!["allowed.test".into(), "impostor.allowed.test".into()],
        value: Ok(value.into()),
    }
}

/// Whether `text` has the line `name: value` (the name in any case: the swap forwards
/// header names in lower case, as HTTP/2 writes them).
fn has(text: &str, name: &str, value: &str) -> bool {
    text.lines().any(|l| {
        l.trim_end().split_once(": ").is_some_and(|(n, v)| n.eq_ignore_ascii_case(name) && v == value)
    })
}

/// The engine swapping `bindings`, with a new sandbox CA (`sandbox-ca.pem` in the
/// returned directory) and the world's CA trusted upstream.
fn swap_rig(bindings: Arc<Bindings>) -> (Rig, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = atoll_net::secrets::ca::new_ca("test").unwrap();
    std::fs::write(dir.path().join("sandbox-ca.pem"), &cert).unwrap();
    let policy = Policy::from_lists(
        &["allowed.test", "shared.test", "other.test", "impostor.allowed.test"],
        &["0.0.0.0/0", "::/0"],
    )
    .unwrap();
    let rig = Rig::start_with_secrets(policy, move |world| {
        let upstream = atoll_net::secrets::upstream::client_config(&[world.cert().as_path()]).unwrap();
        Secrets {
            source: bindings,
            ca: Arc::new(atoll_net::secrets::ca::LeafIssuer::from_pem(&cert, &key).unwrap()),
            upstream: Arc::new(atoll_net::secrets::upstream::Upstream::ready(upstream)),
        }
    });
    (rig, dir)
}

/// sha256 of `text`, hex (what the world's WebSocket reports of the Authorization it got).
fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Node's WebSocket client (undici): opens URL with `Authorization: Bearer TOKEN`,
/// prints the server's first message, sends a short text and a 300 KB message and
/// checks each comes back, then closes.
const WS_CLIENT: &str = r#"
const [url, token] = process.argv.slice(1);
const big = 'y'.repeat(300000);
const got = [];
const timer = setTimeout(() => { console.log('TIMEOUT', got.length); process.exit(2); }, 30000);
const ws = new WebSocket(url, { headers: { authorization: 'Bearer ' + token } });
ws.onopen = () => console.log('open');
ws.onmessage = (m) => {
  got.push(String(m.data));
  if (got.length === 1) { console.log(got[0]); ws.send('ping-1'); }
  else if (got.length === 2) { console.log('echo', got[1]); ws.send(big); }
  else { console.log('big-echo', got[2].length, got[2] === big); ws.close(1000, 'done'); }
};
ws.onerror = (e) => console.log('FAIL', e.message || e);
ws.onclose = (e) => { console.log('closed', e.code); clearTimeout(timer); };
"#;

#[test]
fn a_placeholder_becomes_the_value_only_for_its_host() {
    let bindings = Arc::new(Bindings::default());
    bindings.0.lock().unwrap().push(gh(VALUE));
    let (rig, dir) = swap_rig(bindings.clone());
    let ca_path = dir.path().join("sandbox-ca.pem");
    let sandbox_ca = ca_path.to_str().unwrap();
    let world_ca = rig.world.cert();
    let world_ca = world_ca.to_str().unwrap();
    let bearer = format!("Authorization: Bearer {PLACEHOLDER}");
    let curl = |ca: &str, args: &[&str]| {
        let mut all = vec!["-sS", "--max-time", "30", "--cacert", ca, "-D", "-", "--http1.1"];
        all.extend_from_slice(args);
        rig.run("curl", &all)
    };

    // Bearer: the server gets the value; the value it echoes back comes back as the placeholder.
    let got = ok(&curl(sandbox_ca, &["-H", &bearer, "https://allowed.test/headers"]));
    assert!(has(&got, "authorization", &format!("Bearer {VALUE}")), "the value did not arrive: {got}");
    assert!(has(&got, "x-echo-authorization", &format!("Bearer {PLACEHOLDER}")), "not scrubbed: {got}");
    assert_eq!(got.matches(VALUE).count(), 1, "the value shows only in the echoed body: {got}");

    // Basic (as git sends a token): swapped inside the base64.
    let got = ok(&curl(
        sandbox_ca,
        &["-u", &format!("x-access-token:{PLACEHOLDER}"), "https://allowed.test/headers"],
    ));
    let basic = |v: &str| {
        let out = std::process::Command::new("base64")
            .arg("-w0")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(format!("x-access-token:{v}").as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(has(&got, "authorization", &format!("Basic {}", basic(VALUE))), "Basic not swapped: {got}");

    // HTTP/2 (ALPN h2) from the guest: swapped the same way.
    let h2 = ["-sS", "--max-time", "30", "--cacert", sandbox_ca, "-D", "-", "--http2", "-H", &bearer];
    let got = ok(&rig.run("curl", &[&h2[..], &["https://allowed.test/headers"]].concat()));
    assert!(got.starts_with("HTTP/2 200"), "not HTTP/2: {got}");
    assert!(has(&got, "authorization", &format!("Bearer {VALUE}")), "h2: the value did not arrive: {got}");
    assert!(has(&got, "x-echo-authorization", &format!("Bearer {PLACEHOLDER}")), "h2: not scrubbed: {got}");

    // Another allowed host (not intercepted: the world's own certificate) gets the placeholder.
    let got = ok(&curl(world_ca, &["-H", &bearer, "https://other.test/headers"]));
    assert!(has(&got, "authorization", &format!("Bearer {PLACEHOLDER}")) && !got.contains(VALUE), "{got}");
    // Plain HTTP to the secret's host: never swapped.
    let got = ok(&curl(world_ca, &["-H", &bearer, "http://allowed.test/headers"]));
    assert!(has(&got, "authorization", &format!("Bearer {PLACEHOLDER}")) && !got.contains(VALUE), "{got}");
    // SNI allowed.test, Host shared.test (allowed, and on the same address): no swap.
    ok(&rig.run("getent", &["hosts", "shared.test"]));
    let got =
        ok(&curl(sandbox_ca, &["-H", &bearer, "-H", "Host: shared.test", "https://allowed.test/headers"]));
    assert!(got.contains("host=shared.test") && !got.contains(VALUE), "{got}");
    assert!(has(&got, "authorization", &format!("Bearer {PLACEHOLDER}")), "{got}");
    // A Host the policy does not allow, on an intercepted connection: refused, as the
    // claim watch refuses it without secrets (a secret never widens the policy).
    let got =
        ok(&curl(sandbox_ca, &["-H", &bearer, "-H", "Host: denied.test", "https://allowed.test/headers"]));
    assert!(got.starts_with("HTTP/1.1 403") && !got.contains(VALUE), "{got}");
    // The secret's name resolving to a server that cannot prove it: nothing sent, a 502 that says why.
    let got = ok(&curl(sandbox_ca, &["-H", &bearer, "https://impostor.allowed.test/headers"]));
    assert!(got.starts_with("HTTP/1.1 502") && got.contains("did not prove"), "{got}");
    assert!(!got.contains("hello from"), "the request reached the impostor: {got}");

    // Rotation counts from the next request.
    *bindings.0.lock().unwrap() = vec![gh(ROTATED)];
    let got = ok(&curl(sandbox_ca, &["-H", &bearer, "https://allowed.test/headers"]));
    assert!(has(&got, "authorization", &format!("Bearer {ROTATED}")), "{got}");
    // A removed secret (no value): the placeholder goes unchanged.
    *bindings.0.lock().unwrap() =
        vec![Bound { value: Err("no secret named `gh`".into()), hosts: Vec::new(), ..gh(VALUE) }];
    let got = ok(&curl(world_ca, &["-H", &bearer, "https://allowed.test/headers"]));
    assert!(has(&got, "authorization", &format!("Bearer {PLACEHOLDER}")) && !got.contains(ROTATED), "{got}");
    // Detached: not intercepted at all (the world's certificate is what the guest sees).
    bindings.0.lock().unwrap().clear();
    let got = ok(&curl(world_ca, &["-H", &bearer, "https://allowed.test/headers"]));
    assert!(has(&got, "authorization", &format!("Bearer {PLACEHOLDER}")), "{got}");

    // The audit log names the secret on each swapped request, warns on the others, and
    // holds no value.
    rig.wait_record("a swapped request", |r| r.secret.as_deref() == Some("gh"));
    let warned = rig.wait_record("the mismatch warning", |r| {
        r.warning
            .as_deref()
            .is_some_and(|w| w.contains("Host `shared.test` is not the TLS name `allowed.test`"))
    });
    assert_eq!(warned.secret, None);
    let log = std::fs::read_to_string(&rig.log).unwrap();
    assert!(!log.contains(VALUE) && !log.contains(ROTATED), "a value is in the audit log:\n{log}");
}

#[test]
fn a_websocket_upgrade_gets_the_value_and_is_relayed_both_ways() {
    let bindings = Arc::new(Bindings::default());
    bindings.0.lock().unwrap().push(gh(VALUE));
    let (rig, dir) = swap_rig(bindings);
    let ca = format!("NODE_EXTRA_CA_CERTS={}", dir.path().join("sandbox-ca.pem").display());
    let ws = |url: &str| {
        let out =
            rig.run("env", &[&ca, "node", "--experimental-websocket", "-e", WS_CLIENT, url, PLACEHOLDER]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    // Through the swap: the handshake carried the value (the server reports its hash,
    // never the value), then messages both ways, a large one too, and a clean close.
    let got = ws("wss://allowed.test/ws");
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(
        lines,
        [
            "open",
            &format!("auth-sha256={}", sha256_hex(&format!("Bearer {VALUE}"))),
            "echo ping-1",
            "big-echo 300000 true",
            "closed 1000"
        ],
        "{got}"
    );
    rig.wait_record("the swapped handshake", |r| r.secret.as_deref() == Some("gh"));

    // The placeholder to a host the secret does not name arrives unchanged (the world's
    // certificate: this connection is not intercepted).
    let world_ca = format!("NODE_EXTRA_CA_CERTS={}", rig.world.cert().display());
    let out = rig.run(
        "env",
        &[&world_ca, "node", "--experimental-websocket", "-e", WS_CLIENT, "wss://other.test/ws", PLACEHOLDER],
    );
    let got = String::from_utf8_lossy(&out.stdout);
    assert!(got.contains(&format!("auth-sha256={}", sha256_hex(&format!("Bearer {PLACEHOLDER}")))), "{got}");
    let log = std::fs::read_to_string(&rig.log).unwrap();
    assert!(!log.contains(VALUE), "the value is in the audit log:\n{log}");
}
