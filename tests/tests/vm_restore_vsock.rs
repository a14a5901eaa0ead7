//! A restore whose vsock backend stops serving. vhost-device-vsock 0.3.0 now and then
//! loses the thread that accepts and reads host connections (`vring_worker`) while a
//! restored guest sets its vsock device up; the kernel then goes on queueing
//! connections that nothing reads. Here the test freezes that thread (ptrace-stopped:
//! the process and its other threads, which serve QEMU, run on) in the restore's
//! backend as soon as it exists. sbx reaches the agent over its agent link, not vsock,
//! so the restore must come up as a machine of its own on that same backend, answer
//! calls, and `sbx kill` must leave nothing.
//!
//! Needs root (ptrace of a process that is not our child) and the `minimal` template.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use sbx_tests::vm::{BOOT_TIMEOUT, HANG_GUARD, Sbx, text, wait_bounded, wait_until};
use sbx_tests::{pid_gone, processes_mentioning};

#[test]
fn vm_restore_needs_no_vsock_backend_that_reads() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("skipped: freezing a thread of vhost-device-vsock needs root");
        return;
    }
    let sbx = Sbx::new();
    sbx.json(&["template", "snapshot", "minimal", "--net", "none", "--timeout", BOOT_TIMEOUT]);
    assert!(processes_mentioning(sbx.state_dir()).is_empty(), "the snapshot's sandbox is gone");

    let state = sbx.state_dir().to_string_lossy().into_owned();
    let (frozen_tx, frozen_rx) = mpsc::channel();
    let freezer = std::thread::spawn(move || freeze_first_worker(&state, &frozen_tx));
    let create = sbx
        .command(&["-v", "create", "--name", "r1", "--net", "none", "--timeout", BOOT_TIMEOUT])
        .spawn()
        .unwrap();
    let out = wait_bounded(create, HANG_GUARD).expect("sbx create hung");
    let frozen = frozen_rx.recv_timeout(Duration::from_secs(1)).expect("the restore's backend was frozen");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let inspected = sbx.json(&["inspect", "r1"]);
    assert_eq!(inspected["started_from"], "template snapshot", "{inspected}");
    assert_eq!(inspected["agent"]["hostname"], "r1", "{inspected}");
    assert_eq!(inspected["vhost_pid"].as_u64(), Some(frozen), "the frozen backend is not replaced");
    let out = sbx.run(&["-s", "r1", "exec", "--", "hostname"]);
    assert_eq!(text(&out.stdout), "r1\n", "{}", text(&out.stderr));

    sbx.json(&["kill", "r1"]);
    wait_until("the frozen backend to end", Duration::from_secs(30), || pid_gone(frozen));
    freezer.join().unwrap();
    assert!(processes_mentioning(sbx.state_dir()).is_empty(), "{:?}", processes_mentioning(sbx.state_dir()));
}

/// Finds the first vhost-device-vsock started for `state` and ptrace-stops its
/// `vring_worker` thread; sends the backend's pid once it is frozen, then reaps the
/// thread when the backend ends (a traced thread stays a zombie until its tracer waits
/// for it). This thread is the tracer, so it lives until then.
fn freeze_first_worker(state: &str, frozen: &mpsc::Sender<u64>) {
    let deadline = Instant::now() + HANG_GUARD;
    let (pid, tid) = loop {
        assert!(Instant::now() < deadline, "no vhost-device-vsock with a vring_worker thread appeared");
        if let Some(found) = backend_worker(state) {
            break found;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: plain ptrace requests on a thread id, with null address and data.
    let seized = unsafe {
        libc::ptrace(libc::PTRACE_SEIZE, tid, null, null) == 0
            && libc::ptrace(libc::PTRACE_INTERRUPT, tid, null, null) == 0
    };
    assert!(seized, "ptrace of thread {tid}: {}", std::io::Error::last_os_error());
    frozen.send(u64::try_from(pid).unwrap()).unwrap();
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status to a live c_int.
        let got = unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
        if got == -1 || libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            return;
        }
    }
}

/// (pid, tid) of the `vring_worker` thread of a vhost-device-vsock whose command line
/// names `state`.
fn backend_worker(state: &str) -> Option<(i32, i32)> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if !cmdline.contains("vhost-device-vsock") || !cmdline.contains(state) {
            continue;
        }
        for task in std::fs::read_dir(entry.path().join("task")).ok()?.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim() == "vring_worker" {
                return Some((pid, task.file_name().to_string_lossy().parse().ok()?));
            }
        }
    }
    None
}
