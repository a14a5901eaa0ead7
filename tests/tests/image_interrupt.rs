//! Ctrl-C during `atoll create --image` while skopeo waits on a registry that never
//! answers (SIGINT to atoll alone, as `kill -INT` or a supervisor sends it; a terminal
//! would signal skopeo too): atoll stops at once and says so, skopeo does not outlive it,
//! and no staging layout is left in the image cache. What an earlier run killed outright
//! left there (a dead process's layout) is removed by the next fetch, and a live
//! process's is not.

mod image_util;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use atoll_tests::vm::{text, wait_bounded, wait_until};
use atoll_tests::{pid_gone, workspace_bin};
use image_util::{entries_of, scratch_data_dir};

/// A "registry" on loopback that accepts connections and never says a word.
fn silent_registry() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    port
}

/// The pids of skopeo processes whose command line names `data`.
fn skopeo_pids(data: &Path) -> Vec<u64> {
    atoll_tests::processes_mentioning(data)
        .iter()
        .filter(|p| p.contains("skopeo "))
        .filter_map(|p| p.split(':').next()?.parse().ok())
        .collect()
}

#[test]
fn an_interrupted_image_fetch_leaves_no_skopeo_and_no_staging() {
    let data = scratch_data_dir();
    let data = data.path();
    let tmp = data.join("images/tmp");
    // Left by a run that was killed outright (pid_max is at most 2^22: this pid never runs),
    // and one a running atoll (this test's pid stands for it) is still filling.
    let dead = tmp.join("layout-99999999-Ab12Cd");
    let live = tmp.join(format!("layout-{}-Ef34Gh", std::process::id()));
    for d in [&dead, &live] {
        std::fs::create_dir_all(d.join("blobs")).unwrap();
        std::fs::write(d.join("index.json"), "{}").unwrap();
    }
    std::fs::create_dir_all(data.join("state")).unwrap();
    let port = silent_registry();

    let reference = format!("127.0.0.1:{port}/team/app:1");
    let child = Command::new(workspace_bin("atoll"))
        .args(["create", "--image", &reference, "--insecure-registry"])
        .env("ATOLL_DATA_DIR", data)
        .env("ATOLL_STATE_DIR", data.join("state"))
        .env_remove("ATOLL_AGENT")
        .env_remove("ATOLL_SANDBOX")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let atoll_pid = child.id();
    wait_until("skopeo waiting on the silent registry", Duration::from_secs(60), || {
        !skopeo_pids(data).is_empty()
    });
    let skopeo = skopeo_pids(data);
    assert!(!dead.exists(), "the fetch did not remove a dead process's staging layout");
    assert!(live.exists(), "the fetch removed a live process's staging layout");
    let ours: Vec<String> =
        entries_of(&tmp).into_iter().filter(|n| n.starts_with(&format!("layout-{atoll_pid}-"))).collect();
    assert_eq!(ours.len(), 1, "atoll's own staging layout is named for it: {:?}", entries_of(&tmp));

    let _ = Command::new("kill").args(["-INT", &atoll_pid.to_string()]).status();
    let out = wait_bounded(child, Duration::from_secs(20)).expect("atoll did not stop within 20 s of SIGINT");
    assert!(!out.status.success(), "an interrupted create must fail");
    let err = text(&out.stderr);
    assert!(err.contains("interrupted"), "atoll must say it was interrupted: {err}");
    wait_until("skopeo ended with atoll", Duration::from_secs(10), || skopeo.iter().all(|&p| pid_gone(p)));
    let left: Vec<String> =
        entries_of(&tmp).into_iter().filter(|n| n.starts_with(&format!("layout-{atoll_pid}-"))).collect();
    assert!(left.is_empty(), "an interrupted fetch left its staging layout: {left:?}");
    assert!(live.exists(), "an interrupted fetch removed another process's staging layout");
    assert!(entries_of(&data.join("templates")).is_empty(), "{:?}", entries_of(&data.join("templates")));
    assert!(entries_of(&data.join("state")).iter().all(|n| n.starts_with('.')), "a sandbox was left");
}
