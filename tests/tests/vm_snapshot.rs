//! Snapshots, forks, parking and restores of real microVMs, through the `atoll` binary.
//!
//! One source sandbox is booted per template; everything else starts from its
//! snapshots, which is the point (and keeps the test affordable on 2 cores).

mod cli_util;
mod disk_attack;

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use atoll_tests::processes_mentioning;
use atoll_tests::vm::{Atoll, text, wait_until};
use serde_json::Value;

/// A job that writes a growing count to /tmp/count every 200 ms.
const COUNTER: &str = "i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; done";

/// Reads the counter twice and asserts that it grew: the job runs.
fn counting(atoll: &Atoll, sandbox: &str) -> u64 {
    let read = || atoll.sh(sandbox, "cat /tmp/count").trim().parse::<u64>().expect("a count");
    let first = read();
    let mut last = first;
    wait_until(&format!("the job in {sandbox} to count on"), Duration::from_secs(60), || {
        last = read();
        last > first
    });
    last
}

/// `VmRSS` of process `pid` (QEMU: its guest RAM, whatever backs it, and its own), in KiB.
/// The anonymous memory `pid` holds (`RssAnon`): its own pages, not the page cache it
/// maps.
fn anon_kib(pid: u64) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("RssAnon:")).expect("RssAnon in /proc/PID/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn snapshot_dirs(atoll: &Atoll) -> Vec<PathBuf> {
    match std::fs::read_dir(atoll.state_dir().join(".snapshots")) {
        Ok(d) => d.flatten().map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    }
}

fn dir_of(atoll: &Atoll, name: &str) -> PathBuf {
    PathBuf::from(atoll.json(&["inspect", name])["dir"].as_str().unwrap())
}

fn host_secs() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()).unwrap()
}

fn snapshot_named<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {list}"))
}

#[test]
fn vm_snapshot_fork_park_and_restore_minimal() {
    let atoll = Atoll::new();
    // Networked sandboxes are covered by vm_snapshot_net.rs (they need the test world).
    atoll.json(&["create", "--name", "src", "--net", "none", "--timeout", "240s"]);
    atoll.sh("src", "echo original > /tmp/file");
    let job = atoll.run(&["-s", "src", "run", "-d", "--", "sh", "-c", COUNTER]);
    assert!(job.status.success(), "{}", text(&job.stderr));
    counting(&atoll, "src");

    // Snapshot while an exec streams: over the agent link, which the save leaves up,
    // the exec streams on across it, and ends when its client goes.
    let mut streaming = atoll
        .command(&["-s", "src", "exec", "--", "sh", "-c", "while :; do echo tick; sleep 0.05; done"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 5];
    std::io::Read::read_exact(streaming.stdout.as_mut().unwrap(), &mut first).unwrap();
    let snap = atoll.json(&["snapshot", "create", "src", "--name", "s1"]);
    // More ticks than the pipe held while the save ran: the exec was not cut.
    let mut after = vec![0u8; 5 * 200];
    std::io::Read::read_exact(streaming.stdout.as_mut().unwrap(), &mut after)
        .expect("the exec streams on after the snapshot");
    assert!(after.chunks(5).all(|t| t == b"tick\n"), "{}", text(&after));
    streaming.kill().unwrap();
    streaming.wait().unwrap();
    assert_eq!(snap["name"], "s1");
    assert_eq!(atoll.sh("src", "cat /tmp/file"), "original\n");
    counting(&atoll, "src");
    let list = atoll.json(&["snapshot", "ls"]);
    let s1 = snapshot_named(&list, "s1");
    assert_eq!((s1["source_sandbox"].as_str(), s1["template"].as_str()), (Some("src"), Some("minimal")));
    assert_eq!(s1["memory_mib"], 512);
    let size = s1["size_bytes"].as_u64().unwrap();
    assert!(size > 0 && size < 512 << 20, "size on disk {size}");
    // Guest RAM is a sparse file of the guest's size beside a small stream, and the
    // save did not make the source copy all of its 512 MiB (reading every page did
    // once). QEMU reads every page to save it, which maps the pages of the ram.bin the
    // source was itself restored from: page cache, shared and reclaimable, so only its
    // anonymous memory counts here.
    let s1_dir = atoll.state_dir().join(".snapshots/s1");
    let ram = std::fs::metadata(s1_dir.join("ram.bin")).unwrap();
    assert_eq!(ram.len(), 512 << 20);
    assert!(std::os::unix::fs::MetadataExt::blocks(&ram) * 512 < 256 << 20, "ram.bin is sparse");
    assert!(std::fs::metadata(s1_dir.join("memory.bin")).unwrap().len() < 16 << 20, "RAM left the stream");
    let src_qemu = atoll.json(&["inspect", "src"])["qemu_pid"].as_u64().unwrap();
    let anon = anon_kib(src_qemu);
    assert!(anon < 256 << 10, "the source's QEMU holds {anon} KiB of its own after the save");

    // Bad input changes nothing.
    let err = atoll.fails(&["snapshot", "create", "src", "--name", "s1"]);
    assert!(err.contains("already exists"), "{err}");
    let err = atoll.fails(&["snapshot", "create", "nope", "--name", "s9"]);
    assert!(err.contains("no sandbox is called `nope`"), "{err}");
    let err = atoll.fails(&["snapshot", "create", "src", "--name", "a/b"]);
    assert!(err.contains("not a valid snapshot name"), "{err}");
    assert_eq!(snapshot_dirs(&atoll).len(), 1, "{:?}", snapshot_dirs(&atoll));
    let err = atoll.fails(&["create", "--from", "nope", "--name", "x"]);
    assert!(err.contains("no snapshot is called `nope`"), "{err}");
    assert_eq!(atoll.sandbox_dirs().len(), 1);

    // Two forks: the file and the running job, their own names, randomness, clocks and
    // files.
    for fork in ["f1", "f2"] {
        let info = atoll.json(&["create", "--from", "s1", "--name", fork, "--timeout", "240s"]);
        assert_eq!(info["state"], "running");
        assert_eq!(atoll.sh(fork, "cat /tmp/file"), "original\n");
        counting(&atoll, fork);
        assert_eq!(atoll.sh(fork, "hostname").trim(), fork);
        let guest: i64 = atoll.sh(fork, "date +%s").trim().parse().unwrap();
        assert!((guest - host_secs()).abs() <= 2, "{fork}'s clock is {guest}, the host's {}", host_secs());
    }
    let random = |s: &str| atoll.sh(s, "head -c 16 /dev/urandom | od -An -tx1");
    assert_ne!(random("f1"), random("f2"), "two forks read the same random bytes");
    atoll.sh("f1", "echo mine > /tmp/file");
    assert_eq!(atoll.sh("f2", "cat /tmp/file"), "original\n");
    assert_eq!(atoll.sh("src", "cat /tmp/file"), "original\n");

    // A snapshot of an older layout (format 2: its VM had a vsock device) is refused
    // before anything starts, saying to take a new one, and can still be removed.
    atoll.json(&["snapshot", "create", "src", "--name", "old"]);
    let old = atoll.state_dir().join(".snapshots/old/snapshot.json");
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&old).unwrap()).unwrap();
    assert_eq!(meta["format"], 3, "{meta}");
    meta["format"] = 2.into();
    std::fs::write(&old, meta.to_string()).unwrap();
    let before = atoll.sandbox_dirs().len();
    let err = atoll.fails(&["create", "--from", "old", "--name", "f0"]);
    assert!(err.contains("older atoll") && err.contains("snapshot rm"), "{err}");
    assert_eq!(atoll.sandbox_dirs().len(), before, "a refused fork left a sandbox directory");
    atoll.json(&["snapshot", "rm", "old"]);

    // Parking: no process left; any command brings it back with its files and job.
    let f2_dir = dir_of(&atoll, "f2");
    atoll.json(&["port", "publish", "f2", "8000"]);
    assert_eq!(atoll.json(&["pause", "--to-disk", "f2"])["state"], "parked");
    assert_eq!(atoll.state_of("f2").as_deref(), Some("parked"));
    assert!(processes_mentioning(&f2_dir).is_empty(), "{:?}", processes_mentioning(&f2_dir));
    // Its port is listed without waking it, and not as if something listened there.
    let ls = atoll.run(&["port", "ls", "f2"]);
    assert!(text(&ls.stdout).contains("(parked: not listening)"), "{}", text(&ls.stdout));
    assert!(text(&ls.stderr).contains("atoll resume f2"), "{}", text(&ls.stderr));
    assert_eq!(atoll.state_of("f2").as_deref(), Some("parked"));
    assert_eq!(atoll.sh("f2", "cat /tmp/file"), "original\n");
    assert_eq!(atoll.state_of("f2").as_deref(), Some("running"));
    let ls = atoll.run(&["port", "ls", "f2"]);
    assert!(ls.status.success() && !text(&ls.stdout).contains("parked"), "{}", text(&ls.stdout));
    atoll.json(&["port", "unpublish", "f2", "8000"]);
    counting(&atoll, "f2");
    assert_eq!(atoll.json(&["pause", "--to-disk", "f2"])["state"], "parked");
    assert_eq!(atoll.json(&["resume", "f2"])["sandbox"]["state"], "running");
    assert_eq!(atoll.sh("f2", "hostname").trim(), "f2");
    // A parked sandbox is brought back to be saved; --stop then removes it.
    assert_eq!(atoll.json(&["pause", "--to-disk", "f2"])["state"], "parked");
    assert_eq!(atoll.json(&["snapshot", "create", "f2", "--name", "s3", "--stop"])["source_sandbox"], "f2");
    assert!(atoll.state_of("f2").is_none());
    assert!(processes_mentioning(&f2_dir).is_empty(), "{:?}", processes_mentioning(&f2_dir));
    // A name with `_` (a hostname the kernel command line of a boot does not take) is
    // the restored machine's hostname too, for its shell and for the agent's Info.
    atoll.json(&["create", "--from", "s3", "--name", "f_3", "--timeout", "240s"]);
    assert_eq!(atoll.sh("f_3", "cat /tmp/file; hostname"), "original\nf_3\n");
    assert_eq!(atoll.json(&["inspect", "f_3"])["agent"]["hostname"], "f_3");
    counting(&atoll, "f_3");

    // Restore rolls f1 back: the later write is gone, its name and id stay.
    let id = atoll.json(&["inspect", "f1"])["id"].clone();
    atoll.sh("f1", "echo later > /tmp/later");
    let restored = atoll.json(&["snapshot", "restore", "f1", "s1"]);
    assert_eq!((restored["id"].clone(), restored["name"].as_str()), (id, Some("f1")));
    assert_eq!(
        atoll.sh("f1", "cat /tmp/file; ls /tmp/later 2>&1 || true"),
        "original\nls: /tmp/later: No such file or directory\n"
    );
    counting(&atoll, "f1");

    // A damaged snapshot is refused and leaves nothing behind.
    atoll.json(&["snapshot", "create", "f1", "--name", "s2"]);
    let memory = atoll.state_dir().join(".snapshots/s2/memory.bin");
    let full = std::fs::read(&memory).unwrap();
    let before = atoll.sandbox_dirs().len();
    let running = processes_mentioning(atoll.state_dir()).len();
    std::fs::write(&memory, &full[..full.len() / 2]).unwrap();
    let err = atoll.fails(&["create", "--from", "s2", "--name", "bad"]);
    assert!(err.contains("unusable") && err.contains("bytes"), "{err}");
    std::fs::write(&memory, vec![0x5a; full.len()]).unwrap();
    let err = atoll.fails(&["create", "--from", "s2", "--name", "bad"]);
    assert!(err.contains("not a QEMU migration stream"), "{err}");
    // A stream that starts right but is damaged inside: QEMU refuses it, and the
    // half-started sandbox is undone.
    let mut broken = full.clone();
    broken[full.len() / 2..].fill(0x5a);
    std::fs::write(&memory, &broken).unwrap();
    let err = atoll.fails(&["create", "--from", "s2", "--name", "bad", "--timeout", "60s"]);
    assert!(err.contains("QEMU could not load") || err.contains("exited"), "{err}");
    assert_eq!(atoll.sandbox_dirs().len(), before);
    assert!(atoll.state_of("bad").is_none());
    assert_eq!(processes_mentioning(atoll.state_dir()).len(), running, "a failed fork left a process");
    // Guest RAM truncated, or of another size: refused before anything starts.
    std::fs::write(&memory, &full).unwrap();
    let ram = std::fs::OpenOptions::new().write(true).open(memory.with_file_name("ram.bin")).unwrap();
    for len in [100 << 20, 600 << 20] {
        ram.set_len(len).unwrap();
        let err = atoll.fails(&["create", "--from", "s2", "--name", "bad"]);
        assert!(err.contains("unusable") && err.contains(&format!("ram.bin has {len} bytes")), "{err}");
    }
    assert_eq!(atoll.sandbox_dirs().len(), before);
    assert_eq!(processes_mentioning(atoll.state_dir()).len(), running, "a refused fork left a process");

    // A dead sandbox is refused, and nothing is written.
    let pid = atoll.json(&["inspect", "f1"])["qemu_pid"].as_u64().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-KILL", &pid]).status().unwrap().success());
    wait_until("f1 to show dead", Duration::from_secs(30), || {
        atoll.state_of("f1").as_deref() == Some("dead")
    });
    let err = atoll.fails(&["snapshot", "create", "f1", "--name", "s4"]);
    assert!(err.contains("is dead"), "{err}");
    assert_eq!(snapshot_dirs(&atoll).len(), 3, "{:?}", snapshot_dirs(&atoll));

    let removed = atoll.json(&["snapshot", "rm", "s1", "s2", "s3"]);
    assert_eq!(removed, serde_json::json!(["s1", "s2", "s3"]));
    assert!(atoll.fails(&["snapshot", "rm", "s1"]).contains("no snapshot"));
    assert!(snapshot_dirs(&atoll).is_empty());

    let state = atoll.state_dir().to_path_buf();
    atoll.json(&["kill", "--all"]);
    assert!(processes_mentioning(&state).is_empty(), "{:?}", processes_mentioning(&state));
}

#[test]
fn vm_snapshot_of_a_disk_template_gives_each_fork_its_own_disk() {
    let atoll = Atoll::new();
    atoll.json(&["create", "--template", "debian", "--name", "d1", "--net", "none", "--timeout", "240s"]);
    atoll.sh("d1", "echo before > /root/on-disk && sync");
    atoll.json(&["snapshot", "create", "d1", "--name", "ds"]);
    assert!(atoll.state_dir().join(".snapshots/ds/disk.qcow2").is_file());
    atoll.sh("d1", "echo source > /root/on-disk && sync");

    atoll.json(&["create", "--from", "ds", "--name", "d2", "--timeout", "240s"]);
    assert_eq!(atoll.sh("d2", "cat /root/on-disk"), "before\n");
    atoll.sh("d2", "echo fork > /root/on-disk && sync");
    assert_eq!(atoll.sh("d1", "cat /root/on-disk"), "source\n");
    assert_eq!(atoll.sh("d2", "cat /root/on-disk"), "fork\n");

    // `atoll kill` while a fork is being restored leaves nothing of it. Its QEMU is held
    // (SIGSTOP) as soon as it exists, so the kill lands mid-restore.
    let running = processes_mentioning(atoll.state_dir()).len();
    let before = atoll.sandbox_dirs();
    let fork =
        atoll.command(&["create", "--from", "ds", "--name", "k", "--timeout", "240s"]).spawn().unwrap();
    let mut qemu = None;
    wait_until("the fork's QEMU to start", Duration::from_secs(60), || {
        let new_dir = atoll.sandbox_dirs().into_iter().find(|d| !before.contains(d));
        qemu = new_dir.and_then(|d| {
            processes_mentioning(&d)
                .into_iter()
                // QEMU itself, not the bwrap that jails it.
                .find(|p| p.contains("qemu-system") && !p.contains("bwrap"))
                .map(|p| p.split(':').next().unwrap().to_string())
        });
        qemu.is_some()
    });
    let stopped =
        std::process::Command::new("kill").args(["-STOP", qemu.as_deref().unwrap()]).status().unwrap();
    assert!(stopped.success());
    assert_eq!(atoll.state_of("k").as_deref(), Some("starting"));
    let dirs = before.len();
    let killed = atoll.run(&["kill", "k"]);
    assert!(killed.status.success(), "kill during a restore failed: {}", text(&killed.stderr));
    let out = atoll_tests::vm::wait_bounded(fork, atoll_tests::vm::HANG_GUARD).expect("the killed fork hung");
    assert!(
        !out.status.success(),
        "a fork killed while restoring reported success: {} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(atoll.state_of("k").is_none());
    assert_eq!(atoll.sandbox_dirs().len(), dirs);
    wait_until("the killed fork's processes to end", Duration::from_secs(30), || {
        processes_mentioning(atoll.state_dir()).len() == running
    });

    // Disk headers rewritten to make QEMU open another file are refused before it starts.
    disk_attack::altered_snapshot_disks_are_refused(&atoll, "ds", "d2", &dir_of(&atoll, "d2"));
    disk_attack::as_user::altered_snapshot_disks_are_refused_as_an_ordinary_user(&atoll, "ds");
    disk_attack::altered_running_disk_is_not_saved(&atoll, "d2", &dir_of(&atoll, "d2"));
    disk_attack::altered_parked_disk_is_refused(&atoll, "d2", &dir_of(&atoll, "d2"));
    assert_eq!(atoll.sh("d2", "cat /root/on-disk"), "fork\n");
    // d1's create booted and saved debian's template snapshot for this shape.
    assert_eq!(atoll.json(&["inspect", "d1"])["started_from"], "boot");
    disk_attack::template_snap::altered_template_snapshots_are_not_used(&atoll);
}

/// A tmpfs mounted on a directory, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &std::path::Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount (the VM tests run as root)");
        assert!(ok.success(), "mount a tmpfs on {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn vm_snapshot_the_disk_filling_while_saving_keeps_the_old_snapshot_and_leaves_nothing() {
    let atoll = Atoll::new();
    let snaps = atoll.state_dir().join(".snapshots");
    // Room for the old snapshot and for the new one's up-front check (guest memory).
    let _tmpfs = Tmpfs::mount(&snaps, "320m");
    atoll.json(&["create", "--name", "src", "--net", "none", "--memory", "128", "--timeout", "240s"]);
    atoll.sh("src", "echo original > /tmp/file");
    atoll.json(&["snapshot", "create", "src", "--name", "old"]);

    // QEMU's QMP monitor serves one client at a time: while this test holds it, the
    // save waits for QEMU's greeting right after its free-space check (its staging
    // directory appears). The file system is filled meanwhile but for 2 MiB, room for
    // the stream of device state and not for guest RAM, then the monitor let go.
    let monitor = std::os::unix::net::UnixStream::connect(dir_of(&atoll, "src").join("vm/qmp.sock")).unwrap();
    let mut greeting = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(&monitor), &mut greeting).unwrap();
    assert!(greeting.contains("QMP"), "{greeting}");
    let saving = atoll.command(&["snapshot", "create", "src", "--name", "new"]).spawn().unwrap();
    wait_until("the save to start", Duration::from_secs(60), || {
        std::fs::read_dir(&snaps)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains("staging"))
    });
    let filler = snaps.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![1u8; 1 << 20];
        while f.write_all(&chunk).is_ok() {}
        let len = f.metadata().unwrap().len();
        f.set_len(len - (2 << 20)).unwrap();
    }
    drop(monitor);
    let out = atoll_tests::vm::wait_bounded(saving, atoll_tests::vm::HANG_GUARD).expect("the save hung");
    assert!(!out.status.success(), "a save onto a full disk succeeded: {}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(err.contains("free space"), "{err}");
    std::fs::remove_file(&filler).unwrap();
    let left: Vec<_> = std::fs::read_dir(&snaps).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, ["old"], "only the old snapshot is left (nothing partial)");

    // The source runs on, and the old snapshot still forks.
    assert_eq!(atoll.sh("src", "cat /tmp/file"), "original\n");
    let list = atoll.json(&["snapshot", "ls"]);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    atoll.json(&["create", "--from", "old", "--name", "f", "--timeout", "240s"]);
    assert_eq!(atoll.sh("f", "cat /tmp/file; hostname"), "original\nf\n");
}
