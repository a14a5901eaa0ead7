//! Attack: a state directory someone else can steer (issue 30 item 8), through the
//! `atoll` binary, without a VM. A state directory others may enter or that another
//! user owns is refused, naming the fix; a missing one is no error for a command about
//! a sandbox (it says there is no such sandbox and creates nothing); a planted
//! `sandbox.json` that names a directory outside the state directory cannot make
//! `atoll kill` delete it, a record whose id is not its directory's name is no
//! sandbox, and a path with a comma (which QEMU options would split) is refused.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use atoll_tests::vm::{Atoll, text};

/// A record as atoll writes it, with `dir` as its claimed sandbox directory.
fn record(id: &str, name: &str, dir: &Path) -> String {
    serde_json::json!({
        "id": id, "name": name, "template": "minimal", "memory_mib": 256, "cpus": 1,
        "accel": "tcg", "created_unix_ms": 1, "qemu": null, "ready": true,
        "agent_version": null, "paused": false,
        "paths": {
            "dir": dir, "qmp_socket": dir.join("qmp.sock"), "console_log": dir.join("console.log"),
            "qemu_log": dir.join("qemu.log"), "overlay": null,
        },
    })
    .to_string()
}

#[test]
fn a_state_directory_others_can_steer_is_refused_and_records_cannot_name_paths() {
    // Others may enter: refused by every command, with the fix in the message.
    let atoll = Atoll::new();
    let state = atoll.state_dir().to_path_buf();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    for args in [vec!["ls"], vec!["kill", "x"], vec!["create", "--net", "none"]] {
        let err = atoll.fails(&args);
        assert!(err.contains("has mode 0755") && err.contains("chmod 700"), "{args:?}: {err}");
    }
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(atoll.run(&["ls"]).status.success());

    // Owned by another user (only root can hand it over; skipped otherwise).
    if std::os::unix::fs::chown(&state, Some(1234), None).is_ok() {
        let err = atoll.fails(&["ls"]);
        assert!(err.contains("belongs to uid 1234"), "{err}");
        std::os::unix::fs::chown(&state, Some(rustix_uid()), None).unwrap();
    }

    // A planted record naming a victim directory: kill removes the sandbox's own
    // directory, derived from the state directory and the id, never the victim.
    let victim = tempfile::tempdir().unwrap();
    std::fs::write(victim.path().join("precious"), "keep me\n").unwrap();
    let planted = state.join("0badc0de");
    std::fs::create_dir(&planted).unwrap();
    std::fs::write(planted.join("sandbox.json"), record("0badc0de", "planted", victim.path())).unwrap();
    let listed = atoll.json(&["ls"]);
    assert!(listed.to_string().contains("planted"), "{listed}");
    let out = atoll.run(&["kill", "planted"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(victim.path().join("precious")).unwrap(), "keep me\n");
    assert!(!planted.exists(), "kill left the sandbox's own directory");

    // A record in a directory that is not its id's is no sandbox.
    let other = state.join("0000abcd");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("sandbox.json"), record("ffff0000", "imposter", victim.path())).unwrap();
    let err = atoll.fails(&["kill", "imposter"]);
    assert!(err.contains("imposter"), "{err}");
    assert!(victim.path().join("precious").exists());

    // A path with a comma (QEMU's option separator) is refused before anything starts.
    let comma = tempfile::tempdir().unwrap();
    let out = atoll
        .command(&["create", "--net", "none"])
        .env("ATOLL_STATE_DIR", comma.path().join("a,b"))
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(!out.status.success() && err.contains("has a comma"), "{err}");
    assert!(!comma.path().join("a,b").exists());

    // A fresh machine: no state directory yet. A command about a sandbox says there is
    // no such sandbox, and creates nothing.
    let fresh = tempfile::tempdir().unwrap();
    let missing = fresh.path().join("state");
    for args in [vec!["port", "publish", "nosuch", "8000"], vec!["pause", "nosuch"], vec!["info", "nosuch"]] {
        let out = atoll.command(&args).env("ATOLL_STATE_DIR", &missing).output().unwrap();
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains("no sandbox") && err.contains("nosuch"), "{args:?}: {err}");
        assert!(!err.contains("lock"), "{args:?}: {err}");
        assert!(!missing.exists(), "{args:?} created the state directory");
    }
}

fn rustix_uid() -> u32 {
    std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap()
}
