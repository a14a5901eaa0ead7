//! QEMU's jail, checked from where an attacker would stand, on one booted VM with a
//! read-write shared git repository: from the host, QEMU runs under seccomp (mode 2),
//! not as root (as the share's owner, when atoll runs as root as CI does), with no
//! capabilities, in mount, PID, network, IPC and UTS namespaces of its own, with no
//! token in its environment (nor in the network helper's), in the sandbox's cgroup with
//! a memory limit, its share bound `nosuid,nodev`; and from inside the guest as root,
//! the git config plant (fsmonitor), a hook plant, an editor task plant and renaming
//! `.git` away all fail, while the guest can still write objects and the index, and a
//! host `git status` afterwards runs nothing. A guest that fills its RAM past its
//! group's (lowered) memory limit ends its own QEMU and nothing else; so does a QEMU that
//! needs a thread past its group's (lowered) task limit. After `atoll kill`
//! the cgroup is gone.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
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
    chown_tree_to(path, uid, uid);
}

fn chown_tree_to(path: &Path, uid: u32, gid: u32) {
    let out = Command::new("chown").args(["-R", &format!("{uid}:{gid}")]).arg(path).output().unwrap();
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
    // A submodule, checked out: host git runs git in it on every `git status`.
    let lib = host.path().join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("LIB"), "lib\n").unwrap();
    git(&lib, &["init", "-q"]);
    git(&lib, &["add", "LIB"]);
    git(&lib, &["commit", "-q", "-m", "lib"]);
    git(
        &repo,
        &["-c", "protocol.file.allow=always", "submodule", "add", "-q", &lib.display().to_string(), "lib"],
    );
    git(&repo, &["commit", "-q", "-m", "with lib"]);
    let as_root = rustix::process::geteuid().is_root();
    if as_root {
        // Group root: QEMU must still not get gid 0.
        chown_tree_to(&repo, OWNER, 0);
    }
    let config_before = std::fs::read(repo.join(".git/config")).unwrap();
    let module_config_before = std::fs::read(repo.join(".git/modules/lib/config")).unwrap();
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
    let (gid, groups) = (status_field(qemu, "Gid"), status_field(qemu, "Groups"));
    assert!(gid.split_whitespace().all(|g| g != "0"), "QEMU's gids: {gid}");
    assert!(groups.split_whitespace().all(|g| g != "0"), "QEMU's groups: {groups}");
    if as_root {
        // Exactly `atoll` (and /dev/kvm's group under KVM): nothing of the caller's.
        let etc_group = std::fs::read_to_string("/etc/group").unwrap();
        let atoll_gid = etc_group.lines().find_map(|l| l.strip_prefix("atoll:x:")).expect("the atoll group");
        let atoll_gid = atoll_gid.split(':').next().unwrap().to_string();
        let kvm_gid = std::fs::metadata("/dev/kvm").map(|m| m.gid().to_string()).ok();
        let held: Vec<&str> = groups.split_whitespace().collect();
        assert!(held.contains(&atoll_gid.as_str()), "QEMU's groups: {groups}");
        assert!(
            held.iter().all(|g| *g == atoll_gid || Some(*g) == kvm_gid.as_deref()),
            "QEMU holds supplementary groups beyond atoll's: {groups}"
        );
    }
    assert_eq!(status_field(qemu, "CapEff"), "0000000000000000");
    assert_eq!(status_field(qemu, "CapBnd"), "0000000000000000");

    // The sandbox directory is its owner's alone (0700): neither QEMU's user nor the
    // helper's passes through it (bwrap binds what each needs into its own view).
    let dir_mode = std::fs::metadata(atoll.state_dir().join(&id)).unwrap().mode();
    assert_eq!(dir_mode & 0o7777, 0o700, "the sandbox directory has mode {:o}", dir_mode & 0o7777);
    // Every socket of the sandbox is 0600, whatever QEMU's umask.
    for socket in ["vm/qmp.sock", "vm/wire/agent.port", "net/net.ctl", "net/agent.sock"] {
        let mode = std::fs::symlink_metadata(atoll.state_dir().join(&id).join(socket)).unwrap().mode();
        assert_eq!(mode & 0o7777, 0o600, "{socket} has mode {:o}", mode & 0o7777);
    }

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
    // Its limits, as docs/security.md section 5 gives them: guest RAM plus 512 MiB, 512
    // tasks, a CPU weight per vCPU.
    let limit: u64 = std::fs::read_to_string(&memory_dir).unwrap().trim().parse().unwrap();
    let (memory_mib, cpus) = (created["memory_mib"].as_u64().unwrap(), created["cpus"].as_u64().unwrap());
    assert_eq!(limit, (memory_mib + 512) << 20, "QEMU's memory limit for a {memory_mib} MiB guest");
    assert_eq!(cgroup_value(&id, ("pids", "pids.max"), "pids.max"), "512", "QEMU's task limit");
    let weight = cgroup_value(&id, ("cpu", "cpu.shares"), "cpu.weight");
    let v1 = memory_dir.starts_with("/sys/fs/cgroup/memory");
    assert_eq!(weight, if v1 { 1024 * cpus } else { 100 * cpus }.to_string(), "QEMU's CPU weight");

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
    assert!(options(&repo.join(".git")).split(',').any(|o| o == "ro"));
    assert!(options(&repo.join("lib/.git")).split(',').any(|o| o == "ro"));
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
    // commondir: git would read its config (and hooks) from a directory the guest
    // fills. The guest may write the directory; not the pointer to it.
    let evil_config = format!("[core]\n\tfsmonitor = \"touch {}; false\"\n", pwned.display());
    let (code, _, err) = attack(&format!(
        "mkdir -p /work/evil && cp -r /work/.git/. /work/evil/ && printf '{}' >> /work/evil/config && echo /work/evil > /work/.git/commondir",
        evil_config.replace('"', "\\\""),
    ));
    assert_ne!(code, Some(0), "the guest wrote .git/commondir");
    assert!(err.contains("Read-only file system"), "{err}");
    // The submodule route: its config in .git/modules, its `.git` file, its directory.
    let (code, _, err) =
        attack(&format!("printf '{}' >> /work/.git/modules/lib/config", evil_config.replace('"', "\\\"")));
    assert_ne!(code, Some(0), "the guest wrote the submodule's config");
    assert!(err.contains("Read-only file system"), "{err}");
    let (code, _, err) = attack("echo 'gitdir: ../evil' > /work/lib/.git");
    assert_ne!(code, Some(0), "the guest repointed the submodule's .git");
    assert!(err.contains("Read-only file system"), "{err}");
    let (code, _, err) = attack("mv /work/lib /work/lib.old && mkdir -p /work/lib/.git");
    assert_ne!(code, Some(0), "the guest replaced the submodule's directory");
    assert!(err.contains("busy"), "{err}");
    // The cost: the guest cannot commit into the shared repository; the work tree,
    // the submodule's included, stays writable.
    let (code, _, err) = attack("echo blob > /work/.git/objects/probe");
    assert_ne!(code, Some(0), "the guest wrote an object");
    assert!(err.contains("Read-only file system"), "{err}");
    let (code, _, err) = attack("echo guest > /work/from-guest && echo more >> /work/lib/LIB");
    assert_eq!(code, Some(0), "{err}");
    if as_root {
        assert_eq!(std::fs::metadata(repo.join("from-guest")).unwrap().uid(), OWNER);
    }

    // The host's git reads an untouched config and runs nothing, in the repository
    // and in the submodule it recurses into.
    assert_eq!(std::fs::read(repo.join(".git/config")).unwrap(), config_before);
    assert_eq!(std::fs::read(repo.join(".git/modules/lib/config")).unwrap(), module_config_before);
    assert!(
        repo.join(".git").is_dir() && !repo.join("old-git").exists() && !repo.join(".git/commondir").exists()
    );
    let status = git(&repo, &["status", "--porcelain"]);
    assert!(
        text(&status.stdout).contains(" M lib"),
        "git status did not look into the submodule: {}",
        text(&status.stdout)
    );
    git(&repo.join("lib"), &["status", "--porcelain"]);
    assert!(!pwned.exists(), "a host `git status` ran the guest's command");

    // A read-write share no unprivileged QEMU can write as is refused at once.
    if as_root {
        let root_owned = host.path().join("root-owned");
        std::fs::create_dir(&root_owned).unwrap();
        let before = atoll.sandbox_dirs().len();
        let err = atoll.fails(&[
            "create",
            "--name",
            "rootshare",
            "--mount",
            &format!("{}:/x:rw", root_owned.display()),
        ]);
        assert!(
            err.contains("is owned by root, and QEMU never runs as root") && err.contains(":ro"),
            "{err}"
        );
        assert_eq!(atoll.sandbox_dirs().len(), before, "a refused create left a sandbox directory");
    }

    helper_is_jailed(&atoll, &id, helper);
    console_flood_stays_bounded(&atoll, &id);
    compromised_qemu_reaches_nothing_of_atoll(&atoll, host.path());
    quotas_refuse_at_once(&atoll);
    // A third sandbox, without shares. It runs until the two cgroup walls below, each of
    // which ends one sandbox's QEMU and needs another still running to show it was only
    // that one.
    let third = atoll.json(&["create", "--name", "shareless", "--timeout", "240s"]);
    let third_id = third["id"].as_str().unwrap();
    if as_root {
        helper_cannot_reach_a_shareless_qemu(&atoll, third_id);
    }

    a_qemu_past_its_task_limit_ends_only_itself(&atoll, qemu, &id);
    a_guest_past_its_cgroup_ends_only_its_own_qemu(
        &atoll,
        "shareless",
        qemu_pid(&atoll, third_id),
        &memory_dir.parent().unwrap().with_file_name(third_id),
        third["memory_mib"].as_u64().unwrap(),
    );

    let out = atoll.run(&["kill", "jailed"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!memory_dir.parent().unwrap().exists(), "the cgroup outlived the sandbox");
}

/// The cgroup's memory limit is a wall, not a number: with sandbox `name`'s limit
/// lowered to what its QEMU holds plus 64 MiB (a QEMU that grew past its own), root in
/// the guest filling half its RAM makes the kernel end that QEMU, in its group, and
/// nothing else: another sandbox (`plain`) still answers and `atoll ls` shows `name`
/// dead.
fn a_guest_past_its_cgroup_ends_only_its_own_qemu(
    atoll: &Atoll,
    name: &str,
    qemu: u64,
    group: &Path,
    memory_mib: u64,
) {
    let v1 = group.starts_with("/sys/fs/cgroup/memory");
    let (usage, limit, events) = if v1 {
        ("memory.usage_in_bytes", "memory.limit_in_bytes", "memory.oom_control")
    } else {
        ("memory.current", "memory.max", "memory.events")
    };
    let read = |f: &str| std::fs::read_to_string(group.join(f)).unwrap();
    let held: u64 = read(usage).trim().parse().unwrap();
    std::fs::write(group.join(limit), (held + (64 << 20)).to_string()).unwrap();
    let fill = format!("dd if=/dev/zero of=/tmp/fill bs=1M count={} 2>&1; echo survived", memory_mib / 2);
    let out = atoll.run(&["-s", name, "exec", "--timeout", "120s", "--", "sh", "-c", &fill]);
    assert!(
        !text(&out.stdout).contains("survived"),
        "the guest filled its RAM past the limit: {}",
        text(&out.stdout)
    );
    atoll_tests::vm::wait_until(
        "QEMU ended by its group's limit",
        std::time::Duration::from_secs(60),
        || atoll_tests::pid_gone(qemu),
    );
    let killed = read(events).lines().find_map(|l| l.strip_prefix("oom_kill ")).map(|n| n.trim().to_string());
    assert!(killed.is_some_and(|n| n != "0"), "no OOM kill in the sandbox's group: {}", read(events));
    assert_eq!(atoll.sh("plain", "echo alive"), "alive\n", "the other sandbox was touched");
    assert_eq!(atoll.state_of(name).as_deref(), Some("dead"), "{:?}", atoll.states());
}

/// The group's task limit is a wall too. With `jailed`'s `pids.max` lowered to the tasks
/// its group holds once QEMU's worker pool is empty (a worker leaves after 10 s without
/// work), root in the guest writing a file on the 9p share makes QEMU start a worker
/// thread for it; the kernel refuses the thread in that group (`pids.events` counts it),
/// QEMU 7.2 aborts on a thread it cannot create, and nothing else is touched: the host
/// still starts processes, the other sandboxes (`plain`, `shareless`) still answer, and
/// `atoll ls` shows `jailed` dead.
fn a_qemu_past_its_task_limit_ends_only_itself(atoll: &Atoll, qemu: u64, id: &str) {
    let v1 = Path::new("/sys/fs/cgroup/pids/atoll");
    let group = if v1.is_dir() { v1.join(id) } else { Path::new("/sys/fs/cgroup/atoll").join(id) };
    let read = |f: &str| std::fs::read_to_string(group.join(f)).unwrap();
    let hit = || -> u64 {
        let events = read("pids.events");
        events.lines().find_map(|l| l.strip_prefix("max ")).unwrap().trim().parse().unwrap()
    };
    assert_eq!(hit(), 0, "the task limit was hit before the test lowered it");
    // Until the count holds for 11 s: then no worker is left (nothing uses the share).
    let mut held = read("pids.current");
    loop {
        std::thread::sleep(std::time::Duration::from_secs(11));
        let now = read("pids.current");
        if now == held {
            break;
        }
        held = now;
    }
    std::fs::write(group.join("pids.max"), held.trim()).unwrap();
    let write = "echo probe > /work/pids-probe && cat /work/pids-probe && echo survived";
    let out = atoll.run(&["-s", "jailed", "exec", "--timeout", "60s", "--", "sh", "-c", write]);
    assert!(hit() > 0, "no task refused in the sandbox's group: {}", read("pids.events"));
    assert!(
        !out.status.success() && !text(&out.stdout).contains("survived"),
        "the guest's write went through at the task limit: {}",
        text(&out.stdout)
    );
    atoll_tests::vm::wait_until("QEMU ended at its task limit", std::time::Duration::from_secs(30), || {
        atoll_tests::pid_gone(qemu)
    });
    let log = std::fs::read_to_string(atoll.state_dir().join(id).join("qemu.log")).unwrap();
    assert!(log.contains("qemu_thread_create: Resource temporarily unavailable"), "qemu.log: {log}");
    let host = Command::new("true").status().expect("the host cannot start a process");
    assert!(host.success());
    for other in ["plain", "shareless"] {
        assert_eq!(atoll.sh(other, "echo alive"), "alive\n", "`{other}` was touched");
    }
    assert_eq!(atoll.state_of("jailed").as_deref(), Some("dead"), "{:?}", atoll.states());
    assert!(!atoll.run(&["-s", "jailed", "exec", "--", "true"]).status.success());
}

/// QEMU's pid, as sandbox `id`'s record gives it now.
fn qemu_pid(atoll: &Atoll, id: &str) -> u64 {
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(atoll.state_dir().join(id).join("sandbox.json")).unwrap())
            .unwrap();
    record["qemu"]["pid"].as_u64().expect("QEMU's pid is recorded")
}

/// What file `v1.1` of cgroup `atoll/GROUP` in the v1 hierarchy `v1.0` holds, where the
/// host mounts v1 (as the CI machines do), else file `v2` of the v2 group.
fn cgroup_value(group: &str, v1: (&str, &str), v2: &str) -> String {
    let v1_root = Path::new("/sys/fs/cgroup").join(v1.0).join("atoll");
    let file = if v1_root.is_dir() {
        v1_root.join(group).join(v1.1)
    } else {
        Path::new("/sys/fs/cgroup/atoll").join(group).join(v2)
    };
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display())).trim().to_string()
}

/// Runs `script` as a compromised QEMU `pid` would: in its mount namespace (and its
/// user namespace, when atoll is not root), with its uid, gid and groups and no
/// capabilities.
fn as_qemu(pid: u64, script: &str) -> (Option<i32>, String, String) {
    let mut cmd = Command::new("nsenter");
    cmd.arg("-t").arg(pid.to_string()).arg("-m");
    if rustix::process::geteuid().is_root() {
        let first = |key: &str| status_field(pid, key).split_whitespace().next().unwrap().to_string();
        let groups = status_field(pid, "Groups").split_whitespace().collect::<Vec<_>>().join(",");
        cmd.args(["--", "setpriv", "--reuid", &first("Uid"), "--regid", &first("Gid")]);
        if groups.is_empty() {
            cmd.arg("--clear-groups");
        } else {
            cmd.args(["--groups", &groups]);
        }
        cmd.args(["--inh-caps=-all", "--bounding-set=-all", "--"]);
    } else {
        cmd.args(["-U", "--preserve-credentials", "--"]);
    }
    let out = cmd.args(["/bin/sh", "-c", script]).output().expect("nsenter");
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The network helper's jail, from the host and from a compromised helper's seat (its
/// mount namespace, its identity, no capabilities): its seccomp filter (mode 2), no new
/// privileges, no capabilities, no supplementary groups when atoll is root, mount, PID,
/// IPC and UTS namespaces of its own (the host's network, which it serves), alone in its
/// PID namespace (its watcher, whose `/proc/PID/root` is the host's, out of sight), and
/// a view holding its own sandbox's files but nothing of `/root` or `/home` (beyond the
/// way to the atoll program), no other sandbox's directory, nothing of the secrets store
/// but its own CA's directory (no stored value, no bindings), the kernel's settings
/// read-only, and nothing it can write outside its own.
fn helper_is_jailed(atoll: &Atoll, id: &str, helper: u64) {
    assert_eq!(status_field(helper, "Seccomp"), "2", "the helper runs without its seccomp filter");
    assert_eq!(status_field(helper, "NoNewPrivs"), "1");
    for cap in ["CapPrm", "CapEff", "CapBnd", "CapInh", "CapAmb"] {
        assert_eq!(status_field(helper, cap), "0000000000000000", "the helper's {cap}");
    }
    if rustix::process::geteuid().is_root() {
        assert_eq!(status_field(helper, "Groups"), "", "the helper keeps root's supplementary groups");
        // Never root: the `atoll` system user, its own group.
        for key in ["Uid", "Gid"] {
            let ids = status_field(helper, key);
            assert!(ids.split_whitespace().all(|i| i != "0"), "the helper's {key}s: {ids}");
        }
        helper_cannot_touch_what_atoll_trusts(atoll, id, helper);
    }
    // Its own cgroup beside the sandbox's, where the host has a writable tree.
    let cgroups = std::fs::read_to_string(format!("/proc/{helper}/cgroup")).unwrap();
    let suffix = format!("/atoll/{id}.net");
    let v1 = Path::new("/sys/fs/cgroup/memory/atoll").is_dir();
    let v2 = Path::new("/sys/fs/cgroup/atoll").is_dir() && !v1;
    if v1 || v2 {
        let line = cgroups
            .lines()
            .find(|l| if v1 { l.split(':').nth(1) == Some("memory") } else { l.starts_with("0::") })
            .unwrap_or_else(|| panic!("no memory cgroup line: {cgroups}"));
        assert!(line.ends_with(&suffix), "the helper is not in its own cgroup: {cgroups}");
        let limit = if v1 {
            Path::new("/sys/fs/cgroup/memory").join(format!("atoll/{id}.net/memory.limit_in_bytes"))
        } else {
            Path::new("/sys/fs/cgroup").join(format!("atoll/{id}.net/memory.max"))
        };
        let limit: u64 = std::fs::read_to_string(&limit).unwrap().trim().parse().unwrap();
        assert_eq!(limit, 768 << 20, "the helper's memory limit");
        let group = format!("{id}.net");
        assert_eq!(cgroup_value(&group, ("pids", "pids.max"), "pids.max"), "256", "the helper's task limit");
        let weight = cgroup_value(&group, ("cpu", "cpu.shares"), "cpu.weight");
        assert_eq!(weight, if v1 { "1024" } else { "100" }, "the helper's CPU weight (one vCPU's)");
    }
    for ns in ["mnt", "pid", "ipc", "uts"] {
        let theirs = std::fs::read_link(format!("/proc/{helper}/ns/{ns}")).unwrap();
        let ours = std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
        assert_ne!(theirs, ours, "the helper shares the host's {ns} namespace");
    }
    let net = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    assert_eq!(net(&helper.to_string()), net("self"), "the helper must keep the host's network");

    // Decoys planted now, beside its own: another sandbox, and its CA key.
    let state = atoll.state_dir();
    let store = state.join(".secrets");
    assert!(store.is_dir(), "the secrets store was not made before the helper started");
    std::fs::create_dir_all(state.join("decoy")).unwrap();
    std::fs::write(state.join("decoy/sandbox.json"), "{}").unwrap();
    std::fs::create_dir_all(store.join("sandboxes/decoy")).unwrap();
    std::fs::write(store.join("sandboxes/decoy/ca.key"), "decoy key").unwrap();
    // Its own bindings (what the secret command runner trusts): readable, never writable.
    std::fs::create_dir_all(store.join("bindings")).unwrap();
    let own_bindings = store.join(format!("bindings/{id}.json"));
    std::fs::write(&own_bindings, "[]").unwrap();
    // A stored secret (the runner reads the store; the helper must not).
    let stored = store.join("decoy.json");
    std::fs::write(&stored, "{}").unwrap();
    let exe = std::fs::read_link(format!("/proc/{helper}/exe")).unwrap();
    let (s, dir) = (state.display(), state.join(id));
    let script = format!(
        "for p in /root /home; do [ -e $p ] && echo \"SEES $p: $(ls -A $p | tr '\\n' ' ')\"; done
         [ -r {dir}/net/net.json ] && [ -S {dir}/net/agent.sock ] && echo SEES-OWN
         [ -e {s}/decoy ] && echo SEES-OTHER-SANDBOX
         [ -e {s}/.secrets/sandboxes/decoy ] && echo SEES-OTHER-CA
         [ -d {s}/.secrets/sandboxes/{id} ] && echo SEES-OWN-SECRETS
         [ -e {s}/.secrets/decoy.json ] && echo SEES-STORE
         [ -e {s}/.secrets/bindings ] && echo SEES-BINDINGS
         [ -w /proc/sys/kernel/core_pattern ] && echo SYSCTL-WRITABLE
         echo PIDS: $(ls -d /proc/[0-9]* | wc -l)
         for f in /usr/pwned {s}/.secrets/bindings/{id}.json; do touch $f 2>/dev/null && echo WROTE $f; done
         echo STATE: $(ls -A {s})",
        dir = dir.display()
    );
    let (code, out, err) = as_qemu(helper, &script);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("SEES-OWN\n") && out.contains("SEES-OWN-SECRETS"), "{out}{err}");
    assert!(out.contains("PIDS: 1\n"), "the helper sees other processes: {out}{err}");
    for wall in
        ["SEES-OTHER-SANDBOX", "SEES-OTHER-CA", "SEES-STORE", "SEES-BINDINGS", "SYSCTL-WRITABLE", "WROTE"]
    {
        assert!(!out.contains(wall), "{wall}: {out}{err}");
    }
    for top in ["/root", "/home"] {
        match exe.strip_prefix(top).ok().and_then(|rest| rest.components().next()) {
            // Only the way to the program.
            Some(next) => assert!(
                out.contains(&format!("SEES {top}: {} \n", next.as_os_str().to_string_lossy())),
                "{out}"
            ),
            None => assert!(!out.contains(&format!("SEES {top}")), "the helper sees {top}: {out}"),
        }
    }
    let listed = out.lines().find_map(|l| l.strip_prefix("STATE:")).unwrap_or_default();
    let mut listed: Vec<&str> = listed.split_whitespace().collect();
    listed.sort_unstable();
    assert_eq!(listed, [".secrets", id], "the helper's view of the state directory");
    assert!(!Path::new("/usr/pwned").exists() && !store.join("pwned").exists());
    std::fs::remove_dir_all(state.join("decoy")).unwrap();
    std::fs::remove_dir_all(store.join("sandboxes/decoy")).unwrap();
    std::fs::remove_file(own_bindings).unwrap();
    std::fs::remove_file(stored).unwrap();
}

/// From a compromised helper's seat (its mount namespace, its uid and gid, no groups
/// or capabilities), atoll's own files of the sandbox cannot be written, replaced or
/// removed, nor can anything be made beside them: `sandbox.json` (pids root atoll
/// signals, paths it uses), the sandbox directory itself, `vm/`'s entry. `sandbox.json`
/// is not even in its view; each attempt fails (ENOENT, EACCES, EPERM or EBUSY), and the
/// record is unchanged on the host.
fn helper_cannot_touch_what_atoll_trusts(atoll: &Atoll, id: &str, helper: u64) {
    let dir = atoll.state_dir().join(id);
    let record_before = sha256(&dir.join("sandbox.json"));
    let d = dir.display();
    let script = format!(
        r#"for op in "echo x >> {d}/sandbox.json" "cat {d}/sandbox.json" "ln -sf /etc/passwd {d}/sandbox.json" \
              "rm {d}/sandbox.json" "touch {d}/planted" "mv {d}/net {d}/net.old" "mv {d}/vm {d}/vm.old" \
              "chmod 0777 {d}" "mkdir {d}/parked"; do
             if err=$(sh -c "$op" 2>&1); then echo "DID: $op"; else echo "REFUSED: $op: $err"; fi
           done
           ls {d}/net/net.json >/dev/null && echo NET-OWN
           test -e {d}/sandbox.json && echo SEES-RECORD"#
    );
    let (_, out, err) = as_qemu(helper, &script);
    assert!(!out.contains("DID:"), "the helper changed atoll's files: {out}{err}");
    let refused: Vec<&str> = out.lines().filter(|l| l.starts_with("REFUSED:")).collect();
    assert_eq!(refused.len(), 9, "{out}{err}");
    for line in refused {
        // ENOENT (not in the helper's view at all), EACCES/EPERM (the view's directory
        // is root's) or EBUSY (`net/` is a mount point).
        assert!(
            ["No such file", "Permission denied", "Operation not permitted", "Read-only file system", "busy"]
                .iter()
                .any(|why| line.contains(why)),
            "refused for another reason than its walls: {line}"
        );
    }
    assert!(out.contains("NET-OWN"), "the helper lost its own directory: {out}{err}");
    assert!(!out.contains("SEES-RECORD"), "sandbox.json is in the helper's view: {out}{err}");
    assert_eq!(sha256(&dir.join("sandbox.json")), record_before, "sandbox.json changed");
    assert!(!dir.join("planted").exists() && dir.join("net").is_dir() && dir.join("vm").is_dir());
    helper_plants_are_not_read_as_atolls(atoll, &dir, helper);
}

/// `net.json` is the helper's to write, so root atoll reads it as hostile: a link the
/// helper puts in its place (to a root-only file atoll would show) is not followed, and a
/// FIFO there is not waited on.
fn helper_plants_are_not_read_as_atolls(atoll: &Atoll, dir: &Path, helper: u64) {
    let info = || {
        let out = wait_bounded(atoll.command(&["--json", "info", "jailed"]).spawn().unwrap(), HANG_GUARD)
            .expect("atoll info hung on what the helper planted");
        text(&out.stdout) + &text(&out.stderr)
    };
    let json = dir.join("net/net.json");
    let saved = std::fs::read(&json).unwrap();
    let owner = std::fs::metadata(&json).unwrap();
    let decoy = dir.join("decoy-net.json");
    // Its ports are what atoll shows of `net.json` (the policy shown is atoll's own record).
    let port = r#"{"guest_port":4242,"bind":"127.0.0.1","host_port":4242,"url":"http://decoy.example:4242"}"#;
    std::fs::write(&decoy, format!(r#"{{"network":"default","policy":{{}},"ports":[{port}]}}"#)).unwrap();
    // What atoll shows when it reads that content (a file of its own in the place).
    std::fs::copy(&decoy, &json).unwrap();
    assert!(info().contains("decoy.example"), "the decoy would not show: {}", info());
    let d = dir.display();
    let (code, out, err) =
        as_qemu(helper, &format!("rm -f {d}/net/net.json && ln -s ../decoy-net.json {d}/net/net.json"));
    assert_eq!(code, Some(0), "the helper could not plant a link in its own directory: {out}{err}");
    assert!(!info().contains("decoy.example"), "atoll followed the helper's link: {}", info());
    let (code, out, err) = as_qemu(helper, &format!("rm -f {d}/net/net.json && mkfifo {d}/net/net.json"));
    assert_eq!(code, Some(0), "{out}{err}");
    let _ = info();
    // The agent link's socket, moved aside by the helper and a link to it put in its
    // place: root atoll's client refuses the link (it could name any socket root can
    // reach) instead of following it.
    let exec = || atoll.run(&["-s", "jailed", "exec", "--", "true"]);
    assert!(exec().status.success(), "exec before the plant: {}", text(&exec().stderr));
    let plant = format!("mv {d}/net/agent.sock {d}/net/agent.real && ln -s agent.real {d}/net/agent.sock");
    let (code, out, err) = as_qemu(helper, &plant);
    assert_eq!(code, Some(0), "{out}{err}");
    let refused = exec();
    assert!(!refused.status.success(), "atoll followed the helper's link to a socket");
    assert!(text(&refused.stderr).contains("not a socket"), "{}", text(&refused.stderr));
    let restore = format!("rm {d}/net/agent.sock && mv {d}/net/agent.real {d}/net/agent.sock");
    let (code, out, err) = as_qemu(helper, &restore);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(exec().status.success(), "exec after the plant: {}", text(&exec().stderr));
    std::fs::remove_file(&json).unwrap();
    std::fs::remove_file(&decoy).unwrap();
    std::fs::write(&json, saved).unwrap();
    std::os::unix::fs::chown(&json, Some(owner.uid()), Some(owner.gid())).unwrap();
}

fn sha256(path: &Path) -> String {
    use sha2::Digest;
    let mut f = std::fs::File::open(path).unwrap();
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut f, &mut h).unwrap();
    format!("{:x}", h.finalize())
}

/// Every entry under `dir` that is a symbolic link.
fn links_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let t = e.file_type().unwrap();
        if t.is_symlink() {
            out.push(e.path());
        } else if t.is_dir() {
            out.extend(links_under(&e.path()));
        }
    }
    out
}

/// A compromised QEMU (its namespace, its identity) tries to take over what root atoll
/// writes and follows: the records and their temp files, the logs, the sockets atoll
/// connects to, the copies a restore makes, and the snapshot's guest RAM. Each fails;
/// atoll snapshots and restores the sandbox around the plants and it keeps working.
fn compromised_qemu_reaches_nothing_of_atoll(atoll: &Atoll, host: &Path) {
    // A sandbox without shares: snapshots cannot carry them.
    let created = atoll.json(&["create", "--name", "plain", "--net", "none", "--timeout", "240s"]);
    let id = created["id"].as_str().unwrap();
    let dir = atoll.state_dir().join(id);
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("sandbox.json")).unwrap()).unwrap();
    let qemu = record["qemu"]["pid"].as_u64().unwrap();
    let vm = dir.join("vm");
    let victim = host.join("victim");
    std::fs::write(&victim, "victim\n").unwrap();
    let victim_meta = std::fs::metadata(&victim).unwrap();
    let d = dir.display();
    let v = victim.display();

    // What atoll writes is not in QEMU's view at all.
    let (code, out, err) =
        as_qemu(qemu, &format!("ls -a {d}; cat {d}/sandbox.json {d}/net.json {d}/qemu.log"));
    assert_ne!(code, Some(0), "QEMU read atoll's files: {out}");
    assert!(err.contains("No such file"), "{err}");
    let names: Vec<&str> = out.lines().filter(|l| !matches!(*l, "." | "..")).collect();
    assert_eq!(names, ["vm"], "QEMU sees more of the sandbox directory than vm/");
    // The console log is the network helper's to write (QEMU sends the console to its
    // socket): when atoll is root, QEMU's user, though in the `atoll` group, cannot.
    if rustix::process::geteuid().is_root() {
        let console = vm.join("console.log");
        let before = std::fs::metadata(&console).unwrap().len();
        let (code, out, err) = as_qemu(qemu, &format!("echo planted >> {}", console.display()));
        assert_ne!(code, Some(0), "QEMU wrote the console log: {out}");
        assert!(err.contains("Permission denied"), "{err}");
        assert_eq!(std::fs::metadata(&console).unwrap().len(), before);
    }
    // Plant the record's temp file and links at the logs: none reaches the host's
    // sandbox directory (QEMU's copy of its parent is bwrap's, not atoll's).
    let plant = format!(
        "for f in .sandbox.json.tmp .net.json.tmp sandbox.json qemu.log net-helper.log net.log agent.sock; do \
           ln -sf {v} {d}/$f; done; ls {d}"
    );
    let _ = as_qemu(qemu, &plant);
    // In vm/, which QEMU does write: links where atoll copies, hands over and reads.
    let plant_vm = format!(
        "cd {vm}; for f in ram.bin rootfs.partial .rootfs.qcow2.tmp console.log.1 qmp.sock.tmp; do ln -s {v} $f || exit 9; done; \
         ln -sf {v} console.log; ln -sf {v} rootfs.qcow2; ln -sf {v} net.sock; ls -la",
        vm = vm.display()
    );
    let atolls: Vec<&str> =
        ["console.log", "rootfs.qcow2"].into_iter().filter(|f| vm.join(f).is_file()).collect();
    let (code, out, err) = as_qemu(qemu, &plant_vm);
    assert!(code.is_some_and(|c| c != 9), "QEMU could not even make its own files in vm/: {out} {err}");
    if rustix::process::geteuid().is_root() {
        // Sticky vm/: QEMU cannot replace what atoll put there.
        for f in atolls {
            assert!(std::fs::symlink_metadata(vm.join(f)).unwrap().is_file(), "QEMU replaced vm/{f}: {out}");
        }
    }
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let t = e.file_type().unwrap();
        assert!(!t.is_symlink(), "QEMU planted {} in the sandbox directory", e.path().display());
    }

    // atoll goes on: exec, a snapshot (copies vm/'s disk), a restore in place (copies
    // disk and guest RAM into vm/ over the plants, hands the files to QEMU's user).
    assert_eq!(atoll.sh("plain", "echo alive"), "alive\n");
    atoll.json(&["snapshot", "create", "plain", "--name", "s1"]);
    let snap_ram = atoll.state_dir().join(".snapshots/s1/ram.bin");
    let ram_hash = sha256(&snap_ram);
    atoll.sh("plain", "echo later > /tmp/later");
    atoll.json(&["snapshot", "restore", "plain", "s1"]);
    assert_eq!(
        atoll.sh("plain", "ls /tmp/later 2>&1 || echo rolled-back").trim_end(),
        "ls: /tmp/later: No such file or directory\nrolled-back"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim\n", "atoll wrote through a planted link");
    let now = std::fs::metadata(&victim).unwrap();
    assert_eq!(
        (now.uid(), now.gid(), now.mode()),
        (victim_meta.uid(), victim_meta.gid(), victim_meta.mode()),
        "atoll handed the link's target to QEMU"
    );
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("sandbox.json")).unwrap()).unwrap();
    let restored = record["qemu"]["pid"].as_u64().unwrap();
    assert_ne!(restored, qemu);

    // The restored QEMU: the snapshot's files are not in its view, the guest RAM file
    // it was given is a private copy whose name is already gone, and a write through
    // its own descriptor of it (done here from the host, as QEMU could) leaves the
    // snapshot as it was for every later restore.
    let (code, out, _) =
        as_qemu(restored, &format!("ls {}; ls {}", snap_ram.display(), vm.join("ram.bin").display()));
    assert_ne!(code, Some(0), "the restored QEMU sees the snapshot's or its own RAM file by name: {out}");
    let mut wrote = 0;
    for fd in std::fs::read_dir(format!("/proc/{restored}/fd")).unwrap().flatten() {
        let target = std::fs::read_link(fd.path()).unwrap_or_default();
        if target.to_string_lossy().contains("ram.bin") {
            assert!(target.starts_with(&vm), "QEMU holds {} open", target.display());
            // The last page of guest RAM: the least likely to be in use.
            let f = std::fs::OpenOptions::new().write(true).open(fd.path()).unwrap();
            let last = f.metadata().unwrap().len() - 4096;
            std::os::unix::fs::FileExt::write_all_at(&f, &[0xAB; 4096], last).unwrap();
            wrote += 1;
        }
    }
    assert!(wrote > 0, "found no guest RAM file held by the restored QEMU");
    assert_eq!(sha256(&snap_ram), ram_hash, "a restored QEMU changed the snapshot's guest RAM");
    atoll.json(&["snapshot", "restore", "plain", "s1"]);
    assert_eq!(atoll.sh("plain", "echo again"), "again\n");
    assert!(
        links_under(&dir).iter().all(|l| l.starts_with(&vm)),
        "links outside vm/: {:?}",
        links_under(&dir)
    );

    // A record that is not the effective user's (or is a link) is not a sandbox.
    let fake = atoll.state_dir().join("0badf00d");
    std::fs::create_dir(&fake).unwrap();
    let mut forged = record.clone();
    forged["id"] = "0badf00d".into();
    forged["name"] = "forged".into();
    std::fs::write(fake.join("sandbox.json"), serde_json::to_vec(&forged).unwrap()).unwrap();
    let listed = || text(&atoll.run(&["ls"]).stdout).contains("forged");
    assert!(listed(), "a record of the user's own is read");
    if rustix::process::geteuid().is_root() {
        chown_tree(&fake, OWNER);
        assert!(!listed(), "a record owned by another uid is read");
        let err = atoll.fails(&["-s", "forged", "exec", "--", "true"]);
        assert!(err.contains("no sandbox named `forged`"), "{err}");
    }
    std::fs::remove_file(fake.join("sandbox.json")).unwrap();
    std::os::unix::fs::symlink(dir.join("sandbox.json"), fake.join("sandbox.json")).unwrap();
    assert!(!text(&atoll.run(&["ls"]).stdout).contains("0badf00d"));
    std::fs::remove_dir_all(&fake).unwrap();
}

/// The bound on the serial console (`sandbox::network::helper::console`, which alone
/// writes it): 1 MiB, plus one read of the console's stream.
const CONSOLE_MAX: u64 = 1 << 20;

/// Root in the guest writes 3 MiB to `/dev/ttyS0` as fast as it can; the host's
/// `console.log`, watched all along, never grows past the bound plus a second of
/// writing, and keeps the end of what was written.
fn console_flood_stays_bounded(atoll: &Atoll, id: &str) {
    let console = atoll.state_dir().join(id).join("vm/console.log");
    let mut flood = atoll
        .command(&[
            "-s",
            "jailed",
            "exec",
            "--",
            "sh",
            "-c",
            "i=0; while [ $i -lt 48 ]; do head -c 65536 /dev/zero | tr '\\0' x > /dev/ttyS0; i=$((i+1)); done; echo FLOOD-END > /dev/ttyS0; echo $i",
        ])
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let mut largest = 0;
    let status = loop {
        largest = largest.max(std::fs::metadata(&console).map(|m| m.len()).unwrap_or(0));
        if let Some(status) = flood.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(300), "the flood did not end");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let out = flood.wait_with_output().unwrap();
    assert!(status.success(), "flood: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "48", "the guest wrote 3 MiB");
    // Bytes a second, over the whole flood.
    let rate = (48u64 << 16) * 1000 / u64::try_from(started.elapsed().as_millis()).unwrap().max(1);
    // The bound, plus what the guest can write between two checks (and a check's lag).
    let allowed = CONSOLE_MAX + rate * 2 + (64 << 10);
    assert!(largest <= allowed, "console.log reached {largest} bytes (bound {allowed}, {rate} B/s)");
    // Once the helper's next check ran, the file is within the bound and ends as the
    // guest's output did.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let end = std::fs::read(&console).unwrap();
    assert!((end.len() as u64) <= CONSOLE_MAX, "{} bytes after the flood", end.len());
    assert!(text(&end).trim_end().ends_with("FLOOD-END"), "the end of the console is kept");
    let disk = std::fs::metadata(&console).unwrap().blocks() * 512;
    assert!(disk <= CONSOLE_MAX + (64 << 10), "{disk} bytes on disk");
}

/// With two sandboxes running (`jailed`, `plain`), a third over each host quota is
/// refused at once, saying what to park or kill, and leaves nothing behind.
/// A sandbox without shares: its QEMU runs as the `atoll` user, its helper as
/// `atoll-net`. From the helper's seat, QEMU's control socket (in `vm/`, of which the
/// helper's view holds only `wire/`, shared with QEMU for the NIC's socket and the
/// agent port, and the console log) is not in sight, so it can be neither connected to
/// nor removed and replaced: a taken-over helper can neither drive QEMU nor answer
/// atoll in its place. (An ordinary user's helper, which has QEMU's uid:
/// `attack_shares::ordinary_users_helper_reaches_neither_qemu_nor_atolls_record`.)
fn helper_cannot_reach_a_shareless_qemu(atoll: &Atoll, id: &str) {
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(atoll.state_dir().join(id).join("sandbox.json")).unwrap())
            .unwrap();
    let (qemu, helper) =
        (record["qemu"]["pid"].as_u64().unwrap(), record["net_helper"]["pid"].as_u64().unwrap());
    let uid = |pid| status_field(pid, "Uid").split_whitespace().next().unwrap().to_string();
    assert_ne!(uid(qemu), uid(helper), "the helper runs as QEMU's user");
    assert_ne!(uid(helper), "0");
    let qmp = atoll.state_dir().join(id).join("vm/qmp.sock");
    assert!(qmp.exists(), "QEMU's control socket is on the host");
    let script = format!(
        r#"python3 -c 'import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("{q}"); print("CONNECTED")
except OSError as e:
    print("REFUSED", e)'
test -e {q} && echo SEES-QMP
rm {q} && echo REMOVED || echo KEPT
test -S {w}/agent.port && echo WIRE"#,
        q = qmp.display(),
        w = atoll.state_dir().join(id).join("vm/wire").display(),
    );
    let (_, out, err) = as_qemu(helper, &script);
    // Not in its view at all (only `vm/wire/` and the console log of `vm/` are).
    assert!(out.contains("REFUSED") && out.contains("No such file"), "{out}{err}");
    assert!(!out.contains("SEES-QMP") && out.contains("KEPT") && !out.contains("REMOVED"), "{out}{err}");
    assert!(out.contains("WIRE"), "not the helper's view: {out}{err}");
    assert!(qmp.exists(), "QEMU's control socket is gone");
    // QEMU still answers atoll on it.
    assert_eq!(atoll.json(&["pause", "shareless"])["state"], "paused");
    let out = atoll.run(&["resume", "shareless"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(atoll.sh("shareless", "echo alive"), "alive\n");
    helper_plants_do_not_keep_a_parked_sandbox_down(atoll, id, helper);
}

/// The agent port in `vm/wire/` is the helper's user's once QEMU made it
/// (`own_agent_port`), so a taken-over helper can put anything in its place: a link to
/// QEMU's control socket (`../qmp.sock`), or a directory holding a link out; and so in
/// place of its own NIC's socket, with a FIFO at the name the next helper binds it under
/// first, and a directory where the next helper binds its control socket first, in its
/// own `net/`; and a folder 66,033 levels deep in `wire/`. None is followed, and none
/// keeps the sandbox down: parked, it comes back,
/// with a new agent port of QEMU's, each time (else QEMU, which cannot remove the
/// helper's entry from the sticky `wire/`, or the next helper, which cannot bind where a
/// directory is, fails to start and the parked sandbox is lost).
fn helper_plants_do_not_keep_a_parked_sandbox_down(atoll: &Atoll, id: &str, mut helper: u64) {
    let dir = atoll.state_dir().join(id);
    let wire = dir.join("vm/wire");
    let port = wire.join("agent.port");
    let w = wire.display();
    let n = dir.join("net");
    let n = n.display();
    // 2,000 levels a `mkdir -p` (one path under PATH_MAX), the tree so far moved to its
    // bottom 32 times over (`cd` into it is refused past PATH_MAX).
    let chain = vec!["a"; 2000].join("/");
    for plant in [
        format!("mv {w}/agent.port {w}/agent.port.old && ln -s ../qmp.sock {w}/agent.port"),
        format!("rm {w}/agent.port && mkdir {w}/agent.port && ln -s /etc {w}/agent.port/etc"),
        // Its own NIC's socket (QEMU stays connected to it while it runs), and in its own
        // `net/`, a directory at the name its control socket is bound under first.
        format!(
            "rm {w}/net.sock && mkdir {w}/net.sock && ln -s /etc {w}/net.sock/etc && mkfifo {w}/net.sock.new \
             && mkdir {n}/net.ctl.new && ln -s /etc {n}/net.ctl.new/etc"
        ),
        // A folder 66,033 levels deep in `wire/`, which the next start renews: removed
        // with a handle per level and recursion it failed past the open-file limit or
        // overflowed atoll's stack, and the parked sandbox could not come back.
        format!(
            "cd {w} && mkdir -p d0/{chain} && i=0 && while [ $i -lt 32 ]; do mkdir -p d1/{chain} \
             && mv d0 d1/{chain}/ && mv d1 d0 || exit 1; i=$((i+1)); done"
        ),
    ] {
        let (_, out, err) = as_qemu(helper, &format!("{plant} && echo PLANTED"));
        assert!(out.contains("PLANTED"), "the helper could not plant ({plant}): {out}{err}");
        let out = atoll.run(&["pause", "--to-disk", "shareless"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let out = atoll.run(&["resume", "shareless"]);
        assert!(out.status.success(), "a helper's plant kept the parked sandbox down: {}", text(&out.stderr));
        assert_eq!(atoll.sh("shareless", "echo back"), "back\n");
        let meta = std::fs::symlink_metadata(&port).unwrap();
        assert!(meta.file_type().is_socket(), "{} is not QEMU's socket: {meta:?}", port.display());
        assert!(dir.join("vm/qmp.sock").exists() && std::path::Path::new("/etc/passwd").exists());
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("sandbox.json")).unwrap()).unwrap();
        helper = record["net_helper"]["pid"].as_u64().expect("the new helper's pid is recorded");
    }
}

fn quotas_refuse_at_once(atoll: &Atoll) {
    let before = atoll.sandbox_dirs().len();
    for (var, value, says) in [
        ("ATOLL_MAX_SANDBOXES", "2", "Sandbox quota reached: 2 sandboxes run, at most 2"),
        ("ATOLL_MAX_MEMORY_MIB", "1024", "Memory quota reached"),
        ("ATOLL_MAX_VCPUS", "2", "vCPU quota reached"),
    ] {
        let started = std::time::Instant::now();
        let mut cmd = atoll.command(&["create", "--name", "third", "--net", "none"]);
        cmd.env(var, value);
        let out = wait_bounded(cmd.spawn().unwrap(), HANG_GUARD).expect("atoll create hung");
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{var}={value}: a create over the quota started");
        assert!(
            err.contains(says) && err.contains("atoll pause --to-disk NAME") && err.contains("atoll kill"),
            "{err}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "refused only after {:?}",
            started.elapsed()
        );
        assert_eq!(atoll.sandbox_dirs().len(), before, "a refused create left a sandbox directory");
    }
    let mut cmd = atoll.command(&["create", "--name", "third"]);
    cmd.env("ATOLL_MAX_VCPUS", "many");
    let err = text(&wait_bounded(cmd.spawn().unwrap(), HANG_GUARD).unwrap().stderr);
    assert!(err.contains("$ATOLL_MAX_VCPUS is `many`; give a whole number"), "{err}");
}
