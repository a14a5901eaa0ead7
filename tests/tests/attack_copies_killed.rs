//! Copies out of a guest killed outright (SIGKILL) mid-transfer, while the hostile agent
//! (`tests/src/bin/hostile-agent.rs`) holds them stalled: a file copy and a `download`
//! leave nothing beside their destination (they are written unnamed); a folder copy
//! leaves its staging folder, which the next copy into that folder (a folder, a file or
//! a `download`) removes, and nothing else there: not a live copy's staging folder, not
//! a look-alike that atoll did not make (a file, a link, another user's folder, one
//! whose lock is held, a near-miss name, the old `.atoll-cp-XXXXXX` form).

mod cli_util;
mod hostile_util;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use cli_util::atoll_cmd;
use hostile_util::{CANARY, Host, Hostile, honest_zip};

/// `atoll --agent ADDR ARGS` started in the background, output discarded.
fn start(agent: &Hostile, args: &[&str]) -> Child {
    atoll_cmd(&agent.addr(), args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start atoll")
}

/// Waits until `pid` holds open a regular file in `folder` with at least `bytes` in it:
/// the copy is mid-transfer, its first bytes written, the rest stalled.
fn wait_mid_transfer(pid: u32, folder: &Path, bytes: u64) {
    let started = Instant::now();
    let inside = format!("{}/", folder.display());
    loop {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).expect("atoll is running");
        let writing = fds.flatten().any(|fd| {
            let to = std::fs::read_link(fd.path()).unwrap_or_default();
            to.to_string_lossy().starts_with(&inside)
                && std::fs::metadata(fd.path()).is_ok_and(|m| m.is_file() && m.len() >= bytes)
        });
        if writing {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "atoll {pid} never wrote {bytes} bytes");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGKILLs `child` and reaps it.
fn kill(mut child: Child) {
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(status.code().is_none(), "atoll ended by itself ({status}) before it was killed");
}

fn names(folder: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A file copy and a `download`, each killed with its first bytes written: only the
/// canary is in the destination's folder.
#[test]
fn a_file_or_zip_copy_killed_mid_transfer_leaves_nothing() {
    let host = Host::new();
    let folder = host.root.path().join("host");
    let dst = host.dst();
    let zip_out = folder.join("out.zip");
    let cases: [(&str, &str, Vec<&str>, u64); 2] = [
        ("cp of a file", "file-stall", vec!["cp", ":/f", dst.to_str().unwrap(), "--idle-timeout", "10m"], 5),
        (
            "download of a folder's zip",
            "zip-stall",
            vec!["download", "/d", "-o", zip_out.to_str().unwrap(), "--idle-timeout", "10m"],
            4,
        ),
    ];
    for (case, mode, args, written) in cases {
        let agent = Hostile::start(mode, None);
        let atoll = start(&agent, &args);
        wait_mid_transfer(atoll.id(), &folder, written);
        kill(atoll);
        host.untouched(case);
    }
    // The same copy, replacing a file already there, lands whole (and only it).
    std::fs::write(&dst, b"old").unwrap();
    let agent = Hostile::start("file", Some(Path::new("10")));
    let out = atoll_cmd(&agent.addr(), &["cp", ":/f", dst.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&dst).unwrap(), b"xxxxxxxxxx");
    assert_eq!(names(&folder), ["canary", "out"]);
}

/// What a tidying copy must leave alone, planted beside the destination.
struct LookAlikes {
    /// (name, what it is) of each.
    kept: Vec<(String, &'static str)>,
    /// A folder outside that a planted link points at.
    outside: tempfile::TempDir,
    /// The lock held on one of them, as a live copy in another pid namespace holds it.
    _held: std::fs::File,
}

/// A pid no process has (above the largest `pid_max`).
const DEAD_PID: u32 = 99_999_999;

fn plant_look_alikes(folder: &Path) -> LookAlikes {
    let mut kept = Vec::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep"), CANARY).unwrap();
    let name = |tag: &str| format!(".atoll-cp-{DEAD_PID}-1-{tag}");
    // A file and a link of the exact form, the link to a folder outside.
    std::fs::write(folder.join(name("aFILEaaa")), CANARY).unwrap();
    kept.push((name("aFILEaaa"), "a file"));
    std::os::unix::fs::symlink(outside.path(), folder.join(name("aLINKaaa"))).unwrap();
    kept.push((name("aLINKaaa"), "a link"));
    // Near-miss names: the old random form, a short random part, no start time.
    for n in [".atoll-cp-Ab12Cd".to_owned(), name("short"), format!(".atoll-cp-{DEAD_PID}-aNOSTART")] {
        std::fs::create_dir(folder.join(&n)).unwrap();
        std::fs::write(folder.join(&n).join("keep"), CANARY).unwrap();
        kept.push((n, "a near-miss name"));
    }
    // The exact form, its process gone, but its lock held.
    let held = name("aHELDaaa");
    std::fs::create_dir(folder.join(&held)).unwrap();
    std::fs::write(folder.join(&held).join("keep"), CANARY).unwrap();
    let lock = std::fs::File::open(folder.join(&held)).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
    kept.push((held, "a folder whose lock is held"));
    // Another user's (only root can make one).
    if rustix::process::geteuid().is_root() {
        let theirs = name("aUSERaaa");
        std::fs::create_dir(folder.join(&theirs)).unwrap();
        std::fs::write(folder.join(&theirs).join("keep"), CANARY).unwrap();
        std::os::unix::fs::lchown(folder.join(&theirs), Some(65534), Some(65534)).unwrap();
        kept.push((theirs, "another user's folder"));
    } else {
        eprintln!("not root: no folder of another user's was planted");
    }
    LookAlikes { kept, outside, _held: lock }
}

/// A staging folder of `pid`'s in `folder`, once there is one.
/// Every look-alike in `folder` is still there, each folder with its canary, and the
/// folder outside that a planted link names too; `case` says which copy ran.
fn assert_look_alikes_kept(folder: &Path, plants: &LookAlikes, case: &str) {
    for (name, what) in &plants.kept {
        let meta = std::fs::symlink_metadata(folder.join(name));
        assert!(meta.is_ok(), "{case}: {what} ({name}) was removed");
        if meta.unwrap().is_dir() {
            let kept = std::fs::read(folder.join(name).join("keep")).unwrap();
            assert_eq!(kept, CANARY, "{case}: {what} was emptied");
        }
    }
    assert_eq!(std::fs::read(plants.outside.path().join("keep")).unwrap(), CANARY);
}

fn staging_of(pid: u32, folder: &Path) -> String {
    let started = Instant::now();
    let prefix = format!(".atoll-cp-{pid}-");
    loop {
        if let Some(n) = names(folder).into_iter().find(|n| n.starts_with(&prefix)) {
            return n;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "atoll {pid} made no staging folder");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A folder copy killed mid-transfer leaves its staging folder (and nothing else); the
/// next folder copy there (the same fake, serving an honest zip) lands and removes it,
/// and a staging folder whose pid is alive but started later (a reused pid); it leaves
/// a live copy's staging folder and every look-alike, with what is inside them. In a
/// folder others can rename entries in, nothing is tidied.
#[test]
fn a_folder_copy_killed_mid_transfer_is_tidied_by_the_next() {
    let host = Host::new();
    let folder = host.root.path().join("host");
    let dst = host.dst();
    let stalls = Hostile::start("zip-stall", None);
    let killed = start(&stalls, &["cp", ":/d", dst.to_str().unwrap(), "--idle-timeout", "10m"]);
    let killed_pid = killed.id();
    wait_mid_transfer(killed_pid, &folder, 4);
    let stale = staging_of(killed_pid, &folder);
    kill(killed);
    let mut expected = vec!["canary".to_owned(), stale.clone()];
    expected.sort();
    assert_eq!(names(&folder), expected, "a folder copy killed leaves only its staging folder");
    assert!(std::fs::symlink_metadata(folder.join(&stale)).unwrap().is_dir());

    // A live copy, stalled, into another name in the same folder.
    let live =
        start(&stalls, &["cp", ":/d", folder.join("other").to_str().unwrap(), "--idle-timeout", "10m"]);
    let live_staging = staging_of(live.id(), &folder);
    // A reused pid: this test's own, with a start time it does not have.
    let reused = format!(".atoll-cp-{}-1-aREUSEDa", std::process::id());
    std::fs::create_dir(folder.join(&reused)).unwrap();
    std::fs::write(folder.join(&reused).join("f"), b"left by a copy long gone").unwrap();
    let plants = plant_look_alikes(&folder);

    let zips = tempfile::tempdir().unwrap();
    let zip_path = honest_zip(zips.path());
    let honest = Hostile::start("zip", Some(&zip_path));
    let out = atoll_cmd(&honest.addr(), &["cp", ":/d", dst.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(dst.join("a/f.txt")).unwrap(), b"honest\n");

    let left = names(&folder);
    assert!(!left.contains(&stale), "the killed copy's staging folder is still there: {left:?}");
    assert!(!left.contains(&reused), "a staging folder of a reused pid is still there: {left:?}");
    assert!(left.contains(&live_staging), "the live copy's staging folder was removed: {left:?}");
    assert_look_alikes_kept(&folder, &plants, "the honest folder copy");
    let mut expected: Vec<String> = plants.kept.iter().map(|(n, _)| n.clone()).collect();
    expected.extend(["canary".to_owned(), "out".to_owned(), live_staging]);
    expected.sort();
    assert_eq!(left, expected);
    assert_eq!(std::fs::read(folder.join("canary")).unwrap(), CANARY);
    kill(live);

    // In a folder others may rename entries in (mode 0777, not sticky), a stale staging
    // folder of ours might be a folder of ours another user renamed: it is left.
    let open = host.root.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let stale = format!(".atoll-cp-{DEAD_PID}-1-aOPENaaa");
    std::fs::create_dir(open.join(&stale)).unwrap();
    std::fs::write(open.join(&stale).join("keep"), CANARY).unwrap();
    let out = atoll_cmd(&honest.addr(), &["cp", ":/d", open.join("out").to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(open.join(&stale).join("keep")).unwrap(), CANARY, "tidied where others rename");
    // Made sticky, the same folder is tidied.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out =
        atoll_cmd(&honest.addr(), &["cp", ":/d", open.join("out2").to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!open.join(&stale).exists(), "a stale staging folder in a sticky folder of ours was left");
}

/// A folder copy killed mid-transfer leaves its staging folder; the next file copy into
/// that folder, and the next `download -o`, each land and remove it, and leave a live
/// copy's staging folder and every look-alike (the old `.atoll-cp-XXXXXX` form among
/// them), with what is inside them.
#[test]
fn a_file_or_zip_copy_tidies_what_a_killed_folder_copy_left() {
    let zips = tempfile::tempdir().unwrap();
    let zip_path = honest_zip(zips.path());
    let file_agent = Hostile::start("file", Some(Path::new("10")));
    let zip_agent = Hostile::start("zip", Some(&zip_path));
    let stalls = Hostile::start("zip-stall", None);
    for case in ["cp of a file", "download of a folder's zip"] {
        let host = Host::new();
        let folder = host.root.path().join("host");
        let dst = host.dst();
        let killed = start(&stalls, &["cp", ":/d", dst.to_str().unwrap(), "--idle-timeout", "10m"]);
        let killed_pid = killed.id();
        wait_mid_transfer(killed_pid, &folder, 4);
        let stale = staging_of(killed_pid, &folder);
        // Started before the kill: a folder copy started after it would tidy first.
        let live =
            start(&stalls, &["cp", ":/d", folder.join("other").to_str().unwrap(), "--idle-timeout", "10m"]);
        let live_staging = staging_of(live.id(), &folder);
        kill(killed);
        assert!(folder.join(&stale).is_dir(), "{case}: the killed copy left no staging folder");
        let plants = plant_look_alikes(&folder);

        let out = match case {
            "cp of a file" => atoll_cmd(&file_agent.addr(), &["cp", ":/f", dst.to_str().unwrap()]),
            _ => atoll_cmd(&zip_agent.addr(), &["download", "/d", "-o", dst.to_str().unwrap()]),
        }
        .output()
        .unwrap();
        assert!(out.status.success(), "{case}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(std::fs::symlink_metadata(&dst).unwrap().is_file(), "{case} did not land");

        let left = names(&folder);
        assert!(!left.contains(&stale), "{case}: the killed copy's staging folder is still there: {left:?}");
        assert!(left.contains(&live_staging), "{case}: the live copy's staging folder was removed: {left:?}");
        assert_look_alikes_kept(&folder, &plants, case);
        let mut expected: Vec<String> = plants.kept.iter().map(|(n, _)| n.clone()).collect();
        expected.extend(["canary".to_owned(), "out".to_owned(), live_staging]);
        expected.sort();
        assert_eq!(left, expected, "{case}");
        kill(live);
    }
}
