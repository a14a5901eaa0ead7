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
