//! The bare boot `sbx create` is compared with: the same QEMU command line (built by
//! sbx's own launcher), the same kernel, initramfs, `/init` and vsock modules, started
//! the same way (vhost-device-vsock, then QEMU, a listener on `vm.vsock_1025`), but with
//! `/sbin/sbx-agent` replaced by `sbx-vsock-floor`, which only announces `READY`.
//! Timed from spawning vhost-device-vsock until the `READY` line arrives.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use sbx::sandbox::CreateOptions;
use sbx::vmm::launcher::{self, QEMU, VHOST_VSOCK, VmSpec};
use sbx::vmm::process::{find_in_path, spawn_detached};
use sbx::vmm::ready::ReadyListener;
use sbx::vmm::state::Paths;
use sbx::vmm::template;
use sbx::vmm::template::Template;

/// How long a bare boot may take before it counts as failed.
const BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// The minimal template with its initramfs swapped for the bare one.
pub(crate) struct BareVm {
    template: Template,
    qemu: PathBuf,
    vhost: PathBuf,
    accel: launcher::Accel,
}

impl BareVm {
    /// Writes `<scratch>/bare-initrd.cpio`: the template's initramfs followed by a cpio
    /// holding `floor_bin` as `sbin/sbx-agent` (the kernel unpacks concatenated
    /// archives in order, so the later file wins).
    pub(crate) fn prepare(floor_bin: &Path, scratch: &Path) -> Result<BareVm> {
        let templates = sbx::vmm::dirs::templates_dir()?;
        let mut template = template::load(&templates, template::DEFAULT_TEMPLATE)?;
        let base = template.initrd.clone().context("the minimal template has no initramfs")?;
        if base.extension().is_some_and(|e| e == "gz") {
            bail!("the bare boot needs an uncompressed initramfs; rebuild with rootfs/build-minimal.sh");
        }
        let mut initrd = fs::read(&base).with_context(|| format!("read {}", base.display()))?;
        let floor = fs::read(floor_bin).with_context(|| {
            format!(
                "read {}; build it with `cargo build --release -p sbx-vsock-floor --target x86_64-unknown-linux-musl`",
                floor_bin.display()
            )
        })?;
        initrd.resize(initrd.len().next_multiple_of(4), 0);
        newc_entry(&mut initrd, "sbin/sbx-agent", 0o100_755, &floor);
        newc_entry(&mut initrd, "TRAILER!!!", 0, &[]);
        let path = scratch.join("bare-initrd.cpio");
        fs::write(&path, initrd)?;
        template.initrd = Some(path);
        Ok(BareVm {
            template,
            qemu: find_in_path(QEMU)?,
            vhost: find_in_path(VHOST_VSOCK)?,
            accel: launcher::probe_accel(),
        })
    }

    /// One bare boot in `dir` (removed afterwards): spawn to `READY`.
    pub(crate) async fn boot(&self, dir: &Path) -> Result<Duration> {
        let _ = fs::remove_dir_all(dir);
        fs::create_dir_all(dir)?;
        let paths = Paths::in_dir(dir, false);
        let defaults = CreateOptions::default();
        let spec = VmSpec {
            id: "bare",
            name: "bare",
            template: &self.template,
            memory_mib: defaults.memory_mib,
            cpus: defaults.cpus,
            accel: self.accel,
            paths: &paths,
            network: false,
            storage: &defaults.storage,
        };
        let t = Instant::now();
        let mut vhost = launcher::spawn_vhost(&self.vhost, 3, &paths)?;
        let booted = async {
            launcher::wait_vhost_socket(&mut vhost, &paths).await?;
            let ready = ReadyListener::bind(&paths.guest_port_socket(sbx_proto::limits::DEFAULT_READY_PORT))?;
            let mut qemu = spawn_detached(&self.qemu, &launcher::qemu_args(&spec), &paths.qemu_log)?;
            let r = tokio::select! {
                r = ready.wait() => r.map(|_| t.elapsed()).map_err(anyhow::Error::from),
                s = qemu.wait() => Err(anyhow::anyhow!(
                    "QEMU exited during the bare boot ({s:?}); console: {}",
                    launcher::tail(&paths.console_log, 10)
                )),
                () = tokio::time::sleep(BOOT_TIMEOUT) => Err(anyhow::anyhow!(
                    "no READY from the bare boot within {} s; console: {}",
                    BOOT_TIMEOUT.as_secs(),
                    launcher::tail(&paths.console_log, 10)
                )),
            };
            let _ = qemu.kill().await;
            r
        }
        .await;
        let _ = vhost.kill().await;
        let _ = fs::remove_dir_all(dir);
        booted
    }
}

/// Appends one newc cpio entry (a regular file, or the trailer when `mode` is 0).
fn newc_entry(out: &mut Vec<u8>, name: &str, mode: u32, data: &[u8]) {
    let fields = [
        0x7ff0_0001, // ino: unique, and nlink 1 means no hard-link bookkeeping
        mode,
        0,
        0,
        1,
        0,
        u32::try_from(data.len()).expect("the floor binary is far below 4 GiB"),
        0,
        0,
        0,
        0,
        u32::try_from(name.len() + 1).expect("short name"),
        0,
    ];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    out.resize(out.len().next_multiple_of(4), 0);
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(4), 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newc_entries_are_aligned_and_readable_by_cpio() {
        let mut a = Vec::new();
        newc_entry(&mut a, "sbin/x", 0o100_755, b"hello");
        newc_entry(&mut a, "TRAILER!!!", 0, &[]);
        assert_eq!(a.len() % 4, 0);
        let d = tempfile::tempdir().unwrap();
        let archive = d.path().join("a.cpio");
        fs::write(&archive, &a).unwrap();
        let out = std::process::Command::new("cpio")
            .args(["-t", "-F"])
            .arg(&archive)
            .output()
            .expect("cpio is installed by rootfs/setup.sh");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "sbin/x");
    }
}
