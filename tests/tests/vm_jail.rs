//! QEMU's jail, checked from where an attacker would stand, on one booted VM with a
//! read-write shared git repository: from the host, QEMU runs under seccomp (mode 2),
//! not as root (as the share's owner, when atoll runs as root as CI does), with no
//! capabilities, in mount, PID, network, IPC and UTS namespaces of its own, with no
//! token in its environment (nor in the network helper's), in the sandbox's cgroup with
//! a memory limit, its share bound `nosuid,nodev`; and from inside the guest as root,
//! the git config plant (fsmonitor), a hook plant, an editor task plant and renaming
//! `.git` away all fail, while the guest can still write objects and the index, and a
//! host `git status` afterwards runs nothing. After `atoll kill` the cgroup is gone.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use atoll_tests::vm::{Atoll, HANG_GUARD, short_tempdir, text, wait_bounded};

/// An uid nobody on the host has: the shared repository's owner, whom QEMU runs as.
const OWNER: u32 = 4242;
/// A secret in atoll's environment that must not reach QEMU or the helper.
const SECRET: &str = "jail-test-secret-5c1f";

fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    // safe.directory: the repository is another user's; git must still read its config,
    // which is what the attack needs.
    let out = Command::new("git")
        .args(["-c", "safe.directory=*", "-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .env_remove("GIT_DIR")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    out
}

fn status_field(pid: u64, key: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

fn chown_tree(path: &Path, uid: u32) {
    let out = Command::new("chown").args(["-R", &format!("{uid}:{uid}")]).arg(path).output().unwrap();
    assert!(out.status.success(), "chown: {}", text(&out.stderr));
}

#[test]
fn vm_jail_walls_hold_from_the_host_and_from_a_root_guest() {
    let host = short_tempdir();
    let repo = host.path().join("repo");
    std::fs::create_dir_all(repo.join(".vscode")).unwrap();
    std::fs::write(repo.join("README"), "hello\n").unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "README"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    let as_root = rustix::process::geteuid().is_root();
    if as_root {
        chown_tree(&repo, OWNER);
    }
    let config_before = std::fs::read(repo.join(".git/config")).unwrap();
    let pwned = host.path().join("PWNED");

    let atoll = Atoll::new();
    let mount = format!("{}:/work:rw", repo.display());
    let mut cmd = atoll.command(&[
        "--json",
        "create",
        "--name",
        "jailed",
        "--timeout",
        "240s",
        "--net",
        "none",
        "--mount",
        &mount,
    ]);
    cmd.env("ATOLL_MCP_TOKEN", SECRET).env("AWS_SECRET_ACCESS_KEY", SECRET);
    let out = wait_bounded(cmd.spawn().unwrap(), HANG_GUARD).expect("atoll create hung");
    assert!(out.status.success(), "create: {}", text(&out.stderr));
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(atoll.state_dir().join(&id).join("sandbox.json")).unwrap())
            .unwrap();
    let qemu = record["qemu"]["pid"].as_u64().expect("QEMU's pid is recorded");
    let helper = record["net_helper"]["pid"].as_u64().expect("the helper's pid is recorded");

    // Seccomp, uid, capabilities.
    assert_eq!(status_field(qemu, "Seccomp"), "2", "QEMU runs without its seccomp filter");
    let uid = status_field(qemu, "Uid");
    if as_root {
        assert!(uid.split_whitespace().all(|u| u == OWNER.to_string()), "QEMU's uids: {uid}");
    } else {
        assert!(uid.split_whitespace().all(|u| u != "0"), "QEMU's uids: {uid}");
    }
    assert_eq!(status_field(qemu, "CapEff"), "0000000000000000");
    assert_eq!(status_field(qemu, "CapBnd"), "0000000000000000");

    // Namespaces of its own; QEMU is PID 1 of its PID namespace.
    for ns in ["mnt", "pid", "net", "ipc", "uts"] {
        let theirs = std::fs::read_link(format!("/proc/{qemu}/ns/{ns}")).unwrap();
        let ours = std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
        assert_ne!(theirs, ours, "QEMU shares the host's {ns} namespace");
    }
    assert!(status_field(qemu, "NSpid").ends_with("\t1"), "{}", status_field(qemu, "NSpid"));

    // No host secret in QEMU's or the helper's environment.
    for pid in [qemu, helper] {
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let env = text(&env);
        assert!(!env.contains(SECRET) && !env.contains("ATOLL_MCP_TOKEN"), "pid {pid} environment: {env:?}");
    }

    // The sandbox's cgroup, with a memory limit.
    let cgroups = std::fs::read_to_string(format!("/proc/{qemu}/cgroup")).unwrap();
    let suffix = format!("/atoll/{id}");
    let memory_dir = if let Some(line) = cgroups.lines().find(|l| l.split(':').nth(1) == Some("memory")) {
        assert!(line.ends_with(&suffix), "QEMU is not in its sandbox's memory cgroup: {cgroups}");
        Path::new("/sys/fs/cgroup/memory").join(format!("atoll/{id}")).join("memory.limit_in_bytes")
    } else {
        let line = cgroups.lines().find(|l| l.starts_with("0::")).expect("a cgroup v2 line");
        assert!(line.ends_with(&suffix), "QEMU is not in its sandbox's cgroup: {cgroups}");
        Path::new("/sys/fs/cgroup").join(format!("atoll/{id}")).join("memory.max")
    };
    let limit: u64 = std::fs::read_to_string(&memory_dir).unwrap().trim().parse().unwrap();
    assert!((512 << 20..=4 << 30).contains(&limit), "memory limit {limit}");

    // The share is nosuid,nodev in QEMU's view; .git/config is read-only there.
    let mountinfo = std::fs::read_to_string(format!("/proc/{qemu}/mountinfo")).unwrap();
    let options = |point: &Path| -> String {
        let p = point.display().to_string();
        mountinfo
            .lines()
            .rfind(|l| l.split(' ').nth(4) == Some(p.as_str()))
            .unwrap_or_else(|| panic!("{p} is not a mount point in QEMU's namespace:\n{mountinfo}"))
            .split(' ')
            .nth(5)
            .unwrap()
            .to_string()
    };
    let share = options(&repo);
    assert!(share.contains("nosuid") && share.contains("nodev"), "share options {share}");
    assert!(options(&repo.join(".git/config")).split(',').any(|o| o == "ro"));
    assert!(!mountinfo.contains(" /root "), "QEMU sees the host's /root");

    // `atoll info` says which walls stand.
    let info = atoll.run(&["-s", "jailed", "info"]);
    assert!(text(&info.stdout).contains("jail:     seccomp"), "{}", text(&info.stdout));

    // From inside, as root: each plant fails and says why.
    let attack = |script: &str| {
        let out = atoll.run(&["-s", "jailed", "exec", "--", "sh", "-c", script]);
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let plant = format!(
        "printf '[core]\\n\\tfsmonitor = \"touch {}; false\"\\n' >> /work/.git/config",
        pwned.display()
    );
    let (code, _, err) = attack(&plant);
    assert_ne!(code, Some(0), "the guest wrote .git/config");
    assert!(err.contains("Read-only file system"), "{err}");
    let (code, _, err) =
        attack("echo 'touch /tmp/x' > /work/.git/hooks/pre-commit && chmod +x /work/.git/hooks/pre-commit");
    assert_ne!(code, Some(0), "the guest planted a hook");
    assert!(err.contains("Read-only file system"), "{err}");
    let (code, _, err) = attack("echo '{\"tasks\":[]}' > /work/.vscode/tasks.json");
    assert_ne!(code, Some(0), "the guest planted an editor task");
    assert!(err.contains("Read-only file system"), "{err}");
    let (code, _, err) = attack("mv /work/.git /work/old-git");
    assert_ne!(code, Some(0), "the guest renamed .git away");
    assert!(err.contains("busy") || err.contains("Read-only"), "{err}");
    let (code, _, err) = attack("mv /work/.git/config /work/.git/config.old");
    assert_ne!(code, Some(0), "the guest moved .git/config away: {err}");
    // What a commit writes stays writable.
    let (code, _, err) = attack(
        "echo blob > /work/.git/objects/probe && cp /work/.git/index /work/.git/index.new && mv /work/.git/index.new /work/.git/index && echo guest > /work/from-guest",
    );
    assert_eq!(code, Some(0), "{err}");
    if as_root {
        assert_eq!(std::fs::metadata(repo.join("from-guest")).unwrap().uid(), OWNER);
    }

    // The host's git reads an untouched config and runs nothing.
    assert_eq!(std::fs::read(repo.join(".git/config")).unwrap(), config_before);
    assert!(repo.join(".git").is_dir() && !repo.join("old-git").exists());
    git(&repo, &["status", "--porcelain"]);
    assert!(!pwned.exists(), "a host `git status` ran the guest's command");

    let out = atoll.run(&["kill", "jailed"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!memory_dir.parent().unwrap().exists(), "the cgroup outlived the sandbox");
}
