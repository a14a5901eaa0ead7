//! Host folders (`atoll create --mount HOST:GUEST[:ro]`, virtio-9p) and the disk size
//! (`--disk`), through the `atoll` binary and real microVMs: changes seen both ways,
//! files made in the guest owned by the host user, a share without `:rw` read-only
//! (refused in the guest), no way
//! out of the share through a symlink, a 10,000-file tree walked, the disk size in the
//! guest's `df`, a full disk giving the "no space" error and the sandbox still working,
//! snapshots refused, nothing left running after `atoll kill`; and bad input refused
//! before anything starts. One `minimal` VM carries most assertions.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use atoll_tests::processes_mentioning;
use atoll_tests::vm::{Atoll, text};

/// `atoll -s NAME exec --sh SCRIPT`: (exit code, stdout, stderr).
fn sh(atoll: &Atoll, name: &str, script: &str) -> (i32, String, String) {
    let out = atoll.run(&["-s", name, "exec", "--timeout", "5m", "--sh", script]);
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

fn make_tree(root: &Path, dirs: usize, files: usize) {
    for d in 0..dirs {
        let dir = root.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..files {
            std::fs::write(dir.join(format!("f{f:03}")), b"0123456789").unwrap();
        }
    }
}

#[test]
fn vm_mounted_folders_share_both_ways_stay_read_only_and_cannot_be_left() {
    let host = tempfile::tempdir().unwrap();
    let (share, ro, secret) = (host.path().join("share"), host.path().join("ro"), host.path().join("secret"));
    for d in [&share, &ro, &secret] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(secret.join("marker"), "host secret\n").unwrap();
    std::fs::write(ro.join("kept"), "read-only\n").unwrap();
    std::os::unix::fs::symlink(&secret, share.join("escape")).unwrap();
    std::os::unix::fs::symlink("/etc", share.join("etc")).unwrap();
    make_tree(&share.join("tree"), 100, 100);
    let owner = atoll_tests::vm::own_as_ordinary_user(&share);

    let atoll = Atoll::new();
    let (m_rw, m_ro) = (format!("{}:/work:rw", share.display()), format!("{}:/data", ro.display()));
    let created =
        atoll.create_with("m", &["--net", "none", "--mount", &m_rw, "--mount", &m_ro, "--disk", "256M"]);
    assert_eq!(created["disk_bytes"], 256 << 20);
    let info = atoll.json(&["inspect", "m"]);
    let mounts = info["mounts"].as_array().expect("inspect lists mounts");
    assert_eq!(mounts.len(), 2, "{info}");
    assert_eq!(mounts[1]["guest"], "/data");
    assert_eq!(mounts[1]["read_only"], true);

    // Host writes show in the guest, also after a change (nothing is cached).
    std::fs::write(share.join("from-host"), "one\n").unwrap();
    assert_eq!(sh(&atoll, "m", "cat /work/from-host"), (0, "one\n".into(), String::new()));
    std::fs::write(share.join("from-host"), "two\n").unwrap();
    assert_eq!(sh(&atoll, "m", "cat /work/from-host").1, "two\n");

    // Guest writes show on the host, owned by the user running atoll (this test's user).
    let (code, _, err) = sh(&atoll, "m", "echo guest > /work/from-guest && mkdir /work/gdir");
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(share.join("from-guest")).unwrap(), "guest\n");
    for made in ["from-guest", "gdir"] {
        let uid = std::fs::metadata(share.join(made)).unwrap().uid();
        assert_eq!(uid, owner, "{made} is not the share owner's");
    }

    // `:ro` is refused in the guest, and the host folder is untouched.
    let (code, _, err) = sh(&atoll, "m", "echo x > /data/new");
    assert_ne!(code, 0);
    assert!(err.contains("Read-only file system"), "{err}");
    let (code, _, err) = sh(&atoll, "m", "rm /data/kept");
    assert!(code != 0 && err.contains("Read-only file system"), "{err}");
    assert_eq!(std::fs::read_dir(&ro).unwrap().count(), 1);

    // Symlinks resolve inside the guest: neither the host's secret folder nor its /etc.
    let (code, out, _) = sh(&atoll, "m", "cat /work/escape/marker; ls /work/escape/ /work/etc/");
    assert_ne!(code, 0);
    assert!(!out.contains("host secret") && !out.contains("marker"), "escaped the share: {out}");
    let host_etc: Vec<String> = std::fs::read_dir("/etc")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into())
        .collect();
    let guest_etc: Vec<&str> = out.lines().collect();
    assert!(
        host_etc.iter().filter(|e| guest_etc.contains(&e.as_str())).count() < host_etc.len(),
        "the guest listed the host's /etc through the share: {out}"
    );
    // Nor does a link the guest makes, or `..` past the share's top.
    let script =
        format!("ln -s / /work/up && cat /work/up{0}/marker /work/../..{0}/marker", secret.display());
    let (code, out, _) = sh(&atoll, "m", &script);
    assert!(code != 0 && !out.contains("host secret"), "escaped the share: {out}");

    // A 10,000-file tree on the share can be walked.
    let (code, out, err) = sh(&atoll, "m", "find /work/tree -type f | wc -l");
    assert_eq!((code, out.trim()), (0, "10000"), "{err}");

    // The disk: df shows its size; filling it gives the "no space" error, and the
    // sandbox keeps working once space is freed.
    let (_, out, _) = sh(&atoll, "m", "df -k / | tail -n 1");
    assert_eq!(out.split_whitespace().nth(1), Some("262144"), "df: {out}");
    let (code, _, err) = sh(&atoll, "m", "dd if=/dev/zero of=/root/fill bs=1M count=400");
    assert!(code != 0 && err.contains("No space left on device"), "{err}");
    let write =
        atoll.command(&["-s", "m", "write", "/root/more"]).stdin(std::process::Stdio::piped()).spawn();
    let mut write = write.unwrap();
    std::io::Write::write_all(write.stdin.as_mut().unwrap(), b"more").unwrap();
    drop(write.stdin.take());
    let out = write.wait_with_output().unwrap();
    assert!(
        !out.status.success() && text(&out.stderr).contains("no space left on the device"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(sh(&atoll, "m", "rm /root/fill && echo ok > /root/ok && cat /root/ok").1, "ok\n");

    // Snapshots and parking are refused, and the sandbox runs on.
    let err = atoll.fails(&["snapshot", "create", "m", "--name", "s"]);
    assert!(err.contains("host folders"), "{err}");
    let err = atoll.fails(&["pause", "--to-disk", "m"]);
    assert!(err.contains("host folders"), "{err}");
    assert_eq!(atoll.state_of("m").as_deref(), Some("running"));

    // Kill leaves nothing running that holds the share.
    atoll.json(&["kill", "m"]);
    assert!(processes_mentioning(&share).is_empty(), "{:?}", processes_mentioning(&share));
    assert!(processes_mentioning(atoll.state_dir()).is_empty());
    assert_eq!(std::fs::read_to_string(share.join("from-guest")).unwrap(), "guest\n", "files stay");
}

#[test]
fn vm_bad_mounts_and_disk_sizes_are_usage_errors_that_start_nothing() {
    let host = tempfile::tempdir().unwrap();
    let dir = host.path().display().to_string();
    let atoll = Atoll::new();
    // Folders that hold the state directory (`/`, its parent) would show a guest every
    // sandbox's records and sockets.
    let state = atoll.state_dir().display().to_string();
    let state_parent = atoll.state_dir().parent().unwrap().display().to_string();
    let holds = "holds atoll's state directory";
    // Inside it: the secrets store (every secret's value) and a sandbox's directory.
    let secrets = atoll.state_dir().join(".secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    let secrets = secrets.display().to_string();
    let inside = "is inside atoll's state directory";
    // Read-write around the data directory: the kernel and templates later sandboxes boot.
    let data = atoll_tests::data_dir().display().to_string();
    for (args, says) in [
        (vec!["--mount", "/:/host"], holds),
        (vec!["--mount", &format!("{state_parent}:/host:ro")], holds),
        (vec!["--mount", &format!("{state}:/host")], holds),
        (vec!["--mount", &format!("{secrets}:/host:ro")], inside),
        (vec!["--mount", &format!("{data}:/host:rw")], "atoll's data directory"),
        (vec!["--mount", "/nonexistent/atoll-mount:/work"], "does not exist"),
        (vec!["--mount", &format!("{dir}:work")], "relative"),
        (vec!["--mount", &format!("{dir}:/work"), "--mount", &format!("{dir}:/work/")], "two host folders"),
        (vec!["--disk", "0"], "no unit"),
        (vec!["--disk", "0G"], "out of range"),
        (vec!["--disk", "10X"], "unknown unit"),
    ] {
        let mut all = vec!["create", "--net", "none"];
        all.extend(&args);
        let out = atoll.run(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains(says), "{args:?}: {}", text(&out.stderr));
        assert!(atoll.sandbox_dirs().is_empty(), "{args:?} left a sandbox directory");
        assert!(processes_mentioning(atoll.state_dir()).is_empty(), "{args:?} left a process");
    }
    // A host path that is not UTF-8 is a usage error, not a panic.
    use std::os::unix::ffi::OsStrExt;
    let odd = std::ffi::OsStr::from_bytes(b"/tmp/atoll-\xff:/w");
    for json in [&[][..], &["--json"][..]] {
        let out =
            atoll.command(&["create", "--net", "none"]).args(json).arg("--mount").arg(odd).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(!text(&out.stderr).contains("panicked"), "{}", text(&out.stderr));
    }
}

#[test]
fn vm_minimal_disk_is_bounded_by_memory_and_a_full_root_leaves_the_guest_running() {
    let atoll = Atoll::new();
    // README's old example: a 2 GiB root in a 512 MiB guest's memory is refused up front.
    let out = atoll.run(&["create", "--name", "dk", "--net", "none", "--disk", "2G"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("at most 320 MiB") && err.contains("--memory") && err.contains("debian"), "{err}");
    assert!(atoll.sandbox_dirs().is_empty() && processes_mentioning(atoll.state_dir()).is_empty());

    // The largest root that fits: filling it gives "No space left on device", the guest
    // lives on, and the next command runs.
    let created = atoll.create_with("dk", &["--net", "none", "--disk", "320M"]);
    assert_eq!(created["disk_bytes"], 320 << 20);
    let (code, _, err) = sh(&atoll, "dk", "dd if=/dev/zero of=/big bs=1M count=700");
    assert!(code != 0 && err.contains("No space left on device"), "dd: {code} {err}");
    let (code, out, err) = sh(&atoll, "dk", "stat -c %s /big && echo alive");
    assert_eq!((code, out.ends_with("alive\n")), (0, true), "{out} {err}");
    let filled: u64 = out.lines().next().and_then(|l| l.parse().ok()).unwrap_or(0);
    assert!(filled > 300 << 20, "the root filled up: {out}");
    assert_eq!(atoll.state_of("dk").as_deref(), Some("running"));
    // The root directory is not world-writable (mode 0755, as on any Linux).
    assert_eq!(sh(&atoll, "dk", "stat -c %a /").1.trim(), "755");
    // A guest file name holding an escape sequence is listed escaped, never raw.
    assert_eq!(sh(&atoll, "dk", "rm /big && printf x > \"/tmp/a$(printf '\\033')[2Jb\"").0, 0);
    let out = atoll.run(&["-s", "dk", "ls", "/tmp"]);
    assert!(out.status.success() && !out.stdout.contains(&0x1b), "{:?}", text(&out.stdout));
    assert!(text(&out.stdout).contains("a\\x1b[2Jb"), "{:?}", text(&out.stdout));
    atoll.json(&["kill", "dk"]);
}

#[test]
fn vm_debian_disk_grows_to_the_size_asked_and_shares_mount_there_too() {
    if !atoll_tests::debian_or_skip() {
        return;
    }
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("f"), "shared\n").unwrap();
    let atoll = Atoll::new();
    let err = atoll.fails(&["create", "--template", "debian", "--net", "none", "--disk", "1G"]);
    assert!(err.contains("smaller than template `debian`'s disk"), "{err}");
    assert!(atoll.sandbox_dirs().is_empty());

    let mount = format!("{}:/srv/host:ro", host.path().display());
    atoll.create_with("d", &["--template", "debian", "--net", "none", "--disk", "8G", "--mount", &mount]);
    // ext4 grown online to the 8 GiB disk: df's 1K-blocks within the filesystem's own
    // overhead of it.
    let (_, out, _) = sh(&atoll, "d", "df -k --output=size / | tail -n 1");
    let kib: u64 = out.trim().parse().unwrap_or_else(|_| panic!("df: {out}"));
    assert!((7 << 20..=8 << 20).contains(&kib), "df says {kib} KiB");
    assert_eq!(sh(&atoll, "d", "cat /srv/host/f").1, "shared\n");
}
