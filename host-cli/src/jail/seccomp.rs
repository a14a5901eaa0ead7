//! The network helper's seccomp filter, a deny-list it installs on itself (every thread,
//! `SECCOMP_FILTER_FLAG_TSYNC`) as it starts, with `PR_SET_NO_NEW_PRIVS`. Firecracker's
//! `seccompiler` compiles it.
//!
//! A deny-list, not an allow-list: the helper is tokio, rustls, hickory and the atoll-net
//! stack, whose exact system calls change with each of their releases; an allow-list
//! that misses one kills the sandbox's network at some rare path. What is denied is what
//! a helper taken over by a hostile guest would use to leave its jail or reach the
//! kernel's less-travelled parts: running programs, debugging other processes, mounts
//! and namespaces, changing its ids or capabilities, loading kernels, modules or BPF,
//! the kernel keyring, and more ([`DENIED`]). Denied calls fail with `EPERM`
//! (`clone3`, whose flags a filter cannot read, with `ENOSYS`, so the C library falls
//! back to `clone`, whose namespace flags are denied). Signals: only SIGCONT (and 0)
//! may be sent, and none through `fcntl`/`ioctl` owner settings or `prlimit64` on
//! another process; the helper is PID 1 of a namespace of its own anyway, where no other
//! process is (`jail::helper`). x32 system calls (numbers with bit
//! 30 set), which would name the same calls by other numbers, are all denied.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

/// Why the filter could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("could not install the network helper's seccomp filter: {0}")]
pub struct SeccompError(String);

/// The calls the helper never makes, denied with `EPERM`.
pub const DENIED: &[(&str, i64)] = &[
    ("execve", libc::SYS_execve),
    ("execveat", libc::SYS_execveat),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("open_tree", libc::SYS_open_tree),
    ("move_mount", libc::SYS_move_mount),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("setuid", libc::SYS_setuid),
    ("setgid", libc::SYS_setgid),
    ("setreuid", libc::SYS_setreuid),
    ("setregid", libc::SYS_setregid),
    ("setresuid", libc::SYS_setresuid),
    ("setresgid", libc::SYS_setresgid),
    ("setfsuid", libc::SYS_setfsuid),
    ("setfsgid", libc::SYS_setfsgid),
    ("setgroups", libc::SYS_setgroups),
    ("capset", libc::SYS_capset),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("reboot", libc::SYS_reboot),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("syslog", libc::SYS_syslog),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("sethostname", libc::SYS_sethostname),
    ("setdomainname", libc::SYS_setdomainname),
    ("iopl", libc::SYS_iopl),
    ("ioperm", libc::SYS_ioperm),
    ("personality", libc::SYS_personality),
    ("vhangup", libc::SYS_vhangup),
    ("uselib", libc::SYS_uselib),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("kcmp", libc::SYS_kcmp),
    ("process_madvise", libc::SYS_process_madvise),
];

/// Calls denied only with one of these values in one argument: (call, argument index,
/// values). `fcntl`'s and `ioctl`'s ways to have the kernel signal another process
/// (`F_SETOWN`, `F_SETSIG`, `F_SETOWN_EX`, `FIOSETOWN`, `SIOCSPGRP`) and `prlimit64` on
/// another process are separate from [`SIGNALS`]' rule.
const DENIED_ARGS: &[(i64, u8, &[u64])] = &[
    (libc::SYS_fcntl, 1, &[F_SETOWN, F_SETSIG, F_SETOWN_EX]),
    (libc::SYS_ioctl, 1, &[FIOSETOWN, SIOCSPGRP]),
];
// Linux's numbers (asm-generic/fcntl.h, asm-generic/sockios.h); not all are in `libc`.
const F_SETOWN: u64 = 8;
const F_SETSIG: u64 = 10;
const F_SETOWN_EX: u64 = 15;
const FIOSETOWN: u64 = 0x8901;
const SIOCSPGRP: u64 = 0x8902;

/// The namespace flags `clone` may not be given.
const NEW_NAMESPACES: &[u64] = &[
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// The calls that send a signal, with the index of their signal argument: the helper
/// sends none but SIGCONT and 0 (is it alive?).
const SIGNALS: &[(i64, u8)] = &[
    (libc::SYS_kill, 1),
    (libc::SYS_tkill, 1),
    (libc::SYS_tgkill, 2),
    (libc::SYS_pidfd_send_signal, 1),
    (libc::SYS_rt_sigqueueinfo, 1),
    (libc::SYS_rt_tgsigqueueinfo, 2),
];

/// x32 system calls have this bit set in their number.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The compiled filter.
pub fn program() -> Result<BpfProgram, SeccompError> {
    let err = |e: &dyn std::fmt::Display| SeccompError(e.to_string());
    let arch = std::env::consts::ARCH.try_into().map_err(|e| err(&e))?;
    let eperm = SeccompAction::Errno(libc::EPERM as u32);
    // An empty rule list matches the call whatever its arguments.
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED.iter().map(|&(_, nr)| (nr, Vec::new())).collect();
    let clone_rules = NEW_NAMESPACES
        .iter()
        .map(|&flag| {
            let cond = SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(flag), flag)
                .map_err(|e| err(&e))?;
            SeccompRule::new(vec![cond]).map_err(|e| err(&e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    for &(nr, arg, values) in DENIED_ARGS {
        let each = values
            .iter()
            .map(|&v| {
                let cond = SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, v)
                    .map_err(|e| err(&e))?;
                SeccompRule::new(vec![cond]).map_err(|e| err(&e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        rules.insert(nr, each);
    }
    // prlimit64 on another process (pid 0 is this one: getrlimit/setrlimit).
    let other =
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, 0).map_err(|e| err(&e))?;
    rules.insert(libc::SYS_prlimit64, vec![SeccompRule::new(vec![other]).map_err(|e| err(&e))?]);
    for &(nr, arg) in SIGNALS {
        let ne = |v: u64| {
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, v).map_err(|e| err(&e))
        };
        let rule = SeccompRule::new(vec![ne(0)?, ne(libc::SIGCONT as u64)?]).map_err(|e| err(&e))?;
        rules.insert(nr, vec![rule]);
    }
    let denied = SeccompFilter::new(rules, SeccompAction::Allow, eperm, arch).map_err(|e| err(&e))?;
    let mut prog: BpfProgram = denied.try_into().map_err(|e: seccompiler::BackendError| err(&e))?;
    // clone3 (its flags are in memory a filter cannot read) gets ENOSYS, not EPERM.
    let enosys = seccompiler::sock_filter { code: 0x06, jt: 0, jf: 0, k: 0x0005_0000 | libc::ENOSYS as u32 };
    let eperm_ret =
        seccompiler::sock_filter { code: 0x06, jt: 0, jf: 0, k: 0x0005_0000 | libc::EPERM as u32 };
    // Before the compiled program (classic BPF jumps are relative, so it is unchanged):
    // A = nr; nr >= x32 bit: EPERM; nr == clone3: ENOSYS.
    let clone3 = u32::try_from(libc::SYS_clone3).map_err(|e| err(&e))?;
    let head = [
        seccompiler::sock_filter { code: 0x20, jt: 0, jf: 0, k: 0 }, // ld [0] (nr)
        seccompiler::sock_filter { code: 0x35, jt: 2, jf: 0, k: X32_SYSCALL_BIT }, // jge x32 -> eperm
        seccompiler::sock_filter { code: 0x15, jt: 2, jf: 0, k: clone3 }, // jeq clone3 -> enosys
        seccompiler::sock_filter { code: 0x05, jt: 0, jf: 0, k: 2 }, // ja past both returns
        eperm_ret,
        enosys,
    ];
    prog.splice(0..0, head);
    Ok(prog)
}

/// Installs the filter on every thread of this process (and sets no-new-privs).
pub fn install() -> Result<(), SeccompError> {
    let prog = program()?;
    seccompiler::apply_filter_all_threads(&prog).map_err(|e| SeccompError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The filter compiles; in a child process, it denies what it lists and allows the
    /// rest (a process that ran it cannot start programs, make namespaces, or send a
    /// signal other than SIGCONT: here, kill itself).
    #[test]
    fn denies_exec_and_namespaces_allows_the_rest() {
        let prog = program().unwrap();
        assert!(prog.len() > DENIED.len());
        // SAFETY: the child only makes raw system calls and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = (|| {
                if install().is_err() {
                    return 10;
                }
                // SAFETY: raw system calls with valid (or null) arguments.
                unsafe {
                    let path = c"/bin/true".as_ptr();
                    let argv = [path, std::ptr::null()];
                    if libc::execve(path, argv.as_ptr(), std::ptr::null()) != -1
                        || *libc::__errno_location() != libc::EPERM
                    {
                        return 11;
                    }
                    if libc::unshare(libc::CLONE_NEWUSER) != -1 || libc::setuid(0) != -1 {
                        return 12;
                    }
                    if libc::syscall(libc::SYS_clone3, 0, 0) != -1
                        || *libc::__errno_location() != libc::ENOSYS
                    {
                        return 13;
                    }
                    if libc::syscall(libc::SYS_getpid | i64::from(X32_SYSCALL_BIT)) != -1 {
                        return 14;
                    }
                    if libc::getpid() <= 0 || libc::syscall(libc::SYS_getppid) <= 0 {
                        return 15;
                    }
                    // On itself: if one went through, the child dies and the test fails.
                    let me = libc::getpid();
                    if libc::kill(me, libc::SIGKILL) != -1 || libc::kill(me, libc::SIGTERM) != -1 {
                        return 16;
                    }
                    if libc::kill(libc::getppid(), 0) != 0 || libc::kill(me, libc::SIGCONT) != 0 {
                        return 17;
                    }
                    // No signal through a file's owner, no limits of another process.
                    let mut fds = [0; 2];
                    if libc::pipe(fds.as_mut_ptr()) != 0
                        || libc::fcntl(fds[0], libc::F_SETOWN, libc::getppid()) != -1
                        || libc::fcntl(fds[0], 10 /* F_SETSIG */, libc::SIGKILL) != -1
                        || libc::fcntl(fds[0], libc::F_GETFL) < 0
                    {
                        return 18;
                    }
                    let mut lim = libc::rlimit64 { rlim_cur: 0, rlim_max: 0 };
                    if libc::prlimit64(libc::getppid(), libc::RLIMIT_NOFILE, std::ptr::null(), &mut lim) != -1
                        || libc::prlimit64(0, libc::RLIMIT_NOFILE, std::ptr::null(), &mut lim) != 0
                    {
                        return 19;
                    }
                }
                0
            })();
            // SAFETY: ends the forked child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "status {status}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "the check that failed (10..19)");
    }
}
