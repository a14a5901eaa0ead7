//! Whether the guest kernel's out-of-memory killer ended a command.
//!
//! A command the OOM killer ends just dies of SIGKILL, as if someone had sent it; the
//! kernel says why only in its log. The agent reads the kernel's count of OOM kills
//! (`oom_kill` in `/proc/vmstat`, Linux 4.13 and later) when a command starts and when
//! it ends: a command that died of SIGKILL (not from the agent's own timeout) while
//! that count rose was ended by the OOM killer.
//!
//! Why the counter and not the kernel log (`/dev/kmsg`, "Killed process PID"): the
//! counter is one small read of a file every guest kernel has, with a fixed format,
//! while the log is a ring buffer that may have wrapped, whose wording changes between
//! kernel versions and which a container may not let the agent read. What the counter
//! cannot tell is which process the kill hit: when two commands run at once, one is
//! OOM-killed and the other is SIGKILLed by hand at the same time, both are reported.

use super::Ended;

/// The kernel's count of OOM kills so far; `None` where it keeps none (no `/proc`,
/// kernels before 4.13).
pub fn kills_so_far() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").ok()?;
    parse_vmstat(&text)
}

fn parse_vmstat(text: &str) -> Option<u64> {
    text.lines().find_map(|line| line.strip_prefix("oom_kill ")?.trim().parse().ok())
}

/// True when a command that ended as `ended` was ended by the OOM killer, given the
/// kill counts at its start and at its end.
pub fn was_oom_killed(ended: Ended, timed_out: bool, before: Option<u64>, after: Option<u64>) -> bool {
    const SIGKILL: i32 = 9;
    let rose = matches!((before, after), (Some(b), Some(a)) if a > b);
    ended == Ended::Signal(SIGKILL) && !timed_out && rose
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_is_read_from_vmstat() {
        assert_eq!(parse_vmstat("pgfault 10\noom_kill 3\nnr_free_pages 5\n"), Some(3));
        assert_eq!(parse_vmstat("pgfault 10\n"), None);
    }

    #[test]
    fn only_a_sigkill_while_the_count_rose_is_an_oom_kill() {
        let kill = Ended::Signal(9);
        assert!(was_oom_killed(kill, false, Some(1), Some(2)));
        assert!(!was_oom_killed(kill, false, Some(2), Some(2)), "the count did not rise");
        assert!(!was_oom_killed(kill, true, Some(1), Some(2)), "the agent's timeout killed it");
        assert!(!was_oom_killed(Ended::Code(137), false, Some(1), Some(2)));
        assert!(!was_oom_killed(kill, false, None, None), "no counter, no claim");
    }
}
