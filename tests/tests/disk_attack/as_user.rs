//! The snapshot disk attacks with `atoll` run as an ordinary user (when the tests run as
//! root: uid [`SHARE_OWNER`], no groups, `setpriv`), whose QEMU has that user's uid.
//! No VM is booted for it: the user's state directory gets a copy of root's snapshot
//! (its disk rebased, as a user moving a data directory would, onto the user's own
//! template image), which the user forks.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use atoll_tests::processes_mentioning;
use atoll_tests::vm::{Atoll, HANG_GUARD, SHARE_OWNER, short_tempdir, text, wait_bounded};

use super::{backing_name, fifo, image_with_data_file, qemu_img, watch_proven};

/// `atoll ARGS` as the ordinary user, with state directory `state` and data directory
/// `data`.
fn as_user(state: &Path, data: &Path, args: &[&str]) -> Output {
    let mut cmd = if rustix::process::geteuid().is_root() {
        let id = SHARE_OWNER.to_string();
        let mut c = Command::new("setpriv");
        c.args(["--reuid", &id, "--regid", &id, "--clear-groups", "--"])
            .arg(atoll_tests::workspace_bin("atoll"));
        c
    } else {
        Command::new(atoll_tests::workspace_bin("atoll"))
    };
    cmd.env_remove("ATOLL_AGENT")
        .env_remove("ATOLL_SANDBOX")
        .env("ATOLL_STATE_DIR", state)
        .env("ATOLL_DATA_DIR", data)
        .env("HOME", state)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    wait_bounded(cmd.spawn().unwrap(), HANG_GUARD).expect("atoll hung and was killed")
}

/// Gives `path` and everything under it (links themselves) to the ordinary user.
fn give(path: &Path) {
    if rustix::process::geteuid().is_root() {
        let owner = format!("{SHARE_OWNER}:{SHARE_OWNER}");
        let out = Command::new("chown").args(["-R", "-h", &owner]).arg(path).output().unwrap();
        assert!(out.status.success(), "chown: {}", text(&out.stderr));
    }
}

/// Snapshot `snap` of `atoll`'s state directory (a debian sandbox's, with
/// `/root/on-disk` reading "before"), copied into an ordinary user's state directory
/// and altered there (its backing file renamed to a FIFO, an external data file, a FIFO
/// in its disk's place), is refused by that user's `create --from` with the message root
/// gets, before anything starts: no sandbox directory or process, neither FIFO opened.
/// Unaltered, the user forks it, and its QEMU runs as the user.
pub(crate) fn altered_snapshot_disks_are_refused_as_an_ordinary_user(atoll: &Atoll, snap: &str) {
    let host = short_tempdir();
    std::fs::set_permissions(host.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (state, data) = (host.path().join("state"), host.path().join("data"));
    // The user's data directory: the kernel, the agent and the debian template, linked
    // (root's own is under /root, which others cannot enter).
    let from = atoll_tests::data_dir();
    std::fs::create_dir_all(data.join("templates")).unwrap();
    for part in ["kernel", "bin", "templates/debian"] {
        let ok = Command::new("cp").arg("-al").arg(from.join(part)).arg(data.join(part)).status().unwrap();
        assert!(ok.success(), "linking {}", from.join(part).display());
    }
    let source = atoll.state_dir().join(".snapshots").join(snap);
    let copy = state.join(".snapshots").join(snap);
    std::fs::create_dir_all(&copy).unwrap();
    for f in ["snapshot.json", "memory.bin", "ram.bin"] {
        std::fs::hard_link(source.join(f), copy.join(f)).unwrap();
    }
    let disk = copy.join("disk.qcow2");
    std::fs::copy(source.join("disk.qcow2"), &disk).unwrap();
    let root_image = PathBuf::from(backing_name(&disk));
    let image = data.join(root_image.strip_prefix(&from).unwrap());
    let d = disk.display().to_string();
    qemu_img(&["rebase", "-u", "-F", "raw", "-b", &image.display().to_string(), &d]);
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    give(&state);
    let good = host.path().join("good.qcow2");
    std::fs::copy(&disk, &good).unwrap();

    let (backing_fifo, data_fifo) = (host.path().join("backing.fifo"), host.path().join("data.fifo"));
    fifo(&backing_fifo);
    let with_data_file = host.path().join("with-data-file.qcow2");
    image_with_data_file(&image, &data_fifo, &with_data_file);
    let watch = watch_proven(&[backing_fifo.clone(), data_fifo.clone()]);

    let run = |args: &[&str]| as_user(&state, &data, args);
    let sandboxes = || -> Vec<PathBuf> {
        std::fs::read_dir(&state)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir() && !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .collect()
    };
    let fifo_name = backing_fifo.display().to_string();
    type Alter<'a> = (&'a str, Box<dyn Fn() + 'a>, String);
    let cases: Vec<Alter> = vec![
        (
            "its backing file renamed to a FIFO",
            Box::new(|| qemu_img(&["rebase", "-u", "-F", "raw", "-b", &fifo_name, &d])),
            format!("backed by `{fifo_name}`"),
        ),
        (
            "an external data file",
            Box::new(|| std::fs::copy(&with_data_file, &disk).map(drop).unwrap()),
            "external data file".into(),
        ),
        (
            "a FIFO in its disk's place",
            Box::new(|| {
                std::fs::remove_file(&disk).unwrap();
                fifo(&disk);
            }),
            "its disk.qcow2 is a link, FIFO or device".into(),
        ),
    ];
    for (what, alter, said) in &cases {
        let _ = std::fs::remove_file(&disk);
        std::fs::copy(&good, &disk).unwrap();
        give(&disk);
        alter();
        let out = run(&["create", "--from", snap, "--name", "evil", "--timeout", "240s"]);
        let err = text(&out.stderr);
        assert_eq!(watch.take(), Vec::<PathBuf>::new(), "{what}: a file its disk named was opened");
        assert!(!out.status.success(), "{what}: the fork was made: {}", text(&out.stdout));
        assert!(
            err.contains(&format!("snapshot `{snap}` was altered"))
                || err.contains(&format!("snapshot {} was altered", copy.display())),
            "{what}: {err}"
        );
        assert!(err.contains("atoll snapshot rm") && err.contains(said.as_str()), "{what}: {err}");
        assert_eq!(sandboxes(), Vec::<PathBuf>::new(), "{what}: a refused fork left a sandbox directory");
        assert_eq!(processes_mentioning(&state), Vec::<String>::new(), "{what}: a process was left");
    }

    // Unaltered, the user forks it; the fork's QEMU has the user's uid.
    std::fs::remove_file(&disk).unwrap();
    std::fs::copy(&good, &disk).unwrap();
    give(&disk);
    let out = run(&["--json", "create", "--from", snap, "--name", "good", "--timeout", "240s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&["-s", "good", "exec", "--", "cat", "/root/on-disk"]);
    assert_eq!((text(&out.stdout), out.status.success()), ("before\n".into(), true), "{}", text(&out.stderr));
    let out = run(&["--json", "inspect", "good"]);
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let qemu = info["qemu_pid"].as_u64().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{qemu}/status")).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap().split_whitespace().nth(1).unwrap();
    let me =
        if rustix::process::geteuid().is_root() { SHARE_OWNER } else { rustix::process::geteuid().as_raw() };
    assert_eq!(uid, me.to_string(), "the fork's QEMU runs as the user");
    assert_eq!(watch.take(), Vec::<PathBuf>::new());
    let out = run(&["kill", "good"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(processes_mentioning(&state), Vec::<String>::new());
}
