//! Telling a VM that wedged while booting from one that boots slowly.
//!
//! A QEMU whose main loop is stuck makes no progress at all: no guest CPU time, no
//! console output, and no reply on the QMP socket. It happened once in CI, in the first
//! second of a boot, when QEMU waited on a stalled vhost-user backend (atoll's VMs no
//! longer have one); a QEMU stopped with SIGSTOP shows the same picture. Such a VM
//! never recovers on its own, so [`crate::sandbox::create()`] boots it again instead of
//! waiting out its timeout.
//!
//! A booting guest keeps a host CPU busy. A guest that waits (systemd on a device
//! timeout) uses little CPU but QEMU still answers QMP. So a boot counts as wedged
//! only after [`STALL`] with almost no CPU time *and* no QMP reply in [`PROBE`].

use std::path::Path;
use std::time::{Duration, Instant};

use super::process::cpu_ticks;
use super::qmp;

/// How long QEMU must use almost no CPU before it is asked whether it still answers.
pub const STALL: Duration = Duration::from_secs(15);
/// How long QEMU gets to answer `query-status` then.
pub const PROBE: Duration = Duration::from_secs(5);
/// "Almost no CPU": 50 ms (clock ticks are 10 ms). An idle guest costs about 10 in
/// [`STALL`] under emulation, a wedged QEMU none.
const IDLE_TICKS: u64 = 5;
/// How often QEMU's CPU time is read.
const TICK: Duration = Duration::from_secs(1);

/// Returns once QEMU (`qemu_pid`, control socket `qmp_socket`) has wedged: [`STALL`]
/// without CPU time, then no QMP reply within [`PROBE`]. Pending for as long as QEMU
/// makes progress or answers; drop it when the boot ends another way.
pub async fn wedged(qemu_pid: u32, qmp_socket: &Path) {
    let mut last = (cpu_ticks(qemu_pid).unwrap_or(0), Instant::now());
    loop {
        tokio::time::sleep(TICK).await;
        let ticks = cpu_ticks(qemu_pid).unwrap_or(0);
        if ticks > last.0 + IDLE_TICKS {
            last = (ticks, Instant::now());
            continue;
        }
        if last.1.elapsed() < STALL {
            continue;
        }
        match tokio::time::timeout(PROBE, qmp::run(qmp_socket, "query-status")).await {
            // It answers: idle, not wedged. Look again after another STALL.
            Ok(Ok(_)) => last = (ticks, Instant::now()),
            // It exited: the caller notices that.
            _ if cpu_ticks(qemu_pid).is_none() => last = (ticks, Instant::now()),
            // No answer in time, or still no control socket to ask (a QEMU stopped
            // before it made one): its main loop is stuck.
            Err(_) | Ok(Err(_)) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_process_uses_ticks_and_a_sleeping_one_does_not() {
        let me = std::process::id();
        let before = cpu_ticks(me).expect("our own /proc/<pid>/stat");
        // Spin until the ticks pass the idle bound; on a loaded machine that may take
        // longer than its 50 ms, hence the generous cap.
        let start = Instant::now();
        while cpu_ticks(me).unwrap() <= before + IDLE_TICKS {
            assert!(start.elapsed() < Duration::from_secs(30), "30 s of spinning never showed as CPU time");
            for _ in 0..100_000 {
                std::hint::black_box(0u64.wrapping_add(1));
            }
        }
        let mut sleeper = std::process::Command::new("sleep").arg("1").spawn().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        assert!(cpu_ticks(sleeper.id()).unwrap() <= IDLE_TICKS);
        sleeper.wait().unwrap();
    }
}
