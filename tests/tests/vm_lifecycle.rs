//! The sandbox lifecycle through the real `atoll` binary: `create` boots a microVM (QEMU
//! under TCG where there is no hardware KVM, and one `atoll net-helper` that serves the
//! agent link; no vhost-device-vsock), guest commands reach it by name, `pause` /
//! `resume` keep its clock right, `ls` shows the states, and `kill` leaves no process
//! and no file behind. A failed create leaves nothing either.
//!
//! These boot the `minimal` template that `rootfs/setup.sh` builds into the atoll data
//! directory; without it they fail and say so. Each test has its own state directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use atoll_tests::vm::{
    Atoll, BOOT_TIMEOUT, HANG_GUARD, minimal_template_dir, short_tempdir, text, wait_bounded, wait_until,
};
use atoll_tests::{pid_gone, processes_mentioning, vsock_backends_mentioning};
use serde_json::Value;

fn now_ms() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

#[test]
fn vm_lifecycle_create_exec_pause_resume_ls_kill() {
    let atoll = Atoll::new();
    let created = atoll.create("life");
    assert_eq!(created["name"], "life");
    assert_eq!(created["state"], "running");
    assert_eq!(created["template"], "minimal");
    let id = created["id"].as_str().unwrap().to_string();
    let qemu_pid = created["qemu_pid"].as_u64().expect("a running sandbox has a QEMU pid");
    let helper_pid = created["net_helper_pid"].as_u64().expect("a running sandbox has a net-helper pid");
    assert_eq!(vsock_backends_mentioning(atoll.state_dir()), Vec::<String>::new(), "no vsock backend runs");

    // A second sandbox cannot take the name.
    let err = atoll.fails(&["create", "--name", "life"]);
    assert!(err.contains("already exists"), "{err}");

    // Guest commands reach it by name and by id, over its agent link.
    let out = atoll.run(&["-s", "life", "exec", "--", "sh", "-c", "echo hello-$((6*7)) from $(uname -s)"]);
    assert!(out.status.success(), "exec failed: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hello-42 from Linux\n");
    let info = atoll.json(&["-s", &id, "info"]);
    assert_eq!(info["pid1"], true, "the agent is the guest's init: {info}");
    // The root directory is not world-writable (the initramfs's `.` entry sets its mode).
    let out = atoll.run(&["-s", "life", "exec", "--", "stat", "-c", "%a", "/"]);
    assert_eq!(text(&out.stdout), "755\n", "{}", text(&out.stderr));

    // Pause: ls shows it. The guest's clock is first put 25 years back, so that only
    // resume's clock setting can bring it right (it runs on through a pause otherwise).
    let out = atoll.run(&["-s", "life", "exec", "--", "date", "-s", "2001-01-01 00:00:00"]);
    assert!(out.status.success(), "setting the guest clock back failed: {}", text(&out.stderr));
    assert_eq!(atoll.json(&["pause", "life"])["state"], "paused");
    assert_eq!(atoll.states(), vec![("life".to_string(), "paused".to_string())]);
    std::thread::sleep(Duration::from_secs(2));

    // Resume sets the guest clock to the host's.
    let resumed = atoll.json(&["resume", "life"]);
    assert_eq!(resumed["sandbox"]["state"], "running");
    let moved = resumed["clock_adjusted_ms"].as_i64().unwrap();
    assert!(moved > 365 * 86_400_000, "resume moved the guest clock by only {moved} ms");
    let before = now_ms();
    let guest = atoll.json(&["-s", "life", "info"])["time_unix_ms"].as_i64().unwrap();
    let after = now_ms();
    assert!(
        guest >= before - 2_000 && guest <= after + 2_000,
        "guest clock {guest} is off the host's [{before}, {after}] after resume"
    );
    assert_eq!(atoll.states(), vec![("life".to_string(), "running".to_string())]);

    // A guest command on a paused sandbox resumes it first (pause takes -s too).
    assert_eq!(atoll.json(&["-s", "life", "pause"])["state"], "paused");
    let out = atoll.run(&["-s", "life", "exec", "--", "true"]);
    assert!(out.status.success(), "exec on a paused sandbox failed: {}", text(&out.stderr));
    assert_eq!(atoll.states(), vec![("life".to_string(), "running".to_string())]);

    let inspected = atoll.json(&["inspect", "life"]);
    assert_eq!(inspected["qemu_pid"].as_u64(), Some(qemu_pid));
    assert_eq!(inspected["agent"]["pid1"], true, "inspect shows the agent's Info: {inspected}");
    // `atoll info NAME` is the same view, under the name the issue gives it.
    let info = atoll.json(&["info", "life"]);
    assert_eq!(info["qemu_pid"], inspected["qemu_pid"], "atoll info NAME: {info}");
    assert_eq!(info["agent"]["pid1"], true, "atoll info NAME shows the agent's Info: {info}");

    // kill: no process, no file.
    let removed = atoll.json(&["kill", "life"]);
    assert_eq!(removed[0]["id"], id.as_str());
    assert!(pid_gone(qemu_pid), "QEMU (pid {qemu_pid}) still runs after kill");
    assert!(pid_gone(helper_pid), "the net-helper (pid {helper_pid}) still runs after kill");
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
    assert_eq!(atoll.sandbox_dirs(), Vec::<PathBuf>::new());
    assert_eq!(atoll.states(), vec![]);
    let err = atoll.fails(&["-s", "life", "exec", "--", "true"]);
    assert!(err.contains("no sandbox named `life`"), "{err}");
}

#[test]
fn vm_dead_sandbox_is_shown_refused_and_still_killed() {
    let atoll = Atoll::new();
    let created = atoll.create("doomed");
    let qemu_pid = created["qemu_pid"].as_u64().unwrap();
    Command::new("kill").args(["-KILL", &qemu_pid.to_string()]).status().expect("run kill");
    while !pid_gone(qemu_pid) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(atoll.states(), vec![("doomed".to_string(), "dead".to_string())]);
    let err = atoll.fails(&["-s", "doomed", "exec", "--", "true"]);
    assert!(err.contains("`doomed` is dead") && err.contains("atoll kill doomed"), "{err}");
    let err = atoll.fails(&["pause", "doomed"]);
    assert!(err.contains("is dead"), "{err}");
    atoll.json(&["kill", "doomed"]);
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
    assert_eq!(atoll.sandbox_dirs(), Vec::<PathBuf>::new());
}

/// A template whose kernel is the given file and whose other files are the minimal one's.
fn custom_template(data: &Path, name: &str, kernel: Option<&[u8]>, cmdline: &str) {
    custom_template_with_disk(data, name, kernel, cmdline, None);
}

/// [`custom_template`] with a raw disk image `rootfs.img` holding `disk`.
fn custom_template_with_disk(
    data: &Path,
    name: &str,
    kernel: Option<&[u8]>,
    cmdline: &str,
    disk: Option<&[u8]>,
) {
    let minimal = minimal_template_dir();
    let minimal_json: Value =
        serde_json::from_str(&std::fs::read_to_string(minimal.join("template.json")).unwrap()).unwrap();
    let dir = data.join("templates").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let kernel_path = match kernel {
        Some(bytes) => {
            std::fs::write(dir.join("vmlinux"), bytes).unwrap();
            "vmlinux".to_string()
        }
        None => minimal.join(minimal_json["kernel"].as_str().unwrap()).display().to_string(),
    };
    let initrd = minimal_json["initrd"].as_str().map(|i| minimal.join(i).display().to_string());
    let rootfs = disk.map(|bytes| {
        std::fs::write(dir.join("rootfs.img"), bytes).unwrap();
        "rootfs.img"
    });
    let json = serde_json::json!({
        "name": name, "kernel": kernel_path, "initrd": initrd, "rootfs": rootfs,
        "cmdline": cmdline, "init": "agent", "agent_version": "test", "created_unix": 0,
    });
    std::fs::write(dir.join("template.json"), json.to_string()).unwrap();
}

#[test]
fn vm_create_with_a_garbage_kernel_fails_and_leaves_nothing() {
    let data = short_tempdir();
    custom_template(data.path(), "junk", Some(&[0x42; 4096]), "");
    let atoll = Atoll::with_data_dir(data.path());
    let err = atoll.fails(&["create", "--template", "junk", "--timeout", "60s"]);
    assert!(err.contains("exited while booting") || err.contains("did not answer over its link"), "{err}");
    // QEMU's own words (its stderr, which the network helper writes to `qemu.log`) are
    // in the message: the helper had written them by the time atoll read the file.
    assert!(err.contains("QEMU said: qemu: ") && !err.contains("QEMU said: (empty)"), "{err}");
    assert_eq!(atoll.sandbox_dirs(), Vec::<PathBuf>::new(), "a failed create leaves no sandbox directory");
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
    assert_eq!(atoll.states(), vec![]);
}

#[test]
fn vm_create_that_never_becomes_ready_times_out_and_leaves_nothing() {
    let data = short_tempdir();
    // The kernel boots, but init is `sleep` instead of the agent: no READY ever comes.
    custom_template(data.path(), "sleeper", None, "rdinit=/bin/sleep -- 600");
    let atoll = Atoll::with_data_dir(data.path());
    let err = atoll.fails(&["create", "--template", "sleeper", "--timeout", "20s"]);
    assert!(err.contains("did not answer over its link within 20 s"), "{err}");
    assert!(err.contains("--timeout"), "the message says how to wait longer: {err}");
    assert_eq!(atoll.sandbox_dirs(), Vec::<PathBuf>::new(), "a failed create leaves no sandbox directory");
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
}

/// A QEMU that makes no progress while booting (no CPU, no QMP reply: here stopped
/// with SIGSTOP) is wedged: `atoll create` notices, says so, removes that VM with its
/// net-helper and boots another, which works. (A stalled vhost-device-vsock once did
/// this in CI; atoll's VMs no longer have one, and the watchdog stays for any other hang.)
#[test]
fn vm_create_that_wedges_while_booting_is_booted_again() {
    let atoll = Atoll::new();
    let child = atoll
        .command(&["--json", "create", "--name", "wedge", "--timeout", BOOT_TIMEOUT])
        .spawn()
        .expect("spawn atoll create");
    // Stop the first QEMU once it is in the record (it is booting).
    let first_vm = || {
        atoll.sandbox_dirs().iter().find_map(|d| {
            let record = std::fs::read_to_string(d.join("sandbox.json")).unwrap_or_default();
            let record = serde_json::from_str::<Value>(&record).ok()?;
            Some((record["qemu"]["pid"].as_u64()?, record["net_helper"]["pid"].as_u64()))
        })
    };
    let mut stopped = None;
    wait_until("QEMU to start", HANG_GUARD, || {
        stopped = first_vm();
        stopped.is_some()
    });
    let (stopped, helper) = stopped.unwrap();
    Command::new("kill").args(["-STOP", &stopped.to_string()]).status().expect("run kill");

    let out = wait_bounded(child, HANG_GUARD).expect("atoll create hung");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "create failed: {stderr}");
    assert!(stderr.contains("wedged while booting") && stderr.contains("once more"), "{stderr}");
    let created: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(created["state"], "running");
    assert_ne!(created["qemu_pid"].as_u64(), Some(stopped), "the second boot has its own QEMU");
    assert!(pid_gone(stopped), "the wedged QEMU (pid {stopped}) was not killed");
    if let Some(helper) = helper {
        assert!(pid_gone(helper), "the wedged VM's net-helper (pid {helper}) was not killed");
    }
    assert_eq!(atoll.sandbox_dirs().len(), 1, "the wedged VM's directory was removed");
    let out = atoll.run(&["-s", "wedge", "exec", "--", "echo", "alive"]);
    assert_eq!(text(&out.stdout), "alive\n", "{}", text(&out.stderr));
    atoll.json(&["kill", "wedge"]);
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
}

#[test]
fn sandbox_create_refuses_a_missing_template_and_bad_resources_before_starting_anything() {
    let data = short_tempdir();
    let atoll = Atoll::with_data_dir(data.path());
    let err = atoll.fails(&["create", "--template", "nope"]);
    assert!(err.contains("template `nope` is not installed") && err.contains("rootfs/setup.sh"), "{err}");
    // A size out of range is a usage error (exit 2), like one clap refuses.
    let out = atoll.run(&["create", "--memory", "1"]);
    let err = text(&out.stderr);
    assert!(err.contains("--memory 1 MiB is out of range") && out.status.code() == Some(2), "{err}");
    let err = atoll.fails(&["create", "--name", "../x"]);
    assert!(err.contains("not a valid sandbox name"), "{err}");
    let err = atoll.fails(&["kill", "ghost"]);
    assert!(err.contains("no sandbox is called `ghost`"), "{err}");
    assert_eq!(atoll.sandbox_dirs(), Vec::<PathBuf>::new());
}

/// An ext4 image of the minimal template's initramfs tree plus `/marker-from-disk`: a
/// disk template whose init (the same atoll-agent) runs from the disk after switch_root.
fn ext4_image_of_minimal(work: &Path, image: &Path) {
    let minimal = minimal_template_dir();
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(minimal.join("template.json")).unwrap()).unwrap();
    let initrd = minimal.join(json["initrd"].as_str().expect("minimal boots from an initramfs"));
    let tree = work.join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    let unpack = format!(
        "{} '{}' | cpio -idm --quiet",
        if initrd.extension().is_some_and(|e| e == "gz") { "gzip -dc" } else { "cat" },
        initrd.display()
    );
    let st = Command::new("sh").arg("-c").arg(&unpack).current_dir(&tree).status().unwrap();
    assert!(st.success(), "could not unpack {}", initrd.display());
    std::fs::write(tree.join("marker-from-disk"), "booted from the disk\n").unwrap();
    let st =
        Command::new("mkfs.ext4").args(["-q", "-F", "-d"]).arg(&tree).arg(image).arg("96M").status().unwrap();
    assert!(st.success(), "mkfs.ext4 failed");
}

#[test]
fn vm_disk_template_boots_on_a_copy_on_write_overlay_and_stays_untouched() {
    let data = short_tempdir();
    custom_template_with_disk(data.path(), "disk", None, "", Some(b""));
    let image = data.path().join("templates/disk/rootfs.img");
    ext4_image_of_minimal(data.path(), &image);
    let pristine = std::fs::read(&image).unwrap();
    let atoll = Atoll::with_data_dir(data.path());
    let created = atoll.create_with("cow", &["--template", "disk"]);
    assert_eq!(created["state"], "running");
    let overlay = PathBuf::from(created["dir"].as_str().unwrap()).join("vm/rootfs.qcow2");
    let qemu_pid = created["qemu_pid"].as_u64().unwrap();
    let cmdline = std::fs::read(format!("/proc/{qemu_pid}/cmdline")).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(
        cmdline.contains(&format!("file={},format=qcow2", overlay.display())),
        "QEMU runs on the overlay: {cmdline}"
    );
    assert!(!cmdline.contains(&image.display().to_string()), "QEMU never opens the template's image itself");
    let info =
        Command::new("qemu-img").arg("info").arg("--output=json").arg("-U").arg(&overlay).output().unwrap();
    assert!(info.status.success(), "qemu-img info: {}", text(&info.stderr));
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(info["backing-filename"].as_str().map(PathBuf::from), Some(image.clone()), "{info}");

    // The guest's root is the disk, and it can write to it.
    let out = atoll.run(&["-s", "cow", "cat", "/marker-from-disk"]);
    assert!(out.status.success(), "cat failed: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "booted from the disk\n");
    atoll.json(&["-s", "cow", "mkdir", "/made-in-the-guest"]);

    atoll.json(&["kill", "cow"]);
    assert!(std::fs::read(&image).unwrap() == pristine, "the template's image is never modified");
    assert_eq!(atoll.sandbox_dirs(), Vec::<PathBuf>::new());
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
}

#[test]
fn vm_interrupted_create_kills_and_removes_everything() {
    let data = short_tempdir();
    custom_template(data.path(), "sleeper", None, "rdinit=/bin/sleep -- 600");
    let atoll = Atoll::with_data_dir(data.path());
    let mut child = Command::new(atoll_tests::workspace_bin("atoll"))
        .env("ATOLL_STATE_DIR", atoll.state_dir())
        .env("ATOLL_DATA_DIR", data.path())
        .args(["create", "--template", "sleeper", "--timeout", "600s"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn atoll create");
    // Wait until QEMU runs: its pid is in the record.
    let qemu_started = || {
        atoll.sandbox_dirs().iter().any(|d| {
            let record = std::fs::read_to_string(d.join("sandbox.json")).unwrap_or_default();
            serde_json::from_str::<Value>(&record).is_ok_and(|r| r["qemu"].is_object())
        })
    };
    while !qemu_started() {
        assert!(child.try_wait().unwrap().is_none(), "atoll create ended before QEMU started");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!processes_mentioning(atoll.state_dir()).is_empty(), "QEMU and the net-helper run");
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("run kill");
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "an interrupted create fails");
    assert!(text(&out.stderr).contains("interrupted"), "{}", text(&out.stderr));
    assert_eq!(
        atoll.sandbox_dirs(),
        Vec::<PathBuf>::new(),
        "an interrupted create leaves no sandbox directory"
    );
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
}

#[test]
fn vm_concurrent_creates_get_distinct_names_and_addresses() {
    let atoll = Atoll::new();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| atoll.json(&["create", "--timeout", BOOT_TIMEOUT]));
        let b = s.spawn(|| atoll.json(&["create", "--timeout", BOOT_TIMEOUT]));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_ne!(a["name"], b["name"]);
    assert_ne!(a["address"], b["address"]);
    let mut states = atoll.states();
    states.sort();
    assert_eq!(states.len(), 2);
    assert!(states.iter().all(|(_, st)| st == "running"), "{states:?}");
    // Each helper has a secrets runner beside it, outside its jail; a runner that does
    // not end by itself when its helper goes (stopped here) is ended by `kill` all the same.
    let runners: Vec<String> =
        processes_mentioning(atoll.state_dir()).into_iter().filter(|p| p.contains("secret-runner")).collect();
    assert_eq!(runners.len(), 2, "{runners:?}");
    for r in &runners {
        let pid = r.split(':').next().unwrap();
        assert!(Command::new("kill").args(["-STOP", pid]).status().unwrap().success());
    }
    let removed = atoll.json(&["kill", "--all"]);
    assert_eq!(removed.as_array().map(Vec::len), Some(2));
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
    assert_eq!(atoll.sandbox_dirs(), Vec::<PathBuf>::new());
}
