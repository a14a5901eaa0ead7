//! Disk and snapshot quotas, the config file that sets them, and a guest filling its own
//! disk, on one booted sandbox through the `atoll` binary. Its template is a busybox
//! tree with a 128 MiB disk, built by the test, so the guest fills its disk in seconds
//! (a `debian` disk is 4 GiB: minutes under software emulation):
//! - a config file with an unknown key or a bad value is refused, naming the key or the
//!   line, and nothing is made;
//! - with `max_disk = "250M"` in the config file one 128 MiB disk fits and a second create
//!   is refused at once ("Disk quota reached", saying what to kill), leaving nothing, even
//!   with three creates made at once; two creates at once with room for one more
//!   sandbox start one;
//! - a snapshot restore that would pass the sandbox quota (a parked sandbox put back
//!   while another runs) is refused at once and leaves it parked; one whose snapshot
//!   disk would pass the disk quota is refused at once and the sandbox runs on;
//! - `atoll info` shows each quota with its use and where it was set (the config file,
//!   or the environment variable, which wins);
//! - over the snapshot quota, `snapshot create` and `template save` are refused at once
//!   ("Snapshot quota reached", saying what to remove), leaving nothing;
//! - as root in the guest, writing the disk full ends in ENOSPC in the guest; the host
//!   file behind it stays within the disk's size, and the sandbox still answers;
//! - `qemu.log` (QEMU's stderr, which the network helper writes) is cut back once over
//!   1 MiB;
//! - (no VM) the `--max-*` flags win over the environment and the config file, for that
//!   command only: a flag below the use refuses `create` at once naming the flag,
//!   `atoll info` shows the source `flag --max-...`, bad values are refused as the
//!   file's are, and `--help` teaches the units and the config file's path;
//! - (no VM) the Dockerfile step cache and the image blob cache count in the snapshot
//!   quota, and a template build over it is refused at once, leaving nothing.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use atoll_tests::data_dir;
use atoll_tests::vm::{Atoll, HANG_GUARD, short_tempdir, text, wait_bounded};
use serde_json::Value;

/// Runs `atoll ARGS` with `ATOLL_CONFIG=config` and the extra environment `env`.
fn run(atoll: &Atoll, config: &Path, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let mut cmd = atoll.command(args);
    cmd.env("ATOLL_CONFIG", config);
    for (k, v) in env {
        cmd.env(k, v);
    }
    wait_bounded(cmd.spawn().unwrap(), HANG_GUARD).unwrap_or_else(|| panic!("atoll {args:?} hung"))
}

/// Like [`run`], asserting that it fails at once; returns stderr.
fn refused(atoll: &Atoll, config: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
    let started = Instant::now();
    let out = run(atoll, config, env, args);
    assert!(!out.status.success(), "atoll {args:?} should be refused; printed {}", text(&out.stdout));
    assert!(started.elapsed() < Duration::from_secs(20), "refused only after {:?}", started.elapsed());
    text(&out.stderr)
}

/// Starts `atoll CREATE NAME` for each of `names` at once and waits for all of them.
fn at_once<'a>(
    atoll: &Atoll,
    config: &Path,
    env: &[(&str, &str)],
    create: &[&str],
    names: &[&'a str],
) -> Vec<(&'a str, std::process::Output)> {
    let children: Vec<_> = names
        .iter()
        .map(|name| {
            let mut cmd = atoll.command(&[create, &[name]].concat());
            cmd.env("ATOLL_CONFIG", config).envs(env.iter().copied());
            (*name, cmd.spawn().unwrap())
        })
        .collect();
    children
        .into_iter()
        .map(|(name, child)| {
            (name, wait_bounded(child, HANG_GUARD).unwrap_or_else(|| panic!("create {name} hung")))
        })
        .collect()
}

fn quota<'a>(info: &'a Value, key: &str) -> &'a Value {
    info["quotas"].as_array().unwrap().iter().find(|q| q["key"] == key).unwrap_or_else(|| panic!("{info}"))
}

/// The guest disk's size: small, so that writing it full takes seconds.
const DISK: u64 = 128 << 20;

/// A data directory with the usual kernel and one template, `small`: static busybox and
/// the agent on a [`DISK`]-sized ext4 disk, with no template snapshot (a create boots it).
fn small_template() -> tempfile::TempDir {
    let kernel = data_dir().join("kernel/current");
    assert!(kernel.join("vmlinux").is_file(), "no kernel at {}; run rootfs/setup.sh", kernel.display());
    let data = short_tempdir();
    std::fs::create_dir_all(data.path().join("kernel")).unwrap();
    std::os::unix::fs::symlink(kernel.canonicalize().unwrap(), data.path().join("kernel/current")).unwrap();
    let tree = short_tempdir();
    let bin = tree.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy("/bin/busybox", bin.join("busybox"))
        .expect("busybox-static is installed (rootfs/setup.sh)");
    for applet in ["sh", "dd", "df", "sync", "rm", "echo", "cat", "ls"] {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
    }
    let out = Atoll::with_data_dir(data.path()).run(&[
        "template",
        "build",
        "--from",
        tree.path().to_str().unwrap(),
        "--name",
        "small",
        "--size",
        "128M",
        "--no-snapshot",
    ]);
    assert!(out.status.success(), "template build: {}", text(&out.stderr));
    data
}

#[test]
fn hardening_quota_disk_snapshot_config_and_a_guest_filling_its_disk() {
    let data = small_template();
    let atoll = Atoll::with_data_dir(data.path());
    let conf_dir = short_tempdir();
    let config = conf_dir.path().join("config.toml");
    let create = ["create", "--template", "small", "--net", "none", "--timeout", "300s", "--name"];

    // A config file atoll cannot use is refused, saying where, before anything is made.
    std::fs::write(&config, "[quotas]\nmax_disks = \"6G\"\n").unwrap();
    let err = refused(&atoll, &config, &[], &[&create[..], &["d1"]].concat());
    assert!(err.contains("unknown field `max_disks`") && err.contains("line 2"), "{err}");
    assert!(err.contains(&config.display().to_string()), "{err}");
    std::fs::write(&config, "[quotas]\n\nmax_disk = \"six gigs\"\n").unwrap();
    let err = refused(&atoll, &config, &[], &[&create[..], &["d1"]].concat());
    assert!(err.contains("line 3") && err.contains("six gigs"), "{err}");
    let missing = conf_dir.path().join("nope.toml");
    let err = refused(&atoll, &missing, &[], &[&create[..], &["d1"]].concat());
    assert!(err.contains("cannot read the config file") && err.contains("ATOLL_CONFIG"), "{err}");
    assert!(atoll.sandbox_dirs().is_empty(), "a refused create left a sandbox directory");

    // One 128 MiB disk (plus its small files) fits under 250M; a second does not, even
    // when three creates are made at once (each checks under the state lock, and a
    // sandbox still starting counts at its disk's size before that disk is made).
    std::fs::write(&config, "[quotas]\nmax_disk = \"250M\"\n").unwrap();
    let outs = at_once(&atoll, &config, &[], &create, &["d1", "d2", "d3"]);
    let won: Vec<&str> = outs.iter().filter(|(_, o)| o.status.success()).map(|(n, _)| *n).collect();
    assert_eq!(won.len(), 1, "three creates at once under a disk quota for one: {won:?} started");
    let live = won[0];
    for (name, out) in outs.iter().filter(|(n, _)| *n != live) {
        let err = text(&out.stderr);
        assert!(
            err.contains("Disk quota reached: sandboxes hold") && err.contains("this one needs 128 MiB"),
            "create {name}: {err}"
        );
        assert!(err.contains("atoll kill") && err.contains("--disk") && err.contains("max_disk"), "{err}");
    }
    assert_eq!(atoll.sandbox_dirs().len(), 1, "a refused create left a sandbox directory");

    // The same for the number of sandboxes: with one running and room for two, two
    // creates at once start one.
    let two = [("ATOLL_MAX_SANDBOXES", "2"), ("ATOLL_MAX_DISK", "1G")];
    let outs = at_once(&atoll, &config, &two, &create, &["e1", "e2"]);
    let won: Vec<&str> = outs.iter().filter(|(_, o)| o.status.success()).map(|(n, _)| *n).collect();
    assert_eq!(won.len(), 1, "two creates at once with room for one: {won:?} started");
    for (name, out) in outs.iter().filter(|(n, _)| *n != won[0]) {
        let err = text(&out.stderr);
        assert!(err.contains("Sandbox quota reached: 2 sandboxes run, at most 2"), "create {name}: {err}");
    }
    let out = run(&atoll, &config, &[], &["kill", won[0]]);
    assert!(out.status.success(), "kill {}: {}", won[0], text(&out.stderr));

    // `atoll info`: each quota, its use and its source; the environment wins.
    let out = run(&atoll, &config, &[], &["-s", live, "--json", "info"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    let disk = quota(&info, "max_disk");
    assert_eq!(disk["limit"], 250u64 << 20, "{info}");
    assert!(disk["used"].as_u64().unwrap() >= DISK, "{info}");
    assert_eq!(disk["source"], format!("config file {}", config.display()), "{info}");
    assert_eq!(quota(&info, "max_sandboxes")["used"], 1, "{info}");
    assert_eq!(quota(&info, "max_vcpus")["source"], "machine default", "{info}");
    let out = run(&atoll, &config, &[("ATOLL_MAX_DISK", "7G")], &["-s", live, "info"]);
    let shown = text(&out.stdout);
    assert!(
        shown.lines().any(|l| l.contains("max_disk") && l.contains("7 GiB") && l.contains("$ATOLL_MAX_DISK")),
        "{shown}"
    );

    // Over the snapshot quota, snapshots and template saves are refused at once.
    let small = [("ATOLL_MAX_SNAPSHOT_DISK", "1M")];
    let err = refused(&atoll, &config, &small, &["snapshot", "create", live, "--name", "s1"]);
    assert!(err.contains("Snapshot quota reached") && err.contains("atoll snapshot rm"), "{err}");
    let err = refused(&atoll, &config, &small, &["template", "save", live, "--name", "quota-t"]);
    assert!(err.contains("Snapshot quota reached") && err.contains("atoll template rm"), "{err}");
    let snaps = atoll.json(&["snapshot", "ls"]);
    assert_eq!(snaps.as_array().map(Vec::len), Some(0), "{snaps}");
    assert_eq!(atoll.state_of(live).as_deref(), Some("running"), "the sandbox runs on");

    // A snapshot restore starts a VM too: a parked sandbox (which counts for nothing) put
    // back to a snapshot while another takes the only place is refused at once and stays
    // parked.
    let one = [("ATOLL_MAX_SANDBOXES", "1"), ("ATOLL_MAX_DISK", "1G")];
    for args in [&["snapshot", "create", live, "--name", "s1"][..], &["pause", "--to-disk", live]] {
        let out = run(&atoll, &config, &[], args);
        assert!(out.status.success(), "atoll {args:?}: {}", text(&out.stderr));
    }
    let out = run(&atoll, &config, &one, &[&create[..], &["other"]].concat());
    assert!(out.status.success(), "a create while the other sandbox is parked: {}", text(&out.stderr));
    let err = refused(&atoll, &config, &one, &["snapshot", "restore", live, "s1"]);
    assert!(err.contains("Sandbox quota reached: 1 sandbox runs, at most 1"), "{err}");
    assert_eq!(atoll.state_of(live).as_deref(), Some("parked"), "a refused restore left it parked");
    // A restore replaces the sandbox's disk with the snapshot's: judged at that disk's
    // full size, next to the others' disks, with the private copy of the snapshot's guest
    // RAM its QEMU maps (as stored; its name is gone once QEMU has it open, its blocks
    // are taken while QEMU lives). With room for the disk but only half the copy, it is
    // refused at once and the sandbox runs on as it was.
    let disk_used = |who: &str| {
        let out = run(&atoll, &config, &[], &["-s", who, "--json", "info"]);
        let info: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out.stderr)));
        quota(&info, "max_disk")["used"].as_u64().unwrap()
    };
    // What the others hold, and `other` but for its own copy of guest RAM (it restored
    // its template's snapshot; the restore replaces that copy).
    let record_in = |dir: &Path| -> Value {
        serde_json::from_slice(&std::fs::read(dir.join("sandbox.json")).unwrap()).unwrap()
    };
    let record = |name: &str| -> Value {
        let mut records =
            atoll.sandbox_dirs().into_iter().map(|d| std::fs::read(d.join("sandbox.json")).unwrap());
        records.find_map(|r| serde_json::from_slice::<Value>(&r).ok().filter(|r| r["name"] == name)).unwrap()
    };
    let used = disk_used("other") - record("other")["ram_copy"].as_u64().unwrap_or(0);
    let ram = std::fs::metadata(atoll.state_dir().join(".snapshots/s1/ram.bin")).unwrap().blocks() * 512;
    assert!(ram > 8 << 20, "the snapshot's guest RAM stores only {ram} bytes");
    let room = |bytes: u64| {
        [("ATOLL_MAX_SANDBOXES", "2".to_string()), ("ATOLL_MAX_DISK", format!("{}K", bytes >> 10))]
    };
    let tight = room(used + ram / 2);
    let tight: Vec<(&str, &str)> = tight.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let err = refused(&atoll, &config, &tight, &["snapshot", "restore", "other", "s1"]);
    let needs = format!("this one needs {} MiB", (DISK + ram).div_ceil(1 << 20));
    assert!(err.contains("Disk quota reached") && err.contains(&needs), "{needs}: {err}");
    assert_eq!(atoll.state_of("other").as_deref(), Some("running"), "a refused restore stopped it");
    // With room for both it is restored, and while it runs its copy counts in `atoll info`.
    let roomy = room(used + ram + (16 << 20));
    let roomy: Vec<(&str, &str)> = roomy.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = run(&atoll, &config, &roomy, &["snapshot", "restore", "other", "s1"]);
    assert!(out.status.success(), "a restore with room: {}", text(&out.stderr));
    assert!(!atoll.sandbox_dirs().iter().any(|d| d.join("vm/ram.bin").exists()), "the copy kept its name");
    let after = disk_used("other");
    assert_eq!(record("other")["ram_copy"].as_u64(), Some(ram), "the record's count of its copy");
    // A file a taken-over QEMU puts in its view under the copy's old name counts as any
    // other file of the sandbox does.
    let other_dir = atoll.sandbox_dirs().into_iter().find(|d| record_in(d)["name"] == "other").unwrap();
    std::fs::write(other_dir.join("vm/ram.bin"), vec![1u8; 16 << 20]).unwrap();
    let planted = disk_used("other");
    assert!(planted >= after + (16 << 20), "a file named vm/ram.bin is not counted: {planted} after {after}");
    std::fs::remove_file(other_dir.join("vm/ram.bin")).unwrap();
    // A restore that fails once its copy is made (here: 1 ms to reach QEMU) leaves no
    // named copy behind: its blocks would stay taken by a dead sandbox.
    let out = run(&atoll, &config, &roomy, &["snapshot", "restore", "--timeout", "1ms", "other", "s1"]);
    assert!(!out.status.success(), "a restore given 1 ms went through");
    assert!(
        !atoll.sandbox_dirs().iter().any(|d| d.join("vm/ram.bin").exists()),
        "a failed restore left its copy"
    );
    assert!(
        after + (1 << 20) >= used + ram,
        "the running copy of guest RAM is not counted: {after} < {used} + {ram}"
    );
    for args in [&["kill", "other"][..], &["snapshot", "rm", "s1"]] {
        let out = run(&atoll, &config, &[], args);
        assert!(out.status.success(), "atoll {args:?}: {}", text(&out.stderr));
    }

    // The guest, as root, writes its disk full: ENOSPC in the guest, the host file bounded.
    let dir = &atoll.sandbox_dirs()[0];
    let overlay = dir.join("vm").join("rootfs.qcow2");
    // It is still parked: the exec below brings it back. Its QEMU maps the parked memory
    // itself (no copy), and once the parked files are gone its record counts their blocks.
    let parked_ram = std::fs::metadata(dir.join("parked/ram.bin")).unwrap().blocks() * 512;
    let out = run(
        &atoll,
        &config,
        &[],
        &[
            "-s",
            live,
            "exec",
            "--timeout",
            "5m",
            "--",
            "sh",
            "-c",
            "dd if=/dev/zero of=/fill bs=4M 2>&1; sync; df -m /",
        ],
    );
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(said.contains("No space left on device"), "{said}");
    assert!(!dir.join("parked").exists() && !dir.join("vm/ram.bin").exists(), "parked files left");
    assert_eq!(
        record(live)["ram_copy"].as_u64(),
        Some(parked_ram),
        "the unparked QEMU's memory is not counted"
    );
    let stored = std::fs::metadata(&overlay).unwrap().blocks() * 512;
    assert!(stored > DISK / 2, "the guest wrote only {stored} bytes: the fill did not happen");
    assert!(stored <= DISK + (64 << 20), "the disk file grew to {stored} bytes past the disk's 128 MiB");
    assert_eq!(atoll.sh(live, "rm /fill && echo ok").trim(), "ok", "the sandbox still answers");

    // qemu.log (written by the helper from QEMU's stderr stream, `net/stderr.sock`) is
    // cut back once over 1 MiB (as the console is), its end kept: 3 MiB on a second
    // writer of that stream never make it grow past the bound and a read.
    let log = dir.join("qemu.log");
    let mut flood = vec![b'x'; 3 << 20];
    flood.extend_from_slice(b"\nQEMU-LOG-END\n");
    let mut writer = std::os::unix::net::UnixStream::connect(dir.join("net/stderr.sock")).unwrap();
    let mut largest = 0;
    for chunk in flood.chunks(256 << 10) {
        use std::io::Write;
        writer.write_all(chunk).unwrap();
        largest = largest.max(std::fs::metadata(&log).unwrap().len());
    }
    // The helper closes the stream once it has written all of it (what atoll waits for
    // before it reads QEMU's last words).
    writer.shutdown(std::net::Shutdown::Write).unwrap();
    writer.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut writer, &mut rest).expect("the helper did not close the stream");
    let end = std::fs::read(&log).unwrap();
    assert!(
        largest <= (1 << 20) + (64 << 10) && end.len() <= 1 << 20,
        "qemu.log: {largest}, then {}",
        end.len()
    );
    assert!(text(&end).trim_end().ends_with("QEMU-LOG-END"));
}

/// The snapshot quota counts the image caches and holds for template builds, with no
/// VM: the Dockerfile step cache (`images/steps`) and the image blob cache
/// (`images/blobs`) are counted in `atoll info`, and a template build over the quota is
/// refused at once, saying what to remove, leaving no template and no staging behind.
#[test]
fn hardening_quota_template_builds_and_the_image_caches_count() {
    let data = small_template();
    let atoll = Atoll::with_data_dir(data.path());
    let conf_dir = short_tempdir();
    let config = conf_dir.path().join("config.toml");
    std::fs::write(&config, "").unwrap();
    let snapshot_used = || {
        // With no sandbox to ask, `info` still prints the host's quotas (and exits 2).
        let out = run(&atoll, &config, &[], &["--json", "info"]);
        let info: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {} {}", text(&out.stdout), text(&out.stderr)));
        quota(&info, "max_snapshot_disk")["used"].as_u64().unwrap()
    };

    // What a client fills the caches with counts, each cache byte for byte.
    let before = snapshot_used();
    let fill = |rel: &str| {
        let path = data.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, vec![7u8; 8 << 20]).unwrap();
    };
    fill("images/steps/0123abcd/rootfs.ext4");
    let with_steps = snapshot_used();
    assert!(with_steps >= before + (8 << 20), "the step cache is not counted: {before} -> {with_steps}");
    fill("images/blobs/sha256/0123abcd");
    let with_blobs = snapshot_used();
    assert!(
        with_blobs >= with_steps + (8 << 20),
        "the blob cache is not counted: {with_steps} -> {with_blobs}"
    );

    // Over the quota (the caches alone pass 10M), a template build is refused at once.
    let tree = short_tempdir();
    std::fs::create_dir_all(tree.path().join("bin")).unwrap();
    std::fs::copy("/bin/busybox", tree.path().join("bin/busybox")).unwrap();
    let build =
        ["template", "build", "--from", tree.path().to_str().unwrap(), "--name", "over", "--no-snapshot"];
    let err = refused(&atoll, &config, &[("ATOLL_MAX_SNAPSHOT_DISK", "10M")], &build);
    assert!(err.contains("Snapshot quota reached"), "{err}");
    assert!(
        err.contains("atoll template rm")
            && err.contains("atoll image prune")
            && err.contains("ATOLL_MAX_SNAPSHOT_DISK"),
        "{err}"
    );
    let left: Vec<String> = std::fs::read_dir(data.path().join("templates"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("over"))
        .collect();
    assert!(left.is_empty(), "a refused build left {left:?}");

    // Under a quota that fits, the same build goes through (the refusal was the quota's).
    let out = run(&atoll, &config, &[("ATOLL_MAX_SNAPSHOT_DISK", "10G")], &build);
    assert!(out.status.success(), "template build: {}", text(&out.stderr));
    assert!(data.path().join("templates/over/template.json").is_file());
}

/// The `--max-*` flags, with no VM: each wins over its environment variable and config
/// key for the one command it is given to; a flag below the use refuses `create` at once
/// with the actionable message naming the flag, and nothing is made; `atoll info` shows
/// each limit's source; bad values are refused (exit 2) as the file's are; `--help`
/// teaches the units and where the config file is.
#[test]
fn hardening_quota_flags_win_over_the_environment_and_the_file() {
    let atoll = Atoll::new();
    let conf_dir = short_tempdir();
    let config = conf_dir.path().join("config.toml");
    std::fs::write(&config, "[quotas]\nmax_sandboxes = 40\nmax_memory_mib = 400000\nmax_disk = \"900G\"\n")
        .unwrap();
    let env = [("ATOLL_MAX_SANDBOXES", "50"), ("ATOLL_MAX_VCPUS", "64")];
    let create = ["create", "--net", "none", "--name", "q1"];

    // Below the use: refused at once, naming the flag first, leaving nothing.
    let err = refused(&atoll, &config, &env, &[&["--max-sandboxes", "0"][..], &create].concat());
    assert!(err.contains("Sandbox quota reached: 0 sandboxes run, at most 0 may"), "{err}");
    assert!(err.contains("--max-sandboxes, $ATOLL_MAX_SANDBOXES or `max_sandboxes`"), "{err}");
    assert!(err.contains("atoll pause --to-disk NAME") && err.contains("atoll kill"), "{err}");
    let err = refused(&atoll, &config, &env, &[&create[..], &["--max-memory-mib", "100"]].concat());
    assert!(err.contains("Memory quota reached") && err.contains("at most 100 MiB"), "{err}");
    assert!(err.contains("--max-memory-mib") && err.contains("--memory"), "{err}");
    let err = refused(&atoll, &config, &env, &[&["--max-vcpus", "0"][..], &create].concat());
    assert!(err.contains("vCPU quota reached") && err.contains("at most 0 may run"), "{err}");
    assert!(err.contains("--max-vcpus, $ATOLL_MAX_VCPUS") && err.contains("--cpus"), "{err}");
    assert!(atoll.sandbox_dirs().is_empty(), "a refused create left a sandbox directory");

    // `atoll info`: flag over environment over file over default, each shown.
    let out =
        run(&atoll, &config, &env, &["--json", "--max-sandboxes", "3", "--max-snapshot-disk", "2T", "info"]);
    let info: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", text(&out.stdout), text(&out.stderr)));
    let shown =
        |key: &str| (quota(&info, key)["limit"].as_u64().unwrap(), quota(&info, key)["source"].clone());
    assert_eq!(shown("max_sandboxes"), (3, "flag --max-sandboxes".into()), "{info}");
    assert_eq!(shown("max_snapshot_disk"), (2 << 40, "flag --max-snapshot-disk".into()), "{info}");
    assert_eq!(shown("max_vcpus"), (64, "$ATOLL_MAX_VCPUS".into()), "{info}");
    assert_eq!(
        shown("max_memory_mib"),
        (400000, format!("config file {}", config.display()).into()),
        "{info}"
    );
    assert_eq!(shown("max_disk"), (900 << 30, format!("config file {}", config.display()).into()), "{info}");
    // The flag was for that command only.
    let out = run(&atoll, &config, &env, &["--json", "info"]);
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(quota(&info, "max_sandboxes")["source"], "$ATOLL_MAX_SANDBOXES", "{info}");
    let out = run(&atoll, &config, &[], &["info", "--max-disk", "5G"]);
    let text_info = text(&out.stdout);
    assert!(
        text_info
            .lines()
            .any(|l| l.contains("max_disk") && l.contains("5 GiB") && l.contains("flag --max-disk")),
        "{text_info}"
    );

    // Bad values: refused before anything runs, saying what is wrong.
    for (args, says) in [
        (["--max-disk", "5X"], "unknown unit"),
        (["--max-snapshot-disk", "lots"], "use K, M, G or T"),
        (["--max-sandboxes", "two"], "not a whole number"),
        (["--max-vcpus", "1.5"], "not a whole number"),
    ] {
        let out = run(&atoll, &config, &[], &[&args[..], &create].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains(args[0]) && err.contains(says), "{args:?}: {err}");
    }
    assert!(atoll.sandbox_dirs().is_empty());

    // --help teaches the units and the config file, for atoll and for atoll mcp.
    for args in [&["--help"][..], &["mcp", "--help"]] {
        let help = text(&run(&atoll, &config, &[], args).stdout);
        for needed in
            ["--max-sandboxes", "--max-memory-mib", "--max-disk", "200G", "powers of 1024", "config.toml"]
        {
            assert!(help.contains(needed), "{args:?} --help lacks {needed}: {help}");
        }
    }
}
