//! Attack: a hostile guest, root inside its VM, plays mode and owner games on host
//! folders shared into it (issue 30 item 4). Through the `atoll` binary and one real
//! `minimal` microVM with a `:rw` share and a share given without a mode (read-only by
//! default). The guest makes a setuid copy of busybox, chmods files and the share's
//! root 0777, makes a device node and a fifo, chowns files to root and to another
//! uid; the host must see none of it (no setuid/setgid bit, no world-writable mode, no
//! device node, its own uid), while the guest sees its own modes (so `ls -l`, git's
//! `core.filemode` and symlinks keep working in the guest). The default share refuses
//! writes, also once root in the guest has remounted it read-write: QEMU refuses them.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use atoll_tests::vm::{Atoll, text};

/// `atoll -s NAME exec --sh SCRIPT`: (exit code, stdout, stderr).
fn sh(atoll: &Atoll, name: &str, script: &str) -> (i32, String, String) {
    let out = atoll.run(&["-s", name, "exec", "--timeout", "5m", "--sh", script]);
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// The host side of each share is a `nosuid,nodev,noexec` mount in QEMU's namespace:
/// from QEMU's mount namespace, as root even, the executable and the setuid program in
/// each share do not run.
fn qemu_side_cannot_run_share_files(atoll: &Atoll, shares: &[&Path]) {
    let id = atoll.json(&["inspect", "a"])["id"].as_str().unwrap().to_string();
    share_files_do_not_run_in_qemus_namespace(qemu_pid(&atoll.state_dir().join(&id)), shares);
}

/// QEMU's pid, from the record in the sandbox directory `dir`.
fn qemu_pid(dir: &Path) -> u64 {
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("sandbox.json")).unwrap()).unwrap();
    record["qemu"]["pid"].as_u64().expect("QEMU's pid is recorded")
}

/// Each share (and `.git` in it, if there is one) is `nosuid,nodev,noexec` in the mount
/// namespace of QEMU `qemu`, and a host executable and a setuid program put in it do
/// not run there (entered with `nsenter`: the mount namespace as root, or the user and
/// mount namespaces as the ordinary user who owns them); the same file runs on the host.
fn share_files_do_not_run_in_qemus_namespace(qemu: u64, shares: &[&Path]) {
    let mountinfo = std::fs::read_to_string(format!("/proc/{qemu}/mountinfo")).unwrap();
    let as_root = rustix::process::geteuid().is_root();
    // What QEMU's side must not run: a host executable and a setuid program in each
    // share (removed again below: a walk of the share afterwards expects none).
    for d in shares {
        std::fs::copy("/usr/bin/id", d.join("host-exe")).unwrap();
        std::fs::copy("/usr/bin/id", d.join("host-suid")).unwrap();
        std::fs::set_permissions(d.join("host-exe"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(d.join("host-suid"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    }
    for share in shares {
        let git = share.join(".git");
        for point in std::iter::once(share.to_path_buf()).chain(git.is_dir().then_some(git)) {
            let point = point.display().to_string();
            let options = mountinfo
                .lines()
                .rfind(|l| l.split(' ').nth(4) == Some(point.as_str()))
                .unwrap_or_else(|| panic!("{point} is not a mount point in QEMU's namespace:\n{mountinfo}"))
                .split(' ')
                .nth(5)
                .unwrap()
                .to_string();
            let has = |o: &str| options.split(',').any(|x| x == o);
            assert!(has("nosuid") && has("nodev") && has("noexec"), "{point} in QEMU's namespace: {options}");
        }
        for file in ["host-exe", "host-suid"] {
            let exe = share.join(file);
            let mut cmd = std::process::Command::new("nsenter");
            cmd.args(["--target", &qemu.to_string(), "--mount"]);
            if !as_root {
                cmd.args(["--user", "--preserve-credentials"]);
            }
            let out = cmd.arg("--").arg(&exe).output().unwrap();
            assert!(
                !out.status.success(),
                "{} ran in QEMU's namespace: {}",
                exe.display(),
                text(&out.stdout)
            );
            assert!(
                text(&out.stderr).contains("Permission denied"),
                "{}: {}",
                exe.display(),
                text(&out.stderr)
            );
        }
    }
    // The test can fail: the same files run from the host's own namespace.
    assert!(std::process::Command::new(shares[0].join("host-exe")).output().unwrap().status.success());
    for d in shares {
        std::fs::remove_file(d.join("host-exe")).unwrap();
        std::fs::remove_file(d.join("host-suid")).unwrap();
    }
}

/// A link to `/` swapped in for a shared folder, again and again while sandboxes are
/// created, by a background thread (as another guest that can write the share's parent
/// would): each create either fails saying what is wrong with the folder, or its guest
/// sees the folder; never the host's root. The share is opened once, without following
/// links, and QEMU's namespace binds that open directory.
#[test]
fn attack_a_link_to_root_swapped_in_for_a_share_never_shows_the_guest_the_host_root() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let host = tempfile::tempdir().unwrap();
    let (share, parked) = (host.path().join("share"), host.path().join("parked"));
    std::fs::create_dir(&share).unwrap();
    std::fs::write(share.join("MARKER"), "the real share\n").unwrap();
    atoll_tests::vm::own_as_ordinary_user(&share);
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (share, parked, stop, swaps) = (share.clone(), parked.clone(), stop.clone(), swaps.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::fs::rename(&share, &parked).unwrap();
                std::os::unix::fs::symlink("/", &share).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(3));
                std::fs::remove_file(&share).unwrap();
                std::fs::rename(&parked, &share).unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(3));
            }
        })
    };
    let atoll = Atoll::new();
    let mount = format!("{}:/work:rw", share.display());
    let (mut refused, mut served) = (Vec::new(), 0);
    // At least 30 creates, and on until the swapper has swapped 100 times (on a loaded
    // machine every create can be refused faster than it swaps), unless one is served.
    for i in 0..300 {
        if i >= 30 && swaps.load(Ordering::Relaxed) > 100 {
            break;
        }
        let name = format!("r{i}");
        let out =
            atoll.run(&["create", "--name", &name, "--timeout", "300s", "--net", "none", "--mount", &mount]);
        if !out.status.success() {
            let err = text(&out.stderr);
            let clear = [
                "symbolic link",
                "could not be opened",
                "does not exist",
                "owned by root",
                "directory",
                "cannot be read",
                "not canonical",
            ];
            assert!(clear.iter().any(|c| err.contains(c)), "a refusal that does not say why: {err}");
            refused.push(err);
            continue;
        }
        let (code, seen, err) =
            sh(&atoll, &name, "ls /work; test -e /work/etc/passwd && echo HOST-ROOT; true");
        assert_eq!(code, 0, "{err}");
        assert!(!seen.contains("HOST-ROOT") && seen.contains("MARKER"), "the guest saw: {seen}");
        atoll.json(&["kill", &name]);
        served += 1;
        break;
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(swaps.load(Ordering::Relaxed) > 100, "the swapper hardly ran");
    eprintln!("served during the swaps {served}, refused {}: {refused:?}", refused.len());
    if served == 0 {
        // On a loaded machine every create may meet a swap (the share's path is opened
        // more than once): the share itself must still be served once the swaps stop,
        // so a create that refuses every share cannot pass.
        let out =
            atoll.run(&["create", "--name", "calm", "--timeout", "300s", "--net", "none", "--mount", &mount]);
        assert!(out.status.success(), "the share is refused with no swap going on: {}", text(&out.stderr));
        let out = atoll.run(&["-s", "calm", "exec", "--sh", "ls /work"]);
        assert!(text(&out.stdout).contains("MARKER"), "{}", text(&out.stdout));
        assert!(atoll.run(&["kill", "calm"]).status.success());
    }
}

/// Runs `atoll ARGS` of `atoll` in a mount namespace of its own (as root) where `from`
/// is bind-mounted on `on` first: another name for the same folder.
fn atoll_with_bind(atoll: &Atoll, from: &Path, on: &Path, args: &[&str]) -> std::process::Output {
    let plain = atoll.command(args);
    let mut cmd = std::process::Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        r#"mount --bind "$1" "$2" && shift 2 && exec "$@""#,
        "sh",
    ])
    .arg(from)
    .arg(on)
    .arg(plain.get_program())
    .args(plain.get_args())
    .env_remove("ATOLL_AGENT")
    .env_remove("ATOLL_SANDBOX")
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    for (k, v) in plain.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    atoll_tests::vm::wait_bounded(cmd.spawn().unwrap(), atoll_tests::vm::HANG_GUARD).expect("atoll hung")
}

/// A guest, root in sandbox `a`, puts a link to `/` (and one to `/etc`) where its host
/// user will name a folder for another sandbox: inside its read-write share, at `out`
/// and `conf`. (Its own `ln -s` lands on the host as a plain file, 9p `mapped-xattr`
/// keeps guest links in the file; so it moves links the host made into place: a hard
/// link to a `vendor/sysroot -> /` link of the project's, and `vendor/etc -> /etc`
/// renamed.) `atoll create --mount <share>/conf:/x:ro`, which would show the second
/// guest the host's `/etc`, is refused before anything starts, saying which
/// link, which share and which sandbox; so is a path below the link, the same share
/// reached through a bind mount (as root), and a link in the state directory. A link the
/// host made outside any share is followed as before: sandbox `a`'s own share is named
/// through one, and so is sandbox `b`'s, given while `a` runs.
#[test]
fn attack_a_link_to_root_a_guest_plants_in_its_share_is_not_followed_by_a_mount() {
    use std::os::unix::fs::symlink;
    let host = tempfile::tempdir().unwrap();
    let top = std::fs::canonicalize(host.path()).unwrap();
    let (share, data) = (top.join("share"), top.join("data"));
    std::fs::create_dir_all(share.join("vendor")).unwrap();
    std::fs::create_dir(share.join("out")).unwrap();
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("MARKER"), "the data folder\n").unwrap();
    symlink("/", share.join("vendor/sysroot")).unwrap();
    symlink("/etc", share.join("vendor/etc")).unwrap();
    // The user's own links, outside any share.
    symlink(&share, top.join("proj")).unwrap();
    symlink("data", top.join("data-link")).unwrap();
    atoll_tests::vm::own_as_ordinary_user(&share);

    let atoll = Atoll::new();
    let m_a = format!("{}:/work:rw", top.join("proj").display());
    atoll.create_with("a", &["--net", "none", "--mount", &m_a]);
    let info = atoll.json(&["inspect", "a"]);
    assert_eq!(info["mounts"][0]["host"], share.display().to_string(), "a host link is followed: {info}");

    let plant = "ln -s / /work/guest-link && rmdir /work/out && ln /work/vendor/sysroot /work/out \
        && mv /work/vendor/etc /work/conf";
    let (code, out, err) = sh(&atoll, "a", plant);
    assert_eq!(code, 0, "the guest's plant: {out}{err}");
    assert!(
        std::fs::symlink_metadata(share.join("guest-link")).unwrap().is_file(),
        "a guest symlink is a file"
    );
    assert_eq!(
        std::fs::read_link(share.join("out")).unwrap(),
        Path::new("/"),
        "the plant is a host link to /"
    );

    let before = atoll.sandbox_dirs();
    let refused = |asked: &Path, err: &str, link: &Path, target: &str| {
        let want = format!(
            "`{}` goes through a link (`{}` -> `{target}`) inside `{}`, which sandbox `a` shares read-write: its guest could have put it there; give the folder's real path (`realpath`), from a folder no sandbox can write",
            asked.display(),
            link.display(),
            share.display()
        );
        assert!(err.contains(&want), "refusal of {}: {err}", asked.display());
    };
    for (asked, link, target) in [
        (share.join("conf"), "conf", "/etc"),
        (share.join("out"), "out", "/"),
        (share.join("out/etc"), "out", "/"),
        (top.join("proj/out"), "out", "/"),
    ] {
        let m = format!("{}:/x:ro", asked.display());
        let err = atoll.fails(&["create", "--name", "b", "--net", "none", "--mount", &m]);
        refused(&asked, &err, &share.join(link), target);
    }
    if rustix::process::geteuid().is_root() {
        // The share under another name (a bind mount): known by its device and inode.
        let alias = top.join("alias");
        std::fs::create_dir(&alias).unwrap();
        let m = format!("{}:/x:ro", alias.join("out").display());
        let out = atoll_with_bind(
            &atoll,
            &share,
            &alias,
            &["create", "--name", "b", "--net", "none", "--mount", &m],
        );
        assert!(!out.status.success(), "created through the alias");
        refused(&alias.join("out"), &text(&out.stderr), &alias.join("out"), "/");
    }
    // A link in the state directory, where sandboxes' processes write.
    let in_state = atoll.state_dir().join("planted");
    symlink(&data, &in_state).unwrap();
    let m = format!("{}:/x:ro", in_state.display());
    let err = atoll.fails(&["create", "--name", "b", "--net", "none", "--mount", &m]);
    let state = std::fs::canonicalize(atoll.state_dir()).unwrap();
    assert!(
        err.contains(&format!("inside `{}`, which is the atoll state directory", state.display())),
        "{err}"
    );
    std::fs::remove_file(&in_state).unwrap();
    assert_eq!(atoll.sandbox_dirs(), before, "a refused create left a sandbox directory");
    assert_eq!(atoll.states(), [("a".to_string(), "running".to_string())]);

    // The user's own link outside every share still shares its target.
    let m_b = format!("{}:/x:ro", top.join("data-link").display());
    atoll.create_with("b", &["--net", "none", "--mount", &m_b]);
    let (code, seen, err) = sh(&atoll, "b", "cat /x/MARKER; test -e /x/etc/passwd && echo HOST-ROOT; true");
    assert_eq!((code, seen.as_str()), (0, "the data folder\n"), "{err}");
    atoll.json(&["kill", "a", "b"]);
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
    // The read-write folder shared a second time, read-only, and listed first: QEMU's
    // namespace binds it read-write (for `/work`, which stays writable), so only QEMU's
    // `readonly=on` stands between this share and the host folder.
    let m_same = format!("{}:/same", share.display());
    atoll.create_with("a", &["--net", "none", "--mount", &m_same, "--mount", &m_rw, "--mount", &m_ro]);
    let info = atoll.json(&["inspect", "a"]);
    assert_eq!(info["mounts"][0]["read_only"], true, "a share without :rw is read-only: {info}");
    assert_eq!(info["mounts"][2]["read_only"], true, "a share without :rw is read-only: {info}");
    qemu_side_cannot_run_share_files(&atoll, &[&share, &ro]);

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

    // Root in the guest makes the read-only shares writable on its side: it remounts each
    // read-write, and tries mounting its 9p tag again, read-write, elsewhere (the guest
    // kernel refuses that one: "busy", the tag's channel is in use). Each write then
    // reaches QEMU, which must refuse it.
    let (ro_before, share_before) = (host_view(&ro), host_view(&share));
    let remount = format!(
        "mount -o remount,rw /data; mount -o remount,rw /same
        mkdir -p /mnt/data /mnt/same
        mount -t 9p -o {NINEP} atoll2 /mnt/data; mount -t 9p -o {NINEP} atoll0 /mnt/same
        awk '$3 == \"9p\" {{ split($4, o, \",\"); print $2, o[1] }}' /proc/mounts"
    );
    let (_, mounts, err) = sh(&atoll, "a", &remount);
    let writable: Vec<&str> = mounts
        .lines()
        .filter_map(|l| l.strip_suffix(" rw"))
        .filter(|p| ["/data", "/mnt/data", "/same", "/mnt/same"].contains(p))
        .collect();
    for paths in [["/data", "/mnt/data"], ["/same", "/mnt/same"]] {
        assert!(
            paths.iter().any(|p| writable.contains(p)),
            "the guest could not mount {} read-write, so QEMU was never asked: {mounts}{err}",
            paths[0]
        );
    }
    // Each write fails with EROFS, which the guest's read-write mount does not give: QEMU
    // refused it.
    let mut not_refused = Vec::new();
    for dir in &writable {
        let file = if dir.ends_with("data") { "kept" } else { "existing" };
        for write in [
            format!("echo x > {dir}/ro-new"),
            format!("echo x >> {dir}/{file}"),
            format!("echo x > {dir}/{file}"),
            format!("rm {dir}/{file}"),
            format!("mv {dir}/{file} {dir}/ro-moved"),
            format!("ln {dir}/{file} {dir}/ro-hard"),
            format!("mkdir {dir}/ro-made"),
            format!("mknod {dir}/ro-mem c 1 1"),
            format!("chmod 4777 {dir}/{file}"),
            format!("chown 1234:1234 {dir}/{file}"),
            format!("touch {dir}/{file}"),
        ] {
            let (code, out, err) = sh(&atoll, "a", &write);
            if code == 0 || !err.contains("Read-only file system") {
                not_refused.push(format!("{write}: exit {code}: {out}{err}"));
            }
        }
    }
    assert!(
        not_refused.is_empty(),
        "writes through a read-only share the guest made writable were not refused by QEMU: {not_refused:#?}"
    );
    assert_eq!(host_view(&ro), ro_before, "the read-only folder changed on the host");
    assert_eq!(host_view(&share), share_before, "the folder shared read-only at /same changed on the host");
    atoll.json(&["kill", "a"]);
}

/// The guest agent's 9p mount options (guest-agent/src/storage.rs).
const NINEP: &str = "trans=virtio,version=9p2000.L,msize=262144,cache=mmap";

/// What the host sees of `dir` and everything under it, sorted: each entry's path, type,
/// mode, owner, modification time, contents (a digest) and extended attributes (where
/// 9p's `mapped-xattr` keeps the modes and owners a guest sets).
fn host_view(dir: &Path) -> Vec<String> {
    use sha2::Digest;
    let mut entries = Vec::new();
    walk(dir, &mut entries);
    let mut view: Vec<String> = entries
        .iter()
        .map(|(path, mode, uid, kind)| {
            let meta = std::fs::symlink_metadata(path).unwrap();
            let digest = if kind.is_file() {
                format!("{:x}", sha2::Sha256::digest(std::fs::read(path).unwrap()))
            } else {
                String::new()
            };
            let (mtime, ns) = (meta.mtime(), meta.mtime_nsec());
            format!("{path} {kind:?} {mode:o} {uid} {mtime}.{ns} {digest} {:?}", xattrs(Path::new(path)))
        })
        .collect();
    view.sort();
    view
}

/// `path`'s extended attributes (names and values), not following a link.
fn xattrs(path: &Path) -> Vec<(String, Vec<u8>)> {
    let mut names = vec![0u8; 64 * 1024];
    let len = rustix::fs::llistxattr(path, &mut names[..]).unwrap();
    names[..len]
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(|name| {
            let name = String::from_utf8_lossy(name).into_owned();
            let mut value = vec![0u8; 64 * 1024];
            let n = rustix::fs::lgetxattr(path, name.as_str(), &mut value[..]).unwrap();
            value.truncate(n);
            (name, value)
        })
        .collect()
}

/// `atoll` as an ordinary user: when the tests run as root, as uid
/// [`atoll_tests::vm::SHARE_OWNER`] (no groups, `setpriv`), with state directory
/// `state` and data directory `data`.
fn atoll_as_ordinary_user(state: &Path, data: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = if rustix::process::geteuid().is_root() {
        let id = atoll_tests::vm::SHARE_OWNER.to_string();
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid", &id, "--regid", &id, "--clear-groups", "--"]);
        c.arg(atoll_tests::workspace_bin("atoll"));
        c
    } else {
        std::process::Command::new(atoll_tests::workspace_bin("atoll"))
    };
    cmd.env_remove("ATOLL_AGENT")
        .env_remove("ATOLL_SANDBOX")
        .env("ATOLL_STATE_DIR", state)
        .env("ATOLL_DATA_DIR", data)
        .env("ATOLL_TEMPLATE_SNAPSHOT", "off")
        .env("HOME", state)
        .args(args)
        .stdin(std::process::Stdio::null());
    let child =
        cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    atoll_tests::vm::wait_bounded(child, atoll_tests::vm::HANG_GUARD).expect("atoll hung and was killed")
}

/// The ordinary user's data directory at `data`: the kernel and the `minimal` template
/// (root's own is under /root, which others cannot enter), linked or copied.
fn ordinary_user_data_dir(data: &Path) {
    let from = atoll_tests::data_dir();
    std::fs::create_dir_all(data.join("templates")).unwrap();
    for (src, dst) in [("kernel", "kernel"), ("bin", "bin"), ("templates/minimal", "templates/minimal")] {
        if !from.join(src).exists() {
            continue;
        }
        let copy = |how: &str| {
            std::process::Command::new("cp")
                .arg(how)
                .arg(from.join(src))
                .arg(data.join(dst))
                .status()
                .unwrap()
        };
        if !copy("-al").success() {
            let _ = std::fs::remove_dir_all(data.join(dst));
            assert!(copy("-a").success(), "copying {} failed", from.join(src).display());
        }
    }
}

/// An ordinary user (not root) running atoll cannot copy a mount of the host's, yet its
/// shares are `nosuid,nodev,noexec` in QEMU's namespace too (a user namespace of the
/// jail's own, where the mount copy is allowed), `.git` inside the read-write share
/// included: a host executable and a setuid program put in either share do not run from
/// QEMU's side, while the guest still reads and writes the shares.
#[test]
fn attack_shares_of_an_ordinary_user_are_noexec_on_qemus_side() {
    use std::os::unix::fs::chown;
    let host = atoll_tests::vm::short_tempdir();
    let (share, ro, state, data) = (
        host.path().join("share"),
        host.path().join("ro"),
        host.path().join("state"),
        host.path().join("data"),
    );
    std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for d in [&share, &ro, &state] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::create_dir_all(share.join(".git/hooks")).unwrap();
    std::fs::write(share.join("MARKER"), "the real share\n").unwrap();
    std::fs::write(ro.join("kept"), "read-only\n").unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    ordinary_user_data_dir(&data);
    let me = if rustix::process::geteuid().is_root() {
        let id = atoll_tests::vm::SHARE_OWNER;
        for d in [&share, &share.join(".git"), &share.join(".git/hooks"), &share.join("MARKER"), &ro, &state]
        {
            chown(d, Some(id), Some(id)).unwrap();
        }
        id
    } else {
        rustix::process::geteuid().as_raw()
    };
    let run = |args: &[&str]| atoll_as_ordinary_user(&state, &data, args);
    let (m_rw, m_ro) = (format!("{}:/work:rw", share.display()), format!("{}:/data", ro.display()));
    let out = run(&["create", "--name", "u", "--net", "none", "--mount", &m_rw, "--mount", &m_ro]);
    assert!(out.status.success(), "create as uid {me}: {}", text(&out.stderr));
    let dirs: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("sandbox.json").is_file())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let qemu = qemu_pid(&dirs[0]);
    let status = std::fs::read_to_string(format!("/proc/{qemu}/status")).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap().split_whitespace().nth(1).unwrap();
    assert_eq!(uid, me.to_string(), "QEMU runs as the ordinary user: {status}");
    share_files_do_not_run_in_qemus_namespace(qemu, &[&share, &ro]);

    // The shares still work: the guest reads both and writes the read-write one.
    let out = run(&[
        "-s",
        "u",
        "exec",
        "--sh",
        "cat /work/MARKER /data/kept && echo from-guest > /work/written && ls /work/.git",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "the real share\nread-only\nhooks\n");
    assert_eq!(std::fs::read_to_string(share.join("written")).unwrap(), "from-guest\n");
    ordinary_users_helper_reaches_neither_qemu_nor_atolls_record(&dirs[0], me);
    let out = run(&["pause", "u"]);
    assert!(out.status.success(), "atoll no longer drives QEMU: {}", text(&out.stderr));
    let out = run(&["resume", "u"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&["kill", "u"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    ordinary_users_helper_cannot_keep_a_parked_sandbox_down(&run, &state, me);
}

/// The ordinary user's helper, QEMU's uid, may put anything in place of QEMU's agent port
/// in `vm/wire/`: a directory (which QEMU, which only unlinks what is there, cannot
/// remove) holding a link to a directory of the user's. A sandbox parked after that
/// still comes back, and the link is not followed: what it names is kept (sandboxes
/// with shares cannot be parked: this one has none).
fn ordinary_users_helper_cannot_keep_a_parked_sandbox_down(
    run: &dyn Fn(&[&str]) -> std::process::Output,
    state: &Path,
    me: u32,
) {
    if !rustix::process::geteuid().is_root() {
        eprintln!("not root: the ordinary user's helper is not attacked from its seat");
        return;
    }
    let out = run(&["create", "--name", "p", "--net", "none"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dir = state.join(text(&out.stdout).trim());
    let record = |what: &str| {
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("sandbox.json")).unwrap()).unwrap();
        r[what]["pid"].as_u64()
    };
    let helper = record("net_helper").expect("the helper's pid is recorded");
    let canary = state.join("canary");
    std::fs::create_dir_all(&canary).unwrap();
    std::fs::write(canary.join("kept"), "kept\n").unwrap();
    for c in [&canary, &canary.join("kept")] {
        // The user's, so that atoll (the user) could remove it if it followed the link.
        std::os::unix::fs::chown(c, Some(me), Some(me)).unwrap();
    }
    let w = dir.join("vm/wire");
    let script = format!(
        "cd {w} && rm agent.port && mkdir agent.port && ln -s {c} agent.port/canary && echo PLANTED",
        w = w.display(),
        c = canary.display()
    );
    let id = me.to_string();
    let out = std::process::Command::new("nsenter")
        .args(["-t", &helper.to_string(), "-m", "--", "setpriv", "--reuid", &id, "--regid", &id])
        .args(["--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--", "/bin/sh", "-c", &script])
        .output()
        .expect("nsenter");
    assert!(text(&out.stdout).contains("PLANTED"), "{}{}", text(&out.stdout), text(&out.stderr));
    let out = run(&["pause", "--to-disk", "p"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&["resume", "p"]);
    assert!(out.status.success(), "a helper's plant kept the parked sandbox down: {}", text(&out.stderr));
    let out = run(&["-s", "p", "exec", "--", "echo", "back"]);
    assert_eq!(text(&out.stdout), "back\n", "{}", text(&out.stderr));
    let port = std::fs::symlink_metadata(w.join("agent.port")).unwrap();
    assert!(port.file_type().is_socket(), "QEMU's agent port is not back: {port:?}");
    assert!(record("qemu").is_some());
    assert_eq!(std::fs::read_to_string(canary.join("kept")).unwrap(), "kept\n", "the link was followed");
    let out = run(&["kill", "p"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// The network helper of an ordinary user's atoll has the user's own uid, as QEMU does
/// (checked), so only its view keeps it from QEMU's control socket and atoll's record.
/// From its seat (its user and mount namespaces, its uid, no capabilities), neither
/// `vm/qmp.sock` (which would let it drive QEMU, or answer atoll in QEMU's place) nor
/// `sandbox.json`, the disk overlay or atoll's policy record is in sight, and what it
/// writes where they would be leaves the host's files as they were; what it uses is
/// there (its agent link, QEMU's agent port): the check can fail.
fn ordinary_users_helper_reaches_neither_qemu_nor_atolls_record(dir: &Path, me: u32) {
    if !rustix::process::geteuid().is_root() {
        // Entering the helper's mount namespace takes root (the suite runs as root).
        eprintln!("not root: the ordinary user's helper is not attacked from its seat");
        return;
    }
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("sandbox.json")).unwrap()).unwrap();
    let helper = record["net_helper"]["pid"].as_u64().expect("the helper's pid is recorded");
    let uid = |pid: u64| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status.lines().find(|l| l.starts_with("Uid:")).unwrap().split_whitespace().nth(1).unwrap().to_string()
    };
    assert_eq!(uid(helper), me.to_string(), "the helper runs as the ordinary user");
    assert_eq!(uid(qemu_pid(dir)), me.to_string(), "QEMU runs as the ordinary user");
    assert!(dir.join("vm/qmp.sock").exists(), "QEMU's control socket is on the host");
    let record_before = std::fs::read(dir.join("sandbox.json")).unwrap();
    let d = dir.display();
    let script = format!(
        r#"for f in sandbox.json net-policy.json vm/qmp.sock vm/rootfs.qcow2; do
             test -e "{d}/$f" && echo "SEES: $f"
           done
           python3 -c 'import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("{d}/vm/qmp.sock"); print("CONNECTED")
except OSError as e:
    print("REFUSED", e)'
           echo planted > {d}/sandbox.json 2>/dev/null
           echo "IN-DIR: $(ls -A {d} | tr '\n' ' ')"
           echo "IN-VM: $(ls -A {d}/vm | tr '\n' ' ')"
           test -S {d}/net/agent.sock && echo OWN-LINK
           test -S {d}/vm/wire/agent.port && echo WIRE"#
    );
    // Its mount namespace (entered as root: bwrap nests the helper's user namespace in
    // the one owning it), then its uid and gid, no groups, no capabilities.
    let mut cmd = std::process::Command::new("nsenter");
    cmd.args(["-t", &helper.to_string(), "-m", "--", "setpriv"]);
    let id = me.to_string();
    cmd.args([
        "--reuid",
        &id,
        "--regid",
        &id,
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ]);
    let out = cmd.args(["/bin/sh", "-c", &script]).output().expect("nsenter");
    let (out, err) = (text(&out.stdout), text(&out.stderr));
    assert!(out.contains("OWN-LINK") && out.contains("WIRE"), "not the helper's view: {out}{err}");
    assert!(!out.contains("SEES:"), "the helper sees what is not its own: {out}{err}");
    assert!(
        out.contains("REFUSED") && out.contains("No such file"),
        "QEMU's control socket is reachable: {out}{err}"
    );
    let line = |tag: &str| out.lines().find(|l| l.starts_with(tag)).unwrap_or_default().to_string();
    for shown in line("IN-DIR:").split_whitespace().skip(1) {
        assert!(["net", "vm", "qemu.log", "sandbox.json"].contains(&shown), "{shown} is in its view: {out}");
    }
    let in_vm = line("IN-VM:");
    let mut vm: Vec<&str> = in_vm.split_whitespace().skip(1).collect();
    vm.sort_unstable();
    assert_eq!(vm, ["console.log", "wire"], "{out}");
    assert_eq!(std::fs::read(dir.join("sandbox.json")).unwrap(), record_before, "sandbox.json changed");
}

/// The swap race of
/// [`attack_a_link_to_root_swapped_in_for_a_share_never_shows_the_guest_the_host_root`]
/// against an ordinary user's atoll, whose jail opens each share's path a second time
/// (in its own user namespace, to mount the `noexec` copy): each create either fails
/// saying what is wrong with the folder, or its guest sees the real folder; never the
/// host's root. If no create got past the swaps (a loaded machine), one made after them
/// must serve the folder.
#[test]
fn attack_a_link_to_root_swapped_in_for_an_ordinary_users_share_never_shows_the_host_root() {
    use std::os::unix::fs::chown;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let host = atoll_tests::vm::short_tempdir();
    std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (share, parked, state, data) = (
        host.path().join("share"),
        host.path().join("parked"),
        host.path().join("state"),
        host.path().join("data"),
    );
    std::fs::create_dir(&share).unwrap();
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(share.join("MARKER"), "the real share\n").unwrap();
    ordinary_user_data_dir(&data);
    if rustix::process::geteuid().is_root() {
        let id = atoll_tests::vm::SHARE_OWNER;
        for d in [&share, &share.join("MARKER"), &state] {
            chown(d, Some(id), Some(id)).unwrap();
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (share, parked, stop, swaps) = (share.clone(), parked.clone(), stop.clone(), swaps.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::fs::rename(&share, &parked).unwrap();
                std::os::unix::fs::symlink("/", &share).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(3));
                std::fs::remove_file(&share).unwrap();
                std::fs::rename(&parked, &share).unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(3));
            }
        })
    };
    let run = |args: &[&str]| atoll_as_ordinary_user(&state, &data, args);
    let mount = format!("{}:/work:rw", share.display());
    let (mut refused, mut served) = (Vec::new(), 0);
    // At least 30 creates, and on until the swapper has swapped 100 times (on a loaded
    // machine every create can be refused faster than it swaps), unless one is served.
    for i in 0..300 {
        if i >= 30 && swaps.load(Ordering::Relaxed) > 100 {
            break;
        }
        let name = format!("r{i}");
        let out = run(&["create", "--name", &name, "--timeout", "300s", "--net", "none", "--mount", &mount]);
        if !out.status.success() {
            let err = text(&out.stderr);
            let clear = [
                "symbolic link",
                "could not be opened",
                "does not exist",
                "was replaced",
                "directory",
                "cannot be read",
                "not canonical",
            ];
            assert!(clear.iter().any(|c| err.contains(c)), "a refusal that does not say why: {err}");
            refused.push(err);
            continue;
        }
        let out =
            run(&["-s", &name, "exec", "--sh", "ls /work; test -e /work/etc/passwd && echo HOST-ROOT; true"]);
        let seen = text(&out.stdout);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(!seen.contains("HOST-ROOT") && seen.contains("MARKER"), "the guest saw: {seen}");
        let out = run(&["kill", &name]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        served += 1;
        break;
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(swaps.load(Ordering::Relaxed) > 100, "the swapper hardly ran");
    eprintln!("served during the swaps {served}, refused {}: {refused:?}", refused.len());
    if served == 0 {
        // On a loaded machine every create may meet a swap (the share's path is opened
        // more than once): the share itself must still be served once the swaps stop,
        // so a create that refuses every share cannot pass.
        let out = run(&["create", "--name", "calm", "--timeout", "300s", "--net", "none", "--mount", &mount]);
        assert!(out.status.success(), "the share is refused with no swap going on: {}", text(&out.stderr));
        let out = run(&["-s", "calm", "exec", "--sh", "ls /work"]);
        assert!(text(&out.stdout).contains("MARKER"), "{}", text(&out.stdout));
        assert!(run(&["kill", "calm"]).status.success());
    }
}
