//! QEMU's view of the host, as `bwrap` (Debian's bubblewrap) builds it: new mount, PID,
//! IPC, UTS, cgroup and network namespaces (its NIC and its agent link are Unix sockets
//! in the sandbox directory, so an empty network namespace is enough), no capabilities,
//! and a root with nothing in it but QEMU's own programs, libraries and firmware
//! (`/usr`, read-only), a minimal `/dev` and `/proc`, the sandbox's `vm/` directory
//! (never the sandbox directory itself, where atoll keeps its records and logs), the
//! template's files and the shared folders. Every bind bwrap makes is `nosuid,nodev`.
//!
//! In a read-write shared folder, the whole `.git` is bound read-only (git reads
//! `config`, `commondir`, `hooks`, `info`, `modules/*/config` and more, and any of them
//! can make a host `git` run a command; no list of files inside it is enough), and so
//! is each submodule's `.git` (and an unpopulated submodule's directory) named in
//! `.gitmodules`, with the directories on the way bound onto themselves so that none can
//! be renamed away and replaced (a mount point cannot be renamed). The editor and IDE
//! task files of [`PROTECTED`] are bound read-only too. The guest edits the work tree
//! freely but cannot commit into a shared repository (docs/security.md).
//!
//! bwrap runs with `--as-pid-1`: QEMU itself is PID 1 of its namespace and the pid
//! bwrap reports, so `kill`, `pause` (SIGSTOP, which the kernel delivers to a
//! namespace's init from outside) and the watchdog act on QEMU. No `--die-with-parent`:
//! a sandbox outlives the command that started it.

use std::path::{Path, PathBuf};

use crate::vmm::launcher::{Accel, GuestRam, VmSpec};

/// What host tools (git, editors, IDEs) read and act on without being asked, relative
/// to a shared folder; each that exists is bound read-only over a read-write share.
/// docs/security.md says why each is here.
pub const PROTECTED: &[&str] = &[".git", ".vscode", ".idea", ".devcontainer"];
/// How deep submodules inside submodules are followed.
const SUBMODULE_DEPTH: usize = 4;

/// How a path is bound into QEMU's namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read-only.
    Read,
    /// Read-write.
    Write,
    /// A device node (`/dev/kvm`).
    Device,
}

/// One path of the host shown to QEMU, at the same path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// The host path.
    pub path: PathBuf,
    /// How.
    pub access: Access,
}

/// What QEMU of `spec` sees besides `/usr`, `/dev` and `/proc`, parents before what is
/// bound inside them.
pub fn binds(spec: &VmSpec<'_>) -> Vec<Bind> {
    let bind = |path: &Path, access| Bind { path: path.to_path_buf(), access };
    // Only `vm/`: records, logs and the helper's sockets stay out of QEMU's sight.
    let mut out = vec![bind(&spec.paths.vm, Access::Write)];
    let t = spec.template;
    out.push(bind(&t.kernel, Access::Read));
    out.extend(t.initrd.iter().map(|p| bind(p, Access::Read)));
    // The root filesystem image is the overlay's backing file, read-only.
    out.extend(t.rootfs.iter().map(|p| bind(p, Access::Read)));
    if let GuestRam::Snapshot(ram) = spec.ram {
        // QEMU 7.2 opens a memory-backend-file read-write even with share=off (its
        // `readonly` maps guest RAM read-only), so a restore maps a private copy made
        // in `vm/` (`sandbox::machine::bring_up`), never the snapshot's own file.
        debug_assert!(ram.starts_with(&spec.paths.vm), "guest RAM must be a private copy in vm/");
    }
    if spec.accel == Accel::Kvm {
        out.push(bind(Path::new("/dev/kvm"), Access::Device));
    }
    for m in &spec.storage.mounts {
        if m.read_only {
            // The same folder shared read-write too gets one read-write bind (a second,
            // read-only bind at the same path would hide it); QEMU's own `readonly=on`
            // still refuses the guest's writes through the read-only share.
            if !spec.storage.mounts.iter().any(|o| !o.read_only && o.host == m.host) {
                out.push(bind(&m.host, Access::Read));
            }
            continue;
        }
        out.push(bind(&m.host, Access::Write));
        submodules(&m.host, &m.host, SUBMODULE_DEPTH, &mut out);
        for rel in PROTECTED {
            let p = m.host.join(rel);
            // A symlink is not followed: it is shown as it is, read-only, only if it
            // is a real file or directory.
            if std::fs::symlink_metadata(&p).is_ok_and(|meta| meta.is_dir() || meta.is_file()) {
                out.push(bind(&p, Access::Read));
            }
        }
    }
    // Shallower first: a bind inside another must come after it, or it is hidden; of
    // two binds of one path, the read-only one (pushed last) wins.
    out.sort_by_key(|b| b.path.components().count());
    out.reverse();
    let mut seen = std::collections::HashSet::new();
    out.retain(|b| seen.insert(b.path.clone()));
    out.reverse();
    out.sort_by_key(|b| b.path.components().count());
    out
}

/// Binds for the submodules `.gitmodules` of `repo` names (a host `git status` in
/// `share` runs git in each populated one): its `.git` read-only, or, unpopulated, the
/// empty directory read-only; every directory from `share` down to it onto itself, so
/// that none can be renamed away and replaced. Paths that leave `share`, or pass
/// through a link, are skipped.
fn submodules(share: &Path, repo: &Path, depth: usize, out: &mut Vec<Bind>) {
    let Some(depth) = depth.checked_sub(1) else { return };
    let Ok(text) = std::fs::read_to_string(repo.join(".gitmodules")) else { return };
    for rel in text.lines().filter_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "path").then(|| value.trim().trim_matches('"').to_string())
    }) {
        let rel = Path::new(&rel);
        if rel.is_absolute() || rel.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
            continue;
        }
        let dir = repo.join(rel);
        // Each directory from the share down: real directories, not links.
        let chain: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|a| a.starts_with(share) && *a != share)
            .map(Path::to_path_buf)
            .collect();
        if !chain.iter().all(|a| std::fs::symlink_metadata(a).is_ok_and(|m| m.is_dir())) {
            continue;
        }
        let git = dir.join(".git");
        match std::fs::symlink_metadata(&git) {
            Ok(m) if m.is_dir() || m.is_file() => {
                out.extend(chain.iter().map(|a| Bind { path: a.clone(), access: Access::Write }));
                out.push(Bind { path: git, access: Access::Read });
                submodules(share, &dir, depth, out);
            }
            Ok(_) => {}
            Err(_) => {
                out.extend(chain.iter().skip(1).map(|a| Bind { path: a.clone(), access: Access::Write }));
                out.push(Bind { path: dir, access: Access::Read });
            }
        }
    }
}

/// bwrap's arguments for QEMU of `spec`, up to (not including) the program; bwrap
/// writes QEMU's pid as JSON to `info_fd`, then, its view built, waits for a byte on
/// `block_fd` before it runs anything in it (`super::held`).
/// What lies in a shared folder is bound from its handle in `opened` (left out when it
/// has none: it was gone or a link when the shares were opened).
pub fn bwrap_args(
    spec: &VmSpec<'_>,
    info_fd: i32,
    block_fd: i32,
    run_as: Option<super::user::RunAs>,
    opened: &super::shares::Opened,
) -> Vec<String> {
    let mut a: Vec<String> = [
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-net",
        "--unshare-cgroup-try",
        "--as-pid-1",
        "--hostname",
        "atoll",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    .map(String::from)
    .to_vec();
    if !rustix::process::geteuid().is_root() {
        // An ordinary user makes namespaces inside a user namespace of its own.
        a.push("--unshare-user".into());
    }
    for top in ["/lib", "/lib64", "/bin", "/sbin"] {
        match std::fs::read_link(top) {
            Ok(target) => a.extend(["--symlink".into(), target.display().to_string(), top.into()]),
            Err(_) if Path::new(top).is_dir() => a.extend(["--ro-bind".into(), top.into(), top.into()]),
            Err(_) => {}
        }
    }
    a.extend(["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"].map(String::from));
    a.extend(["--dev", "/dev", "--proc", "/proc", "--chdir", "/"].map(String::from));
    let in_share = |p: &Path| spec.storage.mounts.iter().any(|m| p.starts_with(&m.host));
    let mut binds = binds(spec);
    binds.retain(|b| !in_share(&b.path) || opened.fds.contains_key(&b.path));
    // Every directory on the way to a bind, made searchable by anyone: bwrap would make
    // them 0700, which only root could pass.
    let mut ancestors: Vec<&Path> = binds.iter().flat_map(|b| b.path.ancestors().skip(1)).collect();
    ancestors.retain(|p| p.components().count() > 1 && !p.starts_with("/usr") && !p.starts_with("/dev"));
    ancestors.sort_by_key(|p| (p.components().count(), p.to_path_buf()));
    ancestors.dedup();
    for dir in ancestors {
        a.extend(["--perms".into(), "0755".into(), "--dir".into(), dir.display().to_string()]);
    }
    for b in &binds {
        let path = b.path.display().to_string();
        if let Some(fd) = opened.fds.get(&b.path) {
            use std::os::fd::AsRawFd;
            let flag = if b.access == Access::Read { "--ro-bind-fd" } else { "--bind-fd" };
            a.extend([flag.into(), fd.as_raw_fd().to_string(), path]);
            continue;
        }
        let flag = match b.access {
            Access::Read => "--ro-bind",
            Access::Write => "--bind",
            Access::Device => "--dev-bind",
        };
        a.extend([flag.into(), path.clone(), path]);
    }
    a.extend(["--info-fd".into(), info_fd.to_string(), "--block-fd".into(), block_fd.to_string()]);
    match run_as {
        // setpriv (util-linux, in /usr) changes the uid and then drops every capability
        // bwrap kept for it; bwrap's --cap-drop would leave it unable to.
        Some(r) => a.extend([
            "setpriv".into(),
            "--reuid".into(),
            r.uid.to_string(),
            "--regid".into(),
            r.gid.to_string(),
            "--groups".into(),
            groups(spec, r),
            "--bounding-set".into(),
            "-all".into(),
            "--inh-caps".into(),
            "-all".into(),
            "--no-new-privs".into(),
            "--".into(),
        ]),
        None => a.extend(["--cap-drop".into(), "ALL".into()]),
    }
    a
}

/// The supplementary groups of an unprivileged QEMU: `atoll`, and under KVM the group
/// that may open `/dev/kvm`.
fn groups(spec: &VmSpec<'_>, run_as: super::user::RunAs) -> String {
    use std::os::unix::fs::MetadataExt;
    let kvm = (spec.accel == Accel::Kvm).then(|| std::fs::metadata("/dev/kvm").ok()).flatten();
    match kvm.map(|m| m.gid()).filter(|&g| g != 0 && g != run_as.atoll_gid) {
        Some(g) => format!("{},{g}", run_as.atoll_gid),
        None => run_as.atoll_gid.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vmm::state::Paths;
    use crate::vmm::storage::{Mount, Storage};
    use crate::vmm::template::{InitKind, Template};

    #[test]
    fn a_read_write_share_gets_its_git_submodules_and_editor_files_read_only() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir_all(repo.join(".git/hooks")).unwrap();
        std::fs::write(repo.join(".git/config"), "").unwrap();
        std::fs::create_dir_all(repo.join(".vscode")).unwrap();
        std::fs::write(
            repo.join(".gitmodules"),
            "[submodule \"a\"]\n\tpath = libs/a\n[submodule \"e\"]\n\tpath = empty\n[submodule \"x\"]\n\tpath = ../escape\n",
        )
        .unwrap();
        std::fs::create_dir_all(repo.join("libs/a/sub")).unwrap();
        std::fs::write(repo.join("libs/a/.git"), "gitdir: ../../.git/modules/a\n").unwrap();
        std::fs::write(repo.join("libs/a/.gitmodules"), "[submodule \"s\"]\n\tpath = sub\n").unwrap();
        std::fs::write(repo.join("libs/a/sub/.git"), "gitdir: x\n").unwrap();
        std::fs::create_dir_all(repo.join("empty")).unwrap();
        std::fs::create_dir_all(d.path().join("escape/.git")).unwrap();
        let ro = d.path().join("ro");
        std::fs::create_dir_all(ro.join(".git")).unwrap();
        let t = Template {
            name: "t".into(),
            kernel: "/t/vmlinux".into(),
            initrd: None,
            rootfs: Some("/t/rootfs.ext4".into()),
            cmdline: String::new(),
            init: InitKind::Agent,
            display: None,
        };
        let paths = Paths::in_dir(Path::new("/s/id"), true);
        assert_eq!(paths.overlay.as_deref(), Some(Path::new("/s/id/vm/rootfs.qcow2")));
        let storage = Storage {
            mounts: vec![
                Mount { host: repo.clone(), guest: "/work".into(), read_only: false },
                Mount { host: ro.clone(), guest: "/ro".into(), read_only: true },
            ],
            disk_bytes: None,
            display: None,
        };
        let spec = VmSpec {
            id: "id",
            name: "n",
            template: &t,
            memory_mib: 256,
            cpus: 1,
            accel: Accel::Tcg,
            paths: &paths,
            network: false,
            storage: &storage,
            ram: GuestRam::Fresh,
        };
        let b = binds(&spec);
        let access = |p: PathBuf| b.iter().find(|x| x.path == p).map(|x| x.access);
        assert_eq!(access("/s/id/vm".into()), Some(Access::Write));
        assert_eq!(access("/s/id".into()), None, "the sandbox directory itself is never shown");
        assert!(b.iter().all(|x| !x.path.starts_with("/s/id") || x.path.starts_with("/s/id/vm")));
        assert_eq!(access(repo.clone()), Some(Access::Write));
        assert_eq!(access(repo.join(".git")), Some(Access::Read), "the whole .git: commondir, modules/");
        assert_eq!(access(repo.join(".vscode")), Some(Access::Read));
        assert_eq!(access(repo.join("libs")), Some(Access::Write), "on the way to a submodule: no rename");
        assert_eq!(access(repo.join("libs/a")), Some(Access::Write));
        assert_eq!(access(repo.join("libs/a/.git")), Some(Access::Read));
        assert_eq!(access(repo.join("libs/a/sub/.git")), Some(Access::Read), "a submodule's submodule");
        assert_eq!(access(repo.join("empty")), Some(Access::Read), "unpopulated: nothing to lose");
        assert_eq!(access(repo.join("../escape")), None);
        assert_eq!(access(repo.join(".idea")), None, "only what exists is bound");
        assert_eq!(access(ro.clone()), Some(Access::Read));
        assert_eq!(access(ro.join(".git")), None, "a read-only share needs nothing more");
        let at = |p: PathBuf| b.iter().position(|x| x.path == p).unwrap();
        assert!(
            at(repo.clone()) < at(repo.join(".git")) && at(repo.join("libs")) < at(repo.join("libs/a/.git"))
        );
        let paths: std::collections::HashSet<_> = b.iter().map(|x| &x.path).collect();
        assert_eq!(paths.len(), b.len(), "each path bound once");
        let args = bwrap_args(&spec, 7, 8, None, &crate::jail::shares::Opened::default());
        assert!(!args.iter().any(|a| a == "--die-with-parent"), "a sandbox outlives its command");
        assert!(args.windows(2).any(|w| w[0] == "--info-fd" && w[1] == "7"));
        assert!(args.windows(2).any(|w| w[0] == "--block-fd" && w[1] == "8"), "QEMU is held until released");
        assert!(args.iter().any(|a| a == "--unshare-net") && args.iter().any(|a| a == "--as-pid-1"));
    }
}
