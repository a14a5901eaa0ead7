//! Pausing a sandbox while its agent link is busy: the guest stops, the host side keeps
//! draining what the guest had already sent, and after `resume` both the call in
//! flight and new calls work; a paused sandbox is also killed cleanly. And a long
//! pause leaves no lockup or stall reports in the guest's kernel log.
//!
//! This once killed the sandbox, when atoll reached its agent over vhost-device-vsock:
//! pausing stopped the vhost-user rings, and the backend ended its worker thread when
//! host-side traffic arrived while they were stopped, so nothing reached the agent
//! after `cont`. The agent link (a virtio-serial port inside QEMU) must hold the same.

use std::io::Read;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use atoll_tests::processes_mentioning;
use atoll_tests::vm::{Atoll, HANG_GUARD, text, wait_bounded, wait_until};

/// How much the guest prints: far more than the pipe, socket and backend buffers hold.
const OUTPUT: usize = 30_000_000;

#[test]
fn vm_pause_with_output_in_flight_then_resume_keeps_the_sandbox_working() {
    let atoll = Atoll::new();
    atoll.create("busy");

    // Nobody reads the output at first, so it backs up from the pipe through atoll, the
    // net-helper's link and QEMU's virtio-serial port into the guest.
    let mut streaming = atoll
        .command(&["-s", "busy", "exec", "--", "sh", "-c", &format!("yes | head -c {OUTPUT}")])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn atoll exec");
    let mut stdout = streaming.stdout.take().unwrap();
    let received = Arc::new(AtomicUsize::new(0));
    let (start_reading, reader_go) = std::sync::mpsc::channel::<()>();
    let reader = {
        let received = received.clone();
        std::thread::spawn(move || {
            reader_go.recv().unwrap();
            let mut buf = vec![0; 64 * 1024];
            loop {
                match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => received.fetch_add(n, Ordering::Relaxed),
                };
            }
        })
    };
    std::thread::sleep(Duration::from_secs(2));

    assert_eq!(atoll.json(&["pause", "busy"])["state"], "paused");
    // Now drain what is buffered on the host side while the guest stands still.
    start_reading.send(()).unwrap();
    wait_until("the paused sandbox's buffered output to arrive", Duration::from_secs(30), || {
        received.load(Ordering::Relaxed) > 0
    });
    std::thread::sleep(Duration::from_secs(2));
    let while_paused = received.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(received.load(Ordering::Relaxed), while_paused, "a paused guest kept printing");
    assert!(while_paused < OUTPUT, "the command finished before the pause; the test proves nothing");

    let resumed = atoll.run(&["resume", "busy"]);
    assert!(resumed.status.success(), "resume after a busy pause failed: {}", text(&resumed.stderr));

    // The call that was in flight finishes with every byte.
    let done = wait_bounded(streaming, HANG_GUARD).expect("the exec in flight hung after resume");
    reader.join().unwrap();
    assert!(done.status.success(), "the exec in flight failed: {}", text(&done.stderr));
    assert_eq!(received.load(Ordering::Relaxed), OUTPUT);

    // And new calls reach the agent.
    let out = atoll.run(&["-s", "busy", "--connect-timeout", "30s", "exec", "--", "echo", "alive"]);
    assert!(out.status.success(), "exec after resume failed: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "alive\n");

    // A paused sandbox is killed like a running one: its frozen QEMU is let go first.
    assert_eq!(atoll.json(&["pause", "busy"])["state"], "paused");
    let removed = atoll.json(&["kill", "busy"]);
    assert_eq!(removed[0]["was"], "paused");
    assert_eq!(processes_mentioning(atoll.state_dir()), Vec::<String>::new());
    assert_eq!(atoll.states(), vec![]);
}

/// Longer than the guest kernel's soft-lockup (20 s) and RCU-stall (21 s) thresholds.
const LONG_PAUSE: Duration = Duration::from_secs(26);

#[test]
fn vm_a_long_pause_leaves_no_lockup_or_stall_reports_in_the_guest() {
    let atoll = Atoll::new();
    atoll.create("still");
    assert_eq!(atoll.json(&["pause", "still"])["state"], "paused");
    std::thread::sleep(LONG_PAUSE);
    let resumed = atoll.run(&["resume", "still"]);
    assert!(resumed.status.success(), "resume failed: {}", text(&resumed.stderr));

    // The frozen guest finds its clock 26 s ahead; its detectors must not call that a
    // hang (atoll boots its guests with them off: it freezes guests by design).
    let out = atoll.run(&["-s", "still", "exec", "--", "dmesg"]);
    assert!(out.status.success(), "dmesg failed: {}", text(&out.stderr));
    let log = text(&out.stdout);
    let reports: Vec<&str> = log
        .lines()
        .filter(|l| {
            ["soft lockup", "detected stall", "stall on CPU", "kthread starved", "blocked for more than"]
                .iter()
                .any(|m| l.contains(m))
        })
        .collect();
    assert!(reports.is_empty(), "the guest reported a hang after a pause: {reports:#?}");
}
