//! The hostile agent (`tests/src/bin/hostile-agent.rs`) as a test starts it, and a host
//! destination with canaries, for the `attack_copies*` tests.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The fake agent process; killed when dropped.
pub struct Hostile {
    pub child: Child,
    dir: tempfile::TempDir,
}

impl Hostile {
    pub fn start(mode: &str, arg: Option<&Path>) -> Hostile {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let mut cmd = Command::new(atoll_tests::workspace_bin("hostile-agent"));
        cmd.arg(&socket).arg(mode).stdin(Stdio::null());
        if let Some(arg) = arg {
            cmd.arg(arg);
        }
        let child = cmd.spawn().expect("start hostile-agent");
        let started = Instant::now();
        while !socket.exists() {
            assert!(started.elapsed() < Duration::from_secs(20), "hostile-agent did not bind");
            std::thread::sleep(Duration::from_millis(20));
        }
        Hostile { child, dir }
    }

    pub fn addr(&self) -> String {
        format!("unix://{}", self.dir.path().join("agent.sock").display())
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A destination folder with a canary in it and one beside it.
pub struct Host {
    pub root: tempfile::TempDir,
}

pub const CANARY: &[u8] = b"the host's own file\n";

impl Host {
    pub fn new() -> Host {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("host")).unwrap();
        std::fs::write(root.path().join("host/canary"), CANARY).unwrap();
        std::fs::write(root.path().join("canary"), CANARY).unwrap();
        Host { root }
    }

    pub fn dst(&self) -> PathBuf {
        self.root.path().join("host/out")
    }

    /// Nothing but the canaries, unchanged, at and above the destination.
    pub fn untouched(&self, case: &str) {
        let names = |p: &Path| {
            let mut v: Vec<String> = std::fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(
            names(&self.root.path().join("host")),
            ["canary"],
            "{case}: left something at the destination"
        );
        assert_eq!(names(self.root.path()), ["canary", "host"], "{case}: wrote above the destination");
        for c in [self.root.path().join("canary"), self.root.path().join("host/canary")] {
            assert_eq!(std::fs::read(&c).unwrap(), CANARY, "{case}: {} changed", c.display());
            assert!(std::fs::symlink_metadata(&c).unwrap().file_type().is_file());
        }
    }
}

/// Writes `ok.zip` in `dir`, one honest entry (`a/f.txt`: "honest\n") for the fake to
/// serve, and returns its path.
pub fn honest_zip(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("ok.zip");
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    zip.start_file("a/f.txt", zip::write::SimpleFileOptions::default()).unwrap();
    zip.write_all(b"honest\n").unwrap();
    zip.finish().unwrap();
    path
}
