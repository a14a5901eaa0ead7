//! Attack: a hostile guest, root inside its VM, plays mode and owner games on host
//! folders shared into it (issue 30 item 4). Through the `atoll` binary and one real
//! `minimal` microVM with a `:rw` share and a share given without a mode (read-only by
//! default). The guest makes a setuid copy of busybox, chmods files and the share's
//! root 0777, makes a device node and a fifo, chowns files to root and to another
//! uid; the host must see none of it (no setuid/setgid bit, no world-writable mode, no
//! device node, its own uid), while the guest sees its own modes (so `ls -l`, git's
//! `core.filemode` and symlinks keep working in the guest). The default share refuses
//! writes.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use atoll_tests::vm::{Atoll, text};

/// `atoll -s NAME exec --sh SCRIPT`: (exit code, stdout, stderr).
fn sh(atoll: &Atoll, name: &str, script: &str) -> (i32, String, String) {
    let out = atoll.run(&["-s", name, "exec", "--timeout", "5m", "--sh", script]);
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// Every entry under `dir` (and `dir` itself): (path, mode, uid, file type).
fn walk(dir: &Path, out: &mut Vec<(String, u32, u32, std::fs::FileType)>) {
    let meta = std::fs::symlink_metadata(dir).unwrap();
    out.push((dir.display().to_string(), meta.mode(), meta.uid(), meta.file_type()));
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            walk(&entry.path(), out);
        } else {
            out.push((entry.path().display().to_string(), meta.mode(), meta.uid(), meta.file_type()));
        }
    }
}

#[test]
fn attack_guest_root_cannot_put_setuid_devices_owners_or_world_writable_modes_on_host_files() {
    let host = tempfile::tempdir().unwrap();
    let (share, ro) = (host.path().join("share"), host.path().join("ro"));
    for d in [&share, &ro] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(share.join("existing"), "host file\n").unwrap();
    let existing_mode = std::fs::metadata(share.join("existing")).unwrap().mode();
    std::fs::write(ro.join("kept"), "read-only\n").unwrap();
    let me = atoll_tests::vm::own_as_ordinary_user(&share);
    let share_mode = std::fs::metadata(&share).unwrap().mode();

    let atoll = Atoll::new();
    let (m_rw, m_ro) = (format!("{}:/work:rw", share.display()), format!("{}:/data", ro.display()));
    atoll.create_with("a", &["--net", "none", "--mount", &m_rw, "--mount", &m_ro]);
    let info = atoll.json(&["inspect", "a"]);
    assert_eq!(info["mounts"][1]["read_only"], true, "a share without :rw is read-only: {info}");

    // The attacks, each of which succeeds as far as the guest can tell.
    let attack = "set -e
        cp /bin/busybox /work/suid && chmod 4755 /work/suid
        cp /bin/busybox /work/sgid && chmod 2755 /work/sgid
        chmod 6777 /work/existing
        echo x > /work/open && chmod 0777 /work/open
        mkdir /work/dir && chmod 1777 /work/dir
        chmod 0777 /work
        mknod /work/mem c 1 1
        mknod /work/disk b 8 0
        mknod /work/pipe p
        chown 0:0 /work/open
        chown 1234:1234 /work/existing
        ln -s /etc/passwd /work/link
        stat -c '%a %u %F' /work/suid /work/mem /work
        stat -c %u /work/existing
        readlink /work/link";
    let (code, out, err) = sh(&atoll, "a", attack);
    assert_eq!(code, 0, "the guest's own view refused an attack step: {out}{err}");
    // The guest sees what it set (modes and owners live on in extended attributes).
    let lines: Vec<&str> = out.lines().collect();
    // (The share's root keeps showing its host owner: the guest chmodded it, never chowned it.)
    let root_line = format!("777 {me} directory");
    assert_eq!(
        lines,
        ["4755 0 regular file", "644 0 character special file", root_line.as_str(), "1234", "/etc/passwd"],
        "the guest's view of its own modes: {out}"
    );

    // The host sees plain files and folders, owned by the host user, without setuid,
    // setgid, sticky or world-writable bits, and no device node or fifo.
    let mut seen = Vec::new();
    walk(&share, &mut seen);
    assert!(seen.len() >= 10, "{seen:?}");
    for (path, mode, uid, kind) in &seen {
        assert_eq!(mode & 0o7000, 0, "{path} has mode {mode:o} on the host");
        assert_eq!(mode & 0o002, 0, "{path} is world-writable on the host ({mode:o})");
        assert!(
            !(kind.is_char_device() || kind.is_block_device() || kind.is_fifo() || kind.is_socket()),
            "{path} is a special file on the host: {kind:?}"
        );
        assert_eq!(*uid, me, "{path} is owned by uid {uid} on the host, not the host user {me}");
    }
    assert_eq!(std::fs::metadata(&share).unwrap().mode(), share_mode, "the share's root mode changed");
    let existing = std::fs::metadata(share.join("existing")).unwrap();
    assert_eq!(existing.mode(), existing_mode, "a host file's mode changed");
    assert_eq!(std::fs::read_to_string(share.join("existing")).unwrap(), "host file\n");
    let suid = std::fs::metadata(share.join("suid")).unwrap();
    assert_eq!(
        suid.mode() & 0o111,
        0,
        "guest-made files are never executable on the host ({:o})",
        suid.mode()
    );

    // The share given without `:rw` refuses writes, and the host folder is untouched.
    for write in ["echo x > /data/new", "chmod 4755 /data/kept", "mknod /data/mem c 1 1", "rm /data/kept"] {
        let (code, _, err) = sh(&atoll, "a", write);
        assert!(code != 0 && err.contains("Read-only file system"), "{write}: {err}");
    }
    let names: Vec<_> = std::fs::read_dir(&ro).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(names, ["kept"]);
    assert_eq!(std::fs::metadata(ro.join("kept")).unwrap().mode() & 0o7000, 0);
    atoll.json(&["kill", "a"]);
}
