//! A jailed QEMU held before it runs. bwrap (`--block-fd`) builds QEMU's namespaces and
//! view and waits, already in the sandbox's cgroup (written before bwrap runs anything),
//! until atoll writes a byte: a restore (`sandbox::machine::bring_up`) spawns it while
//! the snapshot's guest RAM is still being copied, so bwrap's setup and the cgroup move
//! (right after the network helper's, in one burst of writes) are off the critical path,
//! and releases it once the copy is in place. A boot releases it at once
//! (`jail::start_qemu`).
//!
//! QEMU is in its cgroup before it runs at all, so no QEMU is ever outside it. A
//! [`HeldQemu`] dropped unreleased (a failed copy, say) kills the held process first, so
//! the pipe's end closing (which bwrap reads as a release) never lets QEMU run. If atoll
//! itself dies while holding, bwrap runs QEMU: a restore's QEMU then waits stopped for a
//! state that never comes (`-incoming defer`), as a restore abandoned after QEMU started
//! always has, and the record names it for `atoll kill`.

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use super::{JailError, JailedQemu, user};
use crate::vmm::process::ProcRef;

/// A QEMU held by its bwrap, waiting to run.
#[derive(Debug)]
pub struct HeldQemu {
    /// The jailed process (what is recorded is `qemu`).
    jailed: Option<JailedQemu>,
    /// atoll's end of bwrap's `--block-fd` pipe.
    release: Option<OwnedFd>,
    /// A restore's private guest RAM, to hand to QEMU's user (atoll being root) once it
    /// is in place.
    ram: Option<(PathBuf, user::RunAs)>,
}

impl HeldQemu {
    /// `jailed`, held until a byte is written to `release`.
    pub(super) fn new(jailed: JailedQemu, release: OwnedFd, ram: Option<(PathBuf, user::RunAs)>) -> HeldQemu {
        HeldQemu { jailed: Some(jailed), release: Some(release), ram }
    }

    /// QEMU's process (held or running), to record.
    pub fn qemu(&self) -> Option<ProcRef> {
        self.jailed.as_ref().map(|j| j.qemu)
    }

    /// Lets QEMU run: its guest RAM (in place by now) handed to its user, then the byte
    /// bwrap waits for. On an error it stays held (and is killed when dropped).
    pub fn release(mut self) -> Result<JailedQemu, JailError> {
        if let Some((ram, run_as)) = &self.ram {
            user::grant(ram, *run_as, 0o660)?;
        }
        if let Some(fd) = &self.release {
            let written = loop {
                match rustix::io::write(fd, b"1") {
                    Err(rustix::io::Errno::INTR) => {}
                    other => break other,
                }
            };
            written.map_err(|e| JailError::Pipe(e.into()))?;
        }
        self.release = None;
        Ok(self.jailed.take().expect("a held QEMU is released once"))
    }
}

impl Drop for HeldQemu {
    fn drop(&mut self) {
        if let (Some(j), Some(_)) = (&self.jailed, &self.release) {
            // Before the pipe closes, which bwrap would take as the release.
            j.qemu.kill_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd, AsRawFd};
    use std::time::Duration;

    use super::*;

    /// Holds `sh -c 'touch <marker>'` in a real bwrap, as [`super::super::hold_qemu`]
    /// holds QEMU.
    fn hold(marker: &std::path::Path) -> HeldQemu {
        let bwrap = crate::vmm::process::find_in_path(super::super::BWRAP).expect("bwrap is installed");
        let dir = marker.parent().unwrap().display().to_string();
        let pipe = || rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        let ((info_r, info_w), (block_r, block_w)) = (pipe(), pipe());
        let mut args: Vec<String> =
            ["--ro-bind", "/", "/", "--bind", &dir, &dir, "--unshare-pid", "--as-pid-1"]
                .map(String::from)
                .to_vec();
        if !rustix::process::geteuid().is_root() {
            args.push("--unshare-user".into());
        }
        let (info, block) = (info_w.as_raw_fd(), block_r.as_raw_fd());
        args.extend(["--info-fd".into(), info.to_string(), "--block-fd".into(), block.to_string()]);
        args.extend(["/bin/sh".into(), "-c".into(), format!("touch '{}'", marker.display())]);
        let log = std::fs::File::open("/dev/null").unwrap();
        let attach = super::super::shares::Attach::default();
        let child =
            super::super::spawn(&bwrap, &args, log.as_fd(), Vec::new(), &[info, block], attach, Vec::new())
                .unwrap();
        drop((info_w, block_r));
        let pid = super::super::read_child_pid(info_r).unwrap();
        let qemu = ProcRef::of(pid).expect("held, not ended");
        HeldQemu::new(JailedQemu { child, qemu, log: super::super::QemuLog(None) }, block_w, None)
    }

    /// A held process runs nothing until released; dropped unreleased, it is killed
    /// and never runs (its pipe's end closing would otherwise release it).
    #[tokio::test]
    async fn a_held_process_runs_only_once_released() {
        let d = tempfile::tempdir().unwrap();
        let dropped = d.path().join("dropped");
        let held = hold(&dropped);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!dropped.exists(), "it ran while held");
        let pid = held.qemu().unwrap();
        drop(held);
        assert!(pid.wait_gone(Duration::from_secs(5)).await, "a dropped held process is ended");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!dropped.exists(), "a dropped held process ran its command");

        let released = d.path().join("released");
        let mut jailed = hold(&released).release().unwrap();
        let status =
            tokio::time::timeout(Duration::from_secs(10), jailed.child.wait()).await.unwrap().unwrap();
        assert!(status.success() && released.exists(), "released, it runs: {status}");
    }
}
