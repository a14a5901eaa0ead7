//! Secrets through the real `atoll` binary and one booted debian VM, against the netns
//! world (docs/secrets.md): `atoll secret set`, `atoll create --secret`, `atoll secret
//! attach|detach|rm`; Python's urllib and Node's fetch in the guest send the placeholder
//! the guest holds, the world's HTTPS host receives the value; the value is in no guest
//! variable, no file under the sandbox directory, no `net log`, `info` or `secret ls`.
//! The engine-level cases (Basic, SNI/Host mismatch, impostor, policy) are in
//! net_secrets.rs.

use std::io::Write;
use std::process::Stdio;

use atoll_tests::netns::World;
use atoll_tests::vm::{Atoll, text};

const VALUE: &str = "ghp_VM_REAL_VALUE_4f1d9a";
const ROTATED: &str = "ghp_VM_ROTATED_VALUE_77c2";
const FROM_CMD: &str = "ghp_VM_FROM_COMMAND_51e0";
const FROM_CMD_NEXT: &str = "ghp_VM_FROM_COMMAND_NEXT_0b93";

/// Python: GET URL with `Authorization: Bearer $VAR`, verifying TLS with the defaults
/// (SSL_CERT_FILE, set by atoll when a secret is bound); prints the body or `FAIL why`.
const FETCH: &str = r#"
import os, ssl, sys, urllib.request
url, var = sys.argv[1], sys.argv[2]
ctx = ssl.create_default_context()
if len(sys.argv) > 3:
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
req = urllib.request.Request(url, headers={"Authorization": "Bearer " + os.environ[var]})
try:
    with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
        print(r.read().decode().strip())
        print("echoed-header:", r.headers.get("X-Echo-Authorization"))
except Exception as e:
    print("FAIL", repr(getattr(e, "reason", e)))
"#;

fn set(atoll: &Atoll, world: &World, name: &str, value: &str, host: &str) {
    let mut child = atoll
        .command(&["secret", "set", name, "--host", host])
        .env("ATOLL_SECRETS_CA_FILE", world.cert())
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{value}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "secret set: {}", text(&out.stderr));
}

fn fetch(atoll: &Atoll, url: &str, var: &str, unverified: bool) -> String {
    let mut args = vec!["-s", "sec", "exec", "--", "python3", "/fetch.py", url, var];
    if unverified {
        args.push("x");
    }
    let out = atoll.run(&args);
    assert!(out.status.success(), "fetch {url}: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn vm_secrets_placeholder_inside_value_at_egress() {
    let world = World::create();
    let atoll = Atoll::in_netns(world.client.name());
    set(&atoll, &world, "gh", VALUE, "allowed.test");

    // Refused before anything is made: an unknown secret, a bad variable.
    let err = atoll.fails(&["create", "--name", "x", "--secret", "GH=nope"]);
    assert!(err.contains("no secret named `nope`"), "{err}");
    let err = atoll.fails(&["create", "--name", "x", "--secret", "1GH=gh"]);
    assert!(err.contains("not an environment variable name"), "{err}");
    assert!(atoll.sandbox_dirs().is_empty(), "a refused create left a sandbox");

    let mut create = atoll.command(&[
        "--json",
        "create",
        "--name",
        "sec",
        "--timeout",
        "600s",
        "--template",
        "debian",
        "--secret",
        "GH_TOKEN=gh",
    ]);
    let out = create.env("ATOLL_SECRETS_CA_FILE", world.cert()).output().unwrap();
    assert!(out.status.success(), "create: {}", text(&out.stderr));
    let script = world.dir().join("fetch.py");
    std::fs::write(&script, FETCH).unwrap();
    let out = atoll.run(&["-s", "sec", "write", "/fetch.py", "--from", script.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // The guest holds a placeholder, never the value.
    let placeholder = atoll.sh("sec", "printf %s \"$GH_TOKEN\"");
    assert!(placeholder.starts_with("atoll-secret-gh-") && placeholder.len() > 30, "{placeholder}");
    let env = atoll.sh("sec", "env; cat /proc/1/environ | tr '\\0' '\\n'");
    assert!(!env.contains(VALUE), "the value is in the guest's environment");
    assert!(env.contains("SSL_CERT_FILE=/etc/atoll/ca-bundle.pem"), "{env}");

    // Python urllib, verifying TLS as it does by default: the host gets the value, and
    // the value it echoes in a header comes back as the placeholder.
    let got = fetch(&atoll, "https://allowed.test/headers", "GH_TOKEN", false);
    assert!(got.contains(&format!("authorization: Bearer {VALUE}")), "{got}");
    assert!(got.contains(&format!("echoed-header: Bearer {placeholder}")), "{got}");
    // Node's fetch (NODE_EXTRA_CA_CERTS).
    let node = "fetch('https://allowed.test/headers',{headers:{authorization:'Bearer '+process.env.GH_TOKEN}})\
                .then(r=>r.text()).then(t=>console.log(t)).catch(e=>console.log('FAIL',e))";
    let out = atoll.run(&["-s", "sec", "exec", "--timeout", "120s", "--", "node", "-e", node]);
    let got = text(&out.stdout);
    assert!(got.contains(&format!("authorization: Bearer {VALUE}")), "node: {got}{}", text(&out.stderr));
    // Another allowed host gets the placeholder unchanged.
    let got = fetch(&atoll, "https://other.test/headers", "GH_TOKEN", true);
    assert!(got.contains(&format!("Authorization: Bearer {placeholder}")) && !got.contains(VALUE), "{got}");
    // Plain HTTP to the secret's host: unchanged.
    let got = fetch(&atoll, "http://allowed.test/headers", "GH_TOKEN", true);
    assert!(got.contains(&format!("Authorization: Bearer {placeholder}")) && !got.contains(VALUE), "{got}");

    // Rotation: the next request carries the new value.
    set(&atoll, &world, "gh", ROTATED, "allowed.test");
    let got = fetch(&atoll, "https://allowed.test/headers", "GH_TOKEN", false);
    assert!(got.contains(&format!("authorization: Bearer {ROTATED}")), "{got}");

    // attach (a second binding, seen by commands started afterwards) and detach.
    let bound = atoll.json(&["secret", "attach", "sec", "gh", "--env", "SECOND"]);
    let second = bound["placeholder"].as_str().unwrap().to_string();
    assert_ne!(second, placeholder, "a placeholder is unique per binding");
    assert_eq!(atoll.sh("sec", "printf %s \"$SECOND\""), second);
    let err = atoll.fails(&["secret", "attach", "sec", "gh", "--env", "SECOND"]);
    assert!(err.contains("bound to the secret `gh` already"), "{err}");
    let info = atoll.json(&["info", "sec"]);
    assert_eq!(info["secrets"].as_array().map(Vec::len), Some(2), "{info}");
    atoll.json(&["secret", "detach", "sec", "GH_TOKEN"]);
    let got = fetch(&atoll, "https://allowed.test/headers", "SECOND", false);
    assert!(got.contains(&format!("authorization: Bearer {ROTATED}")), "{got}");
    // A --from-command secret: its command runs on the host outside the helper's jail
    // (the file it reads is in the test's folder, which the jailed helper cannot see),
    // and again once its cache time is over (0 s here).
    let token = world.dir().join("from-command-token");
    std::fs::write(&token, format!("{FROM_CMD}\n")).unwrap();
    let cat = format!("cat {}", token.display());
    let out = atoll
        .command(&["secret", "set", "cmd", "--host", "allowed.test", "--from-command", &cat, "--cache", "0s"])
        .env("ATOLL_SECRETS_CA_FILE", world.cert())
        .output()
        .unwrap();
    assert!(out.status.success(), "secret set --from-command: {}", text(&out.stderr));
    atoll.json(&["secret", "attach", "sec", "cmd", "--env", "FROM_CMD"]);
    let got = fetch(&atoll, "https://allowed.test/headers", "FROM_CMD", false);
    assert!(got.contains(&format!("authorization: Bearer {FROM_CMD}")), "{got}");
    std::fs::write(&token, format!("{FROM_CMD_NEXT}\n")).unwrap();
    let got = fetch(&atoll, "https://allowed.test/headers", "FROM_CMD", false);
    assert!(got.contains(&format!("authorization: Bearer {FROM_CMD_NEXT}")), "{got}");
    atoll.json(&["secret", "detach", "sec", "FROM_CMD"]);

    // rm: the next request sends the placeholder (unverified: the connection is
    // intercepted only while a bound secret names the host).
    atoll.json(&["secret", "rm", "gh"]);
    let got = fetch(&atoll, "https://allowed.test/headers", "SECOND", true);
    assert!(got.contains(&second) && !got.contains(ROTATED), "{got}");

    // The audit log names the secret; no value anywhere atoll keeps or prints.
    let log = text(&atoll.run(&["net", "log", "sec"]).stdout);
    assert!(log.contains("secret=gh"), "{log}");
    for shown in [
        log,
        text(&atoll.run(&["--json", "net", "log", "sec"]).stdout),
        text(&atoll.run(&["--json", "info", "sec"]).stdout),
        text(&atoll.run(&["info", "sec"]).stdout),
        text(&atoll.run(&["--json", "secret", "ls"]).stdout),
    ] {
        assert!(!shown.contains(VALUE) && !shown.contains(ROTATED), "a value is shown: {shown}");
    }
    for dir in atoll.sandbox_dirs() {
        let out = std::process::Command::new("grep")
            .args(["-rlaF", "-e", VALUE, "-e", ROTATED, "-e", FROM_CMD, "-e", FROM_CMD_NEXT])
            .arg(&dir)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "a value is in {}: {}", dir.display(), text(&out.stdout));
    }
    // Bindings and the CA live in the store's private directory, not in the sandbox
    // directory QEMU can write; they go at kill.
    let id = atoll.json(&["info", "sec"])["id"].as_str().unwrap().to_string();
    let private = atoll.state_dir().join(".secrets/sandboxes").join(&id);
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&private).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700, "{}", private.display());
    assert!(private.join("ca.key").exists(), "{}", private.display());
    // The bindings lie outside the directory the jailed helper writes (its CA's).
    let bindings = atoll.state_dir().join(".secrets/bindings").join(format!("{id}.json"));
    assert!(bindings.exists() && !private.join("bindings.json").exists(), "{}", bindings.display());
    let out = atoll.run(&["kill", "sec"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!private.exists(), "kill left {}", private.display());
    assert!(!bindings.exists(), "kill left {}", bindings.display());
}

/// Runs `cmd` on the host, asserting success.
fn host(cmd: &mut std::process::Command) {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {}", text(&out.stderr));
}

/// `git clone` over HTTPS with the token in the URL (Basic auth, as GitHub takes it) in a
/// debian sandbox: the world's HTTPS hosts serve a bare repository (git's dumb HTTP
/// protocol) only to `x-access-token:VALUE`. The clone from the secret's host works
/// because the network helper swaps the placeholder inside `Authorization: Basic`; the
/// same clone from another host, which receives the placeholder, is refused; the clone
/// keeps only the placeholder in its config.
#[test]
fn vm_secrets_git_clone_over_https_with_the_placeholder_in_the_url() {
    let world = World::create();
    // The repository, made on the host: one commit, packed, with the dumb-protocol files.
    let bare = world.dir().join("git/repo.git");
    let work = world.dir().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("README"), "cloned through the secret swap\n").unwrap();
    let git = |dir: &std::path::Path, args: &[&str]| {
        let mut cmd = std::process::Command::new("git");
        cmd.arg("-C").arg(dir).args(["-c", "user.email=t@example.test", "-c", "user.name=test"]).args(args);
        host(&mut cmd);
    };
    git(&work, &["init", "-q", "-b", "main"]);
    git(&work, &["add", "README"]);
    git(&work, &["commit", "-q", "-m", "the one commit"]);
    host(std::process::Command::new("git").args(["clone", "-q", "--bare"]).arg(&work).arg(&bare));
    git(&bare, &["repack", "-a", "-d", "-q"]);
    git(&bare, &["update-server-info"]);
    std::fs::write(world.dir().join("git-token"), VALUE).unwrap();

    let atoll = Atoll::in_netns(world.client.name());
    set(&atoll, &world, "gh", VALUE, "allowed.test");
    let mut create = atoll.command(&[
        "create",
        "--name",
        "git",
        "--timeout",
        "600s",
        "--template",
        "debian",
        "--secret",
        "GH_TOKEN=gh",
    ]);
    let out = create.env("ATOLL_SECRETS_CA_FILE", world.cert()).output().unwrap();
    assert!(out.status.success(), "create: {}", text(&out.stderr));
    let placeholder = atoll.sh("git", "printf %s \"$GH_TOKEN\"");
    assert!(placeholder.starts_with("atoll-secret-gh-"), "{placeholder}");

    let clone = |host: &str, dir: &str, verify: bool| {
        let script = format!(
            "cd /root && GIT_TERMINAL_PROMPT=0 git -c http.sslVerify={verify} clone -q \
             \"https://x-access-token:$GH_TOKEN@{host}/git/repo.git\" {dir} 2>&1; echo \"exit=$?\""
        );
        let out = atoll.run(&["-s", "git", "exec", "--timeout", "300s", "--", "sh", "-c", &script]);
        assert!(out.status.success(), "{script}: {}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    };
    // The secret's host, verified against the sandbox CA (GIT_SSL_CAINFO): cloned.
    let got = clone("allowed.test", "ok", true);
    if !got.ends_with("exit=0") {
        // Which certificate the guest was shown, for the failure message.
        let diag = atoll.sh(
            "git",
            "echo | openssl s_client -connect allowed.test:443 -servername allowed.test 2>&1 | grep -E 's:|i:|Verif'",
        );
        panic!("clone from the secret's host: {got}\nthe chain the guest sees: {diag}");
    }
    let got = atoll.sh("git", "cat /root/ok/README && git -C /root/ok log --format=%s");
    assert_eq!(got.trim(), "cloned through the secret swap\nthe one commit");
    let url = atoll.sh("git", "git -C /root/ok remote get-url origin");
    assert!(url.contains(&placeholder) && !url.contains(VALUE), "the clone's remote URL: {url}");
    // Another allowed host gets the placeholder, which its server refuses.
    let got = clone("other.test", "refused", false);
    assert!(
        got.contains("Authentication failed") && !got.ends_with("exit=0"),
        "clone from another host: {got}"
    );
    assert_eq!(atoll.sh("git", "test -e /root/refused/README; echo $?").trim(), "1");

    let log = text(&atoll.run(&["net", "log", "git"]).stdout);
    assert!(log.contains("secret=gh"), "{log}");
    let out = std::process::Command::new("grep")
        .args(["-rlaF", VALUE])
        .args(atoll.sandbox_dirs())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "the value is in a sandbox file: {}", text(&out.stdout));
    let out = atoll.run(&["kill", "git"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// `atoll ARGS` with the world's CA trusted upstream (a command that starts a network
/// helper: create, fork, resume).
fn with_world_ca(atoll: &Atoll, world: &World, args: &[&str]) -> String {
    let out = atoll.command(args).env("ATOLL_SECRETS_CA_FILE", world.cert()).output().unwrap();
    assert!(out.status.success(), "atoll {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Fork, park and snapshot (docs/secrets.md, "Lifecycle"): the source keeps its
/// bindings through a snapshot and a park; a fork (`create --from`) starts with none,
/// so a placeholder it inherited in its memory and files goes out unchanged, until an
/// `attach` in the fork binds it anew (a new placeholder, the fork's own CA); a detach in
/// the fork leaves the source as it was; no value in any file atoll keeps outside the
/// secret store (sandbox directories, the snapshot, the parked state, logs).
#[test]
fn vm_secrets_fork_starts_unbound_and_no_value_in_snapshot_or_park() {
    let world = World::create();
    let atoll = Atoll::in_netns(world.client.name());
    set(&atoll, &world, "gh", VALUE, "allowed.test");
    let script = world.dir().join("fetch.py");
    std::fs::write(&script, FETCH).unwrap();
    with_world_ca(
        &atoll,
        &world,
        &[
            "--json",
            "create",
            "--name",
            "sec",
            "--timeout",
            "900s",
            "--template",
            "debian",
            "--secret",
            "GH_TOKEN=gh",
        ],
    );
    let out = atoll.run(&["-s", "sec", "write", "/fetch.py", "--from", script.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let placeholder = atoll.sh("sec", "printf %s \"$GH_TOKEN\" | tee /root/placeholder");
    assert!(placeholder.starts_with("atoll-secret-gh-"), "{placeholder}");
    // `/auth-digest`: the host answers with a digest of what it got, so the value never
    // comes back into the guest's memory (a body is not scrubbed).
    let swapped = digest(&format!("Bearer {VALUE}"));
    let unswapped = digest(&format!("Bearer {placeholder}"));
    let url = "https://allowed.test/auth-digest";
    assert!(fetch(&atoll, url, "GH_TOKEN", false).contains(&swapped));

    // A snapshot, then a park and resume: the source keeps its binding.
    let out = atoll.run(&["snapshot", "create", "sec", "--name", "snap"]);
    assert!(out.status.success(), "snapshot: {}", text(&out.stderr));
    let out = atoll.run(&["pause", "sec", "--to-disk"]);
    assert!(out.status.success(), "park: {}", text(&out.stderr));
    let parked = grep_state(&atoll);
    assert!(parked.is_empty(), "a value is in a file while parked: {parked}");
    with_world_ca(&atoll, &world, &["resume", "sec"]);
    assert!(fetch(&atoll, url, "GH_TOKEN", false).contains(&swapped));

    // The fork: no bindings, no variable in new commands, the inherited placeholder
    // (a file from its source) goes out unchanged on a connection not intercepted.
    with_world_ca(
        &atoll,
        &world,
        &["--json", "create", "--from", "snap", "--name", "fork", "--timeout", "900s"],
    );
    let info = atoll.json(&["info", "fork"]);
    assert_eq!(info.get("secrets").and_then(|s| s.as_array()).map_or(0, Vec::len), 0, "{info}");
    assert_eq!(atoll.sh("fork", "printf %s \"${GH_TOKEN-unset}\""), "unset");
    assert_eq!(atoll.sh("fork", "cat /root/placeholder"), placeholder);
    let out = atoll.run(&[
        "-s",
        "fork",
        "exec",
        "--sh",
        "GH_TOKEN=$(cat /root/placeholder) python3 /fetch.py https://allowed.test/auth-digest GH_TOKEN x",
    ]);
    let got = text(&out.stdout);
    assert!(got.contains(&unswapped), "{got}");
    // Attached in the fork: a new placeholder, swapped (the fork's CA verified by Python).
    let bound = atoll.json(&["secret", "attach", "fork", "gh", "--env", "GH_TOKEN"]);
    let fork_placeholder = bound["placeholder"].as_str().unwrap().to_string();
    assert_ne!(fork_placeholder, placeholder);
    let got = atoll.run(&["-s", "fork", "exec", "--", "python3", "/fetch.py", url, "GH_TOKEN"]);
    assert!(text(&got.stdout).contains(&swapped), "fork after attach: {}", text(&got.stdout));
    // The source's placeholder means nothing in the fork, even now.
    let out = atoll.run(&[
        "-s",
        "fork",
        "exec",
        "--sh",
        "GH_TOKEN=$(cat /root/placeholder) python3 /fetch.py https://allowed.test/auth-digest GH_TOKEN",
    ]);
    let got = text(&out.stdout);
    assert!(got.contains(&unswapped), "{got}");
    // Detach in the fork: the source is unaffected.
    atoll.json(&["secret", "detach", "fork", "gh"]);
    assert!(fetch(&atoll, url, "GH_TOKEN", false).contains(&swapped));

    let found = grep_state(&atoll);
    assert!(found.is_empty(), "a value is in a file atoll keeps: {found}");
    for name in ["fork", "sec"] {
        let out = atoll.run(&["kill", name]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
}

/// Files under the state directory holding VALUE, outside the secret store (`.secrets`,
/// where the value is kept): sandbox directories, snapshots, parked state, logs.
fn grep_state(atoll: &Atoll) -> String {
    let out = std::process::Command::new("grep")
        .args(["-rlaF", "--exclude-dir=.secrets", "-e", VALUE])
        .arg(atoll.state_dir())
        .output()
        .unwrap();
    assert!(out.status.code().is_some_and(|c| c <= 1), "grep: {}", text(&out.stderr));
    // The search finds the value where it is (the store), so an empty answer means something.
    let store = std::process::Command::new("grep")
        .args(["-rlaF", "-e", VALUE])
        .arg(atoll.state_dir().join(".secrets"))
        .output()
        .unwrap();
    assert!(store.status.success(), "the search does not find the value in the store");
    text(&out.stdout)
}

/// `auth-sha256=<hex>`: what the world's `/auth-digest` answers for an Authorization.
fn digest(authorization: &str) -> String {
    use sha2::Digest;
    let hex: String =
        sha2::Sha256::digest(authorization.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    format!("auth-sha256={hex}")
}
