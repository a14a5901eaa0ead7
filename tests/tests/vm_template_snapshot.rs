//! Template snapshots through the `atoll` binary and real microVMs: `atoll template
//! snapshot` makes one ahead (boots, saves, removes its sandbox: no sandbox directory or
//! process is left), keeps an up-to-date one and replaces a damaged one; the first plain
//! `atoll create` of a shape that has none boots and saves one; the next restores it
//! (`atoll inspect` says so) as a machine of its own; a damaged snapshot is not used (the
//! create boots, says why with `-v`, and saves a new one); another machine shape
//! (memory) boots; `debian` restores with a disk of its own; the first sandbox of a shape
//! takes no command, and is never listed running, before it is saved.

use std::path::PathBuf;

use atoll_tests::vm::{Atoll, BOOT_TIMEOUT, text};
use atoll_tests::{processes_mentioning, vsock_backends_mentioning};
use serde_json::Value;

fn started_from(atoll: &Atoll, name: &str) -> String {
    atoll.json(&["inspect", name])["started_from"].as_str().unwrap().to_string()
}

fn template_snapshots(atoll: &Atoll) -> Vec<PathBuf> {
    match std::fs::read_dir(atoll.state_dir().join(".template-snapshots")) {
        Ok(d) => d.flatten().map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    }
}

/// `atoll template snapshot TEMPLATE ARGS` (made, kept or replaced), checking it leaves
/// no sandbox behind: no new sandbox directory, nothing new in `atoll ls`.
fn make_snapshot(atoll: &Atoll, template: &str, args: &[&str]) -> Value {
    let before = atoll.sandbox_dirs();
    let mut all = vec!["template", "snapshot", template, "--timeout", BOOT_TIMEOUT];
    all.extend_from_slice(args);
    let made = atoll.json(&all);
    assert_eq!(atoll.sandbox_dirs(), before, "the sandbox it booted is gone");
    let listed = atoll.states().len();
    assert_eq!(listed, before.len(), "atoll ls shows only the sandboxes there were");
    made
}

#[test]
fn vm_template_snapshot_minimal_restores_falls_back_and_is_replaced() {
    let atoll = Atoll::new();
    // Bad input: a clear error, nothing made.
    let err = atoll.fails(&["template", "snapshot", "nope"]);
    assert!(err.contains("template `nope` is not installed"), "{err}");
    let err = atoll.fails(&["template", "snapshot", "minimal", "--memory", "16"]);
    assert!(err.contains("--memory 16 MiB is out of range"), "{err}");
    let off = atoll
        .command(&["template", "snapshot", "minimal"])
        .env("ATOLL_TEMPLATE_SNAPSHOT", "off")
        .output()
        .unwrap();
    assert!(!off.status.success() && text(&off.stderr).contains("ATOLL_TEMPLATE_SNAPSHOT=off"), "{off:?}");
    assert!(template_snapshots(&atoll).is_empty());

    // Made ahead, with no sandbox or process left; made again, an up-to-date one is kept.
    let made = make_snapshot(&atoll, "minimal", &["--net", "none"]);
    assert_eq!(made["outcome"], "made", "{made}");
    assert_eq!((made["memory_mib"].as_u64(), made["cpus"].as_u64()), (Some(512), Some(1)));
    let saved = template_snapshots(&atoll);
    assert_eq!(saved, [PathBuf::from(made["path"].as_str().unwrap())]);
    let no_processes = processes_mentioning(atoll.state_dir());
    assert!(no_processes.is_empty(), "nothing runs after it: {no_processes:?}");
    let memory = saved[0].join("memory.bin");
    let written = std::fs::metadata(&memory).unwrap().modified().unwrap();
    let again = make_snapshot(&atoll, "minimal", &["--net", "none"]);
    assert_eq!(again["outcome"], "kept", "{again}");
    assert_eq!(std::fs::metadata(&memory).unwrap().modified().unwrap(), written, "left as it was");

    // The next plain create of that shape restores it.
    atoll.create_with("a", &["--net", "none"]);
    assert_eq!(started_from(&atoll, "a"), "template snapshot");
    atoll.sh("a", "echo a > /tmp/mine");

    let b = atoll.create_with("b", &["--net", "none"]);
    assert_eq!(b["started_from"], "template snapshot");
    assert_eq!(atoll.sh("b", "hostname; cat /tmp/mine 2>/dev/null || echo none"), "b\nnone\n");
    let random = |s: &str| atoll.sh(s, "head -c 16 /dev/urandom | od -An -tx1");
    assert_ne!(random("a"), random("b"));
    assert_eq!(vsock_backends_mentioning(atoll.state_dir()), Vec::<String>::new(), "no vsock backend runs");
    // A shape that has none: the first create boots and saves one. The egress rules are
    // the create's own, not those of the sandbox that was saved.
    let c = atoll.create_with("c", &["--deny-out", "192.0.2.0/24"]);
    assert_eq!(c["started_from"], "boot", "a machine with a NIC has its own template snapshot");
    let d = atoll.create_with("d", &["--deny-out", "198.51.100.0/24"]);
    assert_eq!(d["started_from"], "template snapshot");
    assert_eq!(atoll.json(&["net", "show", "d"])["deny_out"], serde_json::json!(["198.51.100.0/24"]));
    assert_eq!(atoll.sh("d", "ls /sys/class/net | grep -c eth0"), "1\n");
    // Another memory size is another machine: it boots.
    let small = atoll.create_with("small", &["--net", "none", "--memory", "256"]);
    assert_eq!(small["started_from"], "boot");
    assert_eq!(template_snapshots(&atoll).len(), 3);

    // A damaged snapshot: the create boots, says why with -v, and saves a new one.
    let dir = atoll.state_dir().join(".template-snapshots/minimal-512m-1c-none-tcg");
    let memory = dir.join("memory.bin");
    assert!(memory.is_file(), "the none-network snapshot is where expected");
    std::fs::write(&memory, b"QEVM").unwrap();
    let out =
        atoll.run(&["-v", "--json", "create", "--name", "e", "--net", "none", "--timeout", BOOT_TIMEOUT]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("is not used") && err.contains("memory.bin"), "-v says why: {err}");
    assert_eq!(started_from(&atoll, "e"), "boot");
    assert!(std::fs::metadata(&memory).unwrap().len() > 4, "a new snapshot replaced it");
    let f = atoll.create_with("f", &["--net", "none"]);
    assert_eq!(f["started_from"], "template snapshot");
    assert_eq!(atoll.sh("f", "hostname"), "f\n");
    // One that an older atoll saved (layout 2: its VM had a vsock device) is replaced too.
    let meta_path = dir.join("snapshot.json");
    let layout = || -> Value { serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap() };
    let mut meta = layout();
    assert_eq!(meta["format"], 3, "{meta}");
    meta["format"] = 2.into();
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    let out =
        atoll.run(&["-v", "--json", "create", "--name", "e2", "--net", "none", "--timeout", BOOT_TIMEOUT]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("is not used") && err.contains("older atoll"), "-v says why: {err}");
    assert_eq!(started_from(&atoll, "e2"), "boot");
    assert_eq!(layout()["format"], 3, "a new snapshot replaced it");

    // `atoll template snapshot` replaces a damaged one too, and leaves no sandbox.
    atoll.json(&["kill", "a", "b", "c", "d", "e", "e2", "f", "small"]);
    std::fs::write(&memory, b"QEVM").unwrap();
    let replaced = make_snapshot(&atoll, "minimal", &["--net", "none"]);
    assert_eq!(replaced["outcome"], "replaced", "{replaced}");
    assert!(replaced["replaced_because"].as_str().unwrap().contains("memory.bin"), "{replaced}");
    assert_eq!(atoll.create_with("h", &["--net", "none"])["started_from"], "template snapshot");

    // Off: always a boot.
    let out = atoll
        .command(&["--json", "create", "--name", "g", "--net", "none", "--timeout", BOOT_TIMEOUT])
        .env("ATOLL_TEMPLATE_SNAPSHOT", "off")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(started_from(&atoll, "g"), "boot");

    // `kill --all` leaves the template snapshots and says which command removes them;
    // that command removes them all, and the template stays.
    let out = atoll.run(&["kill", "--all"]);
    let err = text(&out.stderr);
    assert!(out.status.success() && err.contains("atoll template snapshot TEMPLATE --rm"), "{err}");
    assert!(!template_snapshots(&atoll).is_empty());
    let removed = atoll.json(&["template", "snapshot", "minimal", "--rm"]);
    assert!(removed["removed"].as_u64().unwrap() >= 1, "{removed}");
    assert!(template_snapshots(&atoll).is_empty());
    let out = atoll.run(&["kill", "--all"]);
    assert!(
        out.status.success() && !text(&out.stderr).contains("template snapshot"),
        "{}",
        text(&out.stderr)
    );
    assert!(text(&atoll.run(&["template", "ls"]).stdout).contains("minimal"));
}

#[test]
fn vm_template_snapshot_debian_restores_with_a_disk_of_its_own() {
    let atoll = Atoll::new();
    let made = make_snapshot(&atoll, "debian", &["--net", "none"]);
    assert_eq!(made["outcome"], "made", "{made}");
    assert!(processes_mentioning(atoll.state_dir()).is_empty(), "nothing runs after it");
    let d1 = atoll.create_with("d1", &["--template", "debian", "--net", "none"]);
    assert_eq!(d1["started_from"], "template snapshot");
    atoll.sh("d1", "echo d1 > /root/on-disk && sync");
    let d2 = atoll.create_with("d2", &["--template", "debian", "--net", "none"]);
    assert_eq!(d2["started_from"], "template snapshot");
    assert_eq!(atoll.sh("d2", "hostname; cat /root/on-disk 2>/dev/null || echo none"), "d2\nnone\n");
    atoll.sh("d2", "echo d2 > /root/on-disk && sync");
    assert_eq!(atoll.sh("d1", "cat /root/on-disk"), "d1\n");
}

/// The first `atoll create` of a shape boots a sandbox and saves it as the template
/// snapshot every later create of that shape restores. Until that save, the operator's
/// own CLI cannot run anything in it (`atoll exec` is refused as still booting) and `atoll
/// ls` never lists it running, so nothing started in it can end up in every later
/// sandbox. The attack races `exec` and `ls` against the create, from another process.
#[test]
fn vm_template_snapshot_the_first_sandbox_of_a_shape_takes_no_command_before_it_is_saved() {
    let atoll = Atoll::new();
    let mut create = atoll
        .command(&[
            "create",
            "--name",
            "first",
            "--net",
            "none",
            "--memory",
            "320",
            "--timeout",
            BOOT_TIMEOUT,
        ])
        .spawn()
        .unwrap();
    let saved = |atoll: &Atoll| template_snapshots(atoll).iter().any(|d| d.join("snapshot.json").is_file());
    let (mut seen, mut ran, mut refused) = (Vec::new(), Vec::new(), 0);
    while create.try_wait().unwrap().is_none() {
        if let Some(state) = atoll.state_of("first") {
            seen.push(if state == "running" && saved(&atoll) { "running, saved".to_string() } else { state });
        }
        let out =
            atoll.run(&["-s", "first", "exec", "--", "sh", "-c", "echo poisoned > /tmp/poison; echo ran"]);
        let still_creating = create.try_wait().unwrap().is_none();
        if out.status.success() && still_creating {
            ran.push(text(&out.stdout));
        } else if text(&out.stderr).contains("still booting") {
            refused += 1;
        }
    }
    assert!(create.wait().unwrap().success());
    assert_eq!(ran, Vec::<String>::new(), "a command ran in it before its create finished");
    assert!(refused > 0 && seen.iter().any(|s| s == "starting"), "the race saw it booting: {seen:?}");
    assert!(!seen.iter().any(|s| s == "running"), "listed running before it was saved: {seen:?}");
    // A later sandbox of that shape restores the snapshot, and holds nothing of the race.
    let second = atoll.create_with("second", &["--net", "none", "--memory", "320"]);
    assert_eq!(second["started_from"], "template snapshot", "{second}");
    assert_eq!(atoll.sh("second", "test -e /tmp/poison && echo yes || echo no"), "no\n");
    atoll.run(&["kill", "--all"]);
}
