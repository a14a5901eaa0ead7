//! `atoll cp` both ways (files of any size, directories via zip) and `atoll download`,
//! driven as a subprocess against a real agent.

mod cli_util;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use atoll_tests::Agent;
use cli_util::{atoll, atoll_cmd, code, json, ok, s, sha256_file, stderr};

/// Writes `len` bytes of noise to `path` in pieces, without holding it all in memory.
fn write_noise(path: &Path, len: usize, seed: u64) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let piece = 1 << 20;
    for i in 0..len.div_ceil(piece) {
        let n = piece.min(len - i * piece);
        f.write_all(&atoll_tests::noise(n, seed + i as u64)).unwrap();
    }
    f.flush().unwrap();
}

#[test]
fn a_100_mib_binary_file_copies_both_ways_intact() {
    let agent = Agent::start();
    let host = tempfile::tempdir().unwrap();
    let src = host.path().join("big.bin");
    write_noise(&src, 100 << 20, 42);
    let want = sha256_file(&src);

    let guest = agent.dir.path().join("in-guest/big.bin");
    let out = atoll(&agent.address(), &["cp", s(&src), &format!(":{}", s(&guest))]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(sha256_file(&guest), want, "host -> guest changed the bytes");

    let back = host.path().join("back.bin");
    let out = atoll(&agent.address(), &["--json", "cp", &format!(":{}", s(&guest)), s(&back)]);
    let doc = json(&out);
    assert_eq!(doc["bytes"], 100u64 << 20);
    assert_eq!(doc["kind"], "file");
    assert_eq!(sha256_file(&back), want, "guest -> host changed the bytes");
}

#[test]
fn files_copied_into_a_directory_keep_their_name_and_mode() {
    let agent = Agent::start();
    let host = tempfile::tempdir().unwrap();
    let src = host.path().join("run.sh");
    std::fs::write(&src, b"#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o755)).unwrap();
    let guest_dir = agent.dir.path().join("work");
    std::fs::create_dir(&guest_dir).unwrap();
    ok(&atoll(&agent.address(), &["cp", s(&src), &format!(":{}", s(&guest_dir))]));
    let landed = guest_dir.join("run.sh");
    assert_eq!(std::fs::read(&landed).unwrap(), b"#!/bin/sh\necho hi\n");
    assert_eq!(std::fs::metadata(&landed).unwrap().permissions().mode() & 0o777, 0o755);

    // A destination ending in `/` is a directory, created if missing.
    let fresh = agent.dir.path().join("fresh");
    ok(&atoll(&agent.address(), &["cp", s(&src), &format!(":{}/", s(&fresh))]));
    assert_eq!(std::fs::read(fresh.join("run.sh")).unwrap(), b"#!/bin/sh\necho hi\n");

    let into = host.path().join("down");
    std::fs::create_dir(&into).unwrap();
    ok(&atoll(&agent.address(), &["cp", &format!(":{}", s(&landed)), s(&into)]));
    assert_eq!(std::fs::read(into.join("run.sh")).unwrap(), b"#!/bin/sh\necho hi\n");
    assert_eq!(std::fs::metadata(into.join("run.sh")).unwrap().permissions().mode() & 0o777, 0o755);
}

fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("src/nested/deeper")).unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::fs::write(root.join("README"), b"top\n").unwrap();
    std::fs::write(root.join("src/main.rs"), b"fn main() {}\n").unwrap();
    write_noise(&root.join("src/nested/deeper/blob.bin"), 3 << 20, 7);
}

fn assert_same_tree(a: &Path, b: &Path) {
    for rel in ["README", "src/main.rs", "src/nested/deeper/blob.bin"] {
        assert_eq!(sha256_file(&a.join(rel)), sha256_file(&b.join(rel)), "{rel} differs");
    }
    assert!(b.join("empty").is_dir(), "empty directories travel too");
}

#[test]
fn directories_copy_both_ways() {
    let agent = Agent::start();
    let host = tempfile::tempdir().unwrap();
    let tree = host.path().join("project");
    make_tree(&tree);

    // To a new guest path: the tree becomes that path.
    let guest_new = agent.dir.path().join("copy");
    let out = atoll(&agent.address(), &["--json", "cp", s(&tree), &format!(":{}", s(&guest_new))]);
    let doc = json(&out);
    assert_eq!((doc["kind"].as_str(), doc["files"].as_u64()), (Some("dir"), Some(3)), "{doc}");
    assert_same_tree(&tree, &guest_new);

    // Into an existing guest directory: the tree lands inside it, by name.
    let guest_dir = agent.dir.path().join("work");
    std::fs::create_dir(&guest_dir).unwrap();
    ok(&atoll(&agent.address(), &["cp", s(&tree), &format!(":{}/", s(&guest_dir))]));
    assert_same_tree(&tree, &guest_dir.join("project"));

    // Back to the host, to a new path.
    let back = host.path().join("back");
    ok(&atoll(&agent.address(), &["cp", &format!(":{}", s(&guest_new)), s(&back)]));
    assert_same_tree(&tree, &back);

    // Into an existing host directory, by name; a second copy refuses to merge.
    let into = host.path().join("into");
    std::fs::create_dir(&into).unwrap();
    ok(&atoll(&agent.address(), &["cp", &format!(":{}", s(&guest_new)), s(&into)]));
    assert_same_tree(&tree, &into.join("copy"));
    let again = atoll(&agent.address(), &["cp", &format!(":{}", s(&guest_new)), s(&into)]);
    assert_eq!(code(&again), 2);
    assert!(stderr(&again).contains("already exists"), "{}", stderr(&again));
    let leftovers: Vec<_> = std::fs::read_dir(&into).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers.len(), 1, "no staging directory left behind: {leftovers:?}");
}

#[test]
fn download_writes_a_zip() {
    let agent = Agent::start();
    let tree = agent.dir.path().join("tree");
    make_tree(&tree);
    let host = tempfile::tempdir().unwrap();
    let zip_path = host.path().join("out.zip");
    let doc = json(&atoll(&agent.address(), &["--json", "download", s(&tree), "-o", s(&zip_path)]));
    assert_eq!(doc["files"], 3);
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&zip_path).unwrap()).unwrap();
    let names: Vec<String> = zip.file_names().map(|n| n.unwrap().into_owned()).collect();
    assert!(names.iter().any(|n| n == "src/main.rs"), "{names:?}");
    let mut main = String::new();
    std::io::Read::read_to_string(&mut zip.by_name("src/main.rs").unwrap(), &mut main).unwrap();
    assert_eq!(main, "fn main() {}\n");

    let missing =
        atoll(&agent.address(), &["download", s(&agent.dir.path().join("nope")), "-o", s(&zip_path)]);
    assert_eq!(code(&missing), 1);
    assert!(zip_path.exists(), "a failed download leaves the old file alone");

    // Over the cap: the CLI names its own flag, never the MCP/gRPC argument.
    let over = atoll(&agent.address(), &["download", s(&tree), "--max-bytes", "10", "-o", s(&zip_path)]);
    let err = stderr(&over);
    assert_eq!(code(&over), 1, "{err}");
    assert!(err.contains("--max-bytes") && !err.contains("max_bytes"), "{err}");
}

#[test]
fn a_missing_guest_source_is_not_found() {
    let agent = Agent::start();
    let host = tempfile::tempdir().unwrap();
    let out = atoll(
        &agent.address(),
        &["--json", "cp", &format!(":{}/nope", agent.dir.path().display()), s(host.path())],
    );
    assert_eq!(code(&out), 1);
    assert_eq!(cli_util::json_error(&out)["kind"], "not_found");
    assert_eq!(std::fs::read_dir(host.path()).unwrap().count(), 0);
}

/// A directory copied out of a guest is capped (entries, inflated bytes) and leaves
/// nothing behind when refused; guest-chosen modes pass through the umask. The agent
/// here is honest; the caps count what the host unpacks, so they hold whatever sends the
/// zip (`host-cli/src/archive.rs` has the bomb itself).
#[test]
fn copies_out_of_a_guest_are_capped_and_modes_masked() {
    let agent = Agent::start();
    let guest = agent.dir.path().join("many");
    std::fs::create_dir(&guest).unwrap();
    for i in 0..11 {
        std::fs::write(guest.join(format!("f{i}")), vec![b'x'; 200]).unwrap();
    }
    std::fs::set_permissions(guest.join("f0"), std::fs::Permissions::from_mode(0o4777)).unwrap();
    let host = tempfile::tempdir().unwrap();
    let src = format!(":{}", s(&guest));

    let dst = host.path().join("a");
    let out = atoll(&agent.address(), &["cp", "--max-entries", "10", &src, s(&dst)]);
    assert_ne!(code(&out), 0);
    assert!(stderr(&out).contains("11 entries, over the limit of 10"), "{}", stderr(&out));
    let out = atoll(&agent.address(), &["cp", "--max-unpacked-bytes", "1000", &src, s(&dst)]);
    assert_ne!(code(&out), 0);
    assert!(stderr(&out).contains("more than 1000 bytes"), "{}", stderr(&out));
    assert_eq!(std::fs::read_dir(host.path()).unwrap().count(), 0, "nothing left behind");

    ok(&atoll(&agent.address(), &["cp", &src, s(&dst)]));
    let mode = std::fs::metadata(dst.join("f0")).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode & 0o7002, 0, "setuid or world-writable from the guest's mode: {mode:o}");
    // One file, streamed rather than zipped, passes through the umask too.
    let one = host.path().join("one");
    let out = std::process::Command::new("sh")
        .args(["-c", "umask 027 && exec \"$@\"", "sh"])
        .arg(atoll_tests::workspace_bin("atoll"))
        .args(["--agent", &agent.address(), "cp", &format!(":{}", s(&guest.join("f0"))), s(&one)])
        .output()
        .unwrap();
    ok(&out);
    let mode = std::fs::metadata(&one).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o750, "the guest's 4777 under umask 027: {mode:o}");
}

/// A copy out of a guest is not staged inside a folder a sandbox shares read-write (its
/// guest could plant links or swap files there mid-copy); a read-only share is fine.
#[test]
fn copies_out_are_not_staged_in_a_read_write_share() {
    let agent = Agent::start();
    let guest = agent.dir.path().join("out.txt");
    std::fs::write(&guest, "from the guest\n").unwrap();
    let host = tempfile::tempdir().unwrap();
    let (rw, ro) = (host.path().join("rw"), host.path().join("ro"));
    std::fs::create_dir_all(rw.join("sub")).unwrap();
    std::fs::create_dir(&ro).unwrap();
    let state = sharer_state(serde_json::json!([
        {"host": std::fs::canonicalize(&rw).unwrap(), "guest": "/work", "read_only": false},
        {"host": std::fs::canonicalize(&ro).unwrap(), "guest": "/data", "read_only": true},
    ]));
    let cp = |dst: &Path| {
        atoll_cmd(&agent.address(), &["cp", &format!(":{}", s(&guest)), s(dst)])
            .env("ATOLL_STATE_DIR", state.path())
            .output()
            .unwrap()
    };
    for dst in [rw.join("out.txt"), rw.join("sub"), rw.clone()] {
        let out = cp(&dst);
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        assert!(stderr(&out).contains("which sandbox `sharer` shares read-write"), "{}", stderr(&out));
    }
    // Through a host link into the share, and `download -o` into it: refused the same.
    let link = host.path().join("link");
    std::os::unix::fs::symlink(&rw, &link).unwrap();
    let out = cp(&link.join("out.txt"));
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("which sandbox `sharer` shares read-write"), "{}", stderr(&out));
    let zip_dir = agent.dir.path().join("zipme");
    std::fs::create_dir(&zip_dir).unwrap();
    std::fs::write(zip_dir.join("a"), "a").unwrap();
    let out = atoll_cmd(&agent.address(), &["download", s(&zip_dir), "-o", s(&rw.join("z.zip"))])
        .env("ATOLL_STATE_DIR", state.path())
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("which sandbox `sharer` shares read-write"), "{}", stderr(&out));
    assert_eq!(std::fs::read_dir(&rw).unwrap().count(), 1, "nothing staged in the share");
    ok(&cp(&ro.join("out.txt")));
    assert_eq!(std::fs::read_to_string(ro.join("out.txt")).unwrap(), "from the guest\n");
}

/// A bind mount made for a test; unmounted on drop, so also when the test fails.
struct BindMount(std::path::PathBuf);

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A read-write share is recognised by device and inode, not path: the same folder
/// reached through another bind mount of it (a path that does not start with the
/// share's) is refused with the same message, for `cp` of a file and of a folder and for
/// `download -o`, and nothing is written through the alias. A folder beside the share on
/// the same filesystem is still fine.
#[test]
fn copies_out_are_not_staged_in_a_bind_mount_alias_of_a_read_write_share() {
    if !rustix::process::geteuid().is_root() {
        // A bind mount needs root; CI runs the suite as root.
        eprintln!("skipped: a bind mount needs root");
        return;
    }
    let agent = Agent::start();
    let guest = agent.dir.path().join("out.txt");
    std::fs::write(&guest, "from the guest\n").unwrap();
    let guest_dir = agent.dir.path().join("tree");
    std::fs::create_dir(&guest_dir).unwrap();
    std::fs::write(guest_dir.join("a"), "a").unwrap();
    let host = tempfile::tempdir().unwrap();
    let (work, alias, beside) =
        (host.path().join("x/work"), host.path().join("alias"), host.path().join("beside"));
    std::fs::create_dir_all(work.join("sub")).unwrap();
    std::fs::create_dir(&alias).unwrap();
    std::fs::create_dir(&beside).unwrap();
    let status = std::process::Command::new("mount").arg("--bind").arg(&work).arg(&alias).status().unwrap();
    assert!(status.success(), "mount --bind {} {}", work.display(), alias.display());
    let _mounted = BindMount(alias.clone());
    assert!(alias.join("sub").is_dir(), "the alias shows the share");

    let state = sharer_state(serde_json::json!([
        {"host": std::fs::canonicalize(&work).unwrap(), "guest": "/work", "read_only": false},
    ]));
    let run = |args: &[&str]| {
        atoll_cmd(&agent.address(), args).env("ATOLL_STATE_DIR", state.path()).output().unwrap()
    };
    let refused = |out: &std::process::Output| {
        assert_eq!(code(out), 2, "{}", stderr(out));
        let err = stderr(out);
        assert!(err.contains("which sandbox `sharer` shares read-write"), "{err}");
        assert!(err.contains("copy to a folder outside it"), "{err}");
    };
    let from = format!(":{}", s(&guest));
    for dst in [alias.join("out.txt"), alias.join("sub"), alias.join("sub/deeper.txt"), alias.clone()] {
        refused(&run(&["cp", &from, s(&dst)]));
    }
    refused(&run(&["cp", &format!(":{}", s(&guest_dir)), s(&alias.join("tree"))]));
    refused(&run(&["download", s(&guest_dir), "-o", s(&alias.join("z.zip"))]));
    let mut left: Vec<_> = std::fs::read_dir(&work).unwrap().map(|e| e.unwrap().file_name()).collect();
    left.extend(std::fs::read_dir(work.join("sub")).unwrap().map(|e| e.unwrap().file_name()));
    assert_eq!(left, vec![std::ffi::OsString::from("sub")], "nothing written through the alias");

    ok(&run(&["cp", &from, s(&beside.join("out.txt"))]));
    assert_eq!(std::fs::read_to_string(beside.join("out.txt")).unwrap(), "from the guest\n");
}

/// A state directory holding one record: the sandbox `sharer` (id 0badc0de, not
/// running) with `mounts` as its shared folders.
fn sharer_state(mounts: serde_json::Value) -> tempfile::TempDir {
    let state = atoll_tests::vm::short_tempdir();
    let dir = state.path().join("0badc0de");
    std::fs::create_dir(&dir).unwrap();
    let record = serde_json::json!({
        "id": "0badc0de", "name": "sharer", "template": "minimal", "memory_mib": 256, "cpus": 1,
        "accel": "tcg", "created_unix_ms": 1, "qemu": null, "ready": true, "agent_version": null,
        "paused": false,
        "storage": {"mounts": mounts},
        "paths": {"dir": dir, "qmp_socket": dir.join("q"), "console_log": dir.join("c"),
                  "qemu_log": dir.join("l"), "overlay": null},
    });
    std::fs::write(dir.join("sandbox.json"), record.to_string()).unwrap();
    state
}
