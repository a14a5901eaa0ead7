//! Copies out of a guest on a host without `openat2` (Linux before 5.6), made on this
//! kernel: the real `atoll` runs under a seccomp filter that makes `openat2` fail with
//! ENOSYS, as an old kernel does (seccompiler builds it, the test installs it in the
//! child between fork and exec). A folder copy, whose entries are created only through
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, fails closed with a message that
//! says so and writes nothing; what the message offers instead (a single file, the
//! zip with `atoll download`) works under the same filter.

mod cli_util;
mod hostile_util;

use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};

use cli_util::atoll_cmd;
use hostile_util::{Host, Hostile, honest_zip};
use seccompiler::{BpfProgram, SeccompAction, SeccompFilter};

/// A filter that answers every `openat2` with ENOSYS and lets all else through.
fn no_openat2() -> BpfProgram {
    let rules = [(libc::SYS_openat2, vec![])].into_iter().collect();
    let arch = std::env::consts::ARCH.try_into().expect("an architecture seccompiler knows");
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(u32::try_from(libc::ENOSYS).unwrap()),
        arch,
    )
    .unwrap();
    filter.try_into().unwrap()
}

/// Runs `cmd` under `filter` (installed in the child before it runs atoll).
fn run_under(mut cmd: Command, filter: &BpfProgram) -> Output {
    let filter = filter.clone();
    // SAFETY: between fork and exec this only calls prctl and seccomp (seccompiler's
    // apply_filter: no allocation, no lock), both async-signal-safe.
    unsafe {
        cmd.pre_exec(move || seccompiler::apply_filter(&filter).map_err(std::io::Error::other));
    }
    cmd.stdin(Stdio::null()).output().expect("run atoll")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn without_openat2_a_folder_copy_fails_closed_and_the_rest_works() {
    let filter = no_openat2();
    let zips = tempfile::tempdir().unwrap();
    let zip_path = honest_zip(zips.path());
    let agent = Hostile::start("zip", Some(&zip_path));

    let host = Host::new();
    let dst = host.dst();
    let out = run_under(atoll_cmd(&agent.addr(), &["cp", ":/d", dst.to_str().unwrap()]), &filter);
    assert!(!out.status.success(), "a folder copied without openat2");
    let err = stderr(&out);
    for says in ["this kernel has no openat2 (Linux 5.6 or later)", "nothing was extracted", "atoll download"]
    {
        assert!(err.contains(says), "the message does not say `{says}`: {err}");
    }
    host.untouched("a folder copy without openat2");

    // The same copy without the filter lands: the filter is what refused it.
    let out = atoll_cmd(&agent.addr(), &["cp", ":/d", dst.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read(dst.join("a/f.txt")).unwrap(), b"honest\n");

    // What the message offers instead works under the filter: the zip itself, and a file.
    let host = Host::new();
    let zip_out = host.root.path().join("host/d.zip");
    let out =
        run_under(atoll_cmd(&agent.addr(), &["download", "/d", "-o", zip_out.to_str().unwrap()]), &filter);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read(&zip_out).unwrap(), std::fs::read(&zip_path).unwrap());
    let file_agent = Hostile::start("file", Some(std::path::Path::new("10")));
    let out = run_under(atoll_cmd(&file_agent.addr(), &["cp", ":/f", host.dst().to_str().unwrap()]), &filter);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read(host.dst()).unwrap(), b"xxxxxxxxxx");
}
