//! The bare VM `atoll create` is compared with: the same QEMU command line (built by
//! atoll's own launcher: the same devices, among them the agent link's virtio-serial port
//! on `<dir>/agent.port`), the same kernel, initramfs, `/init` and modules, but with
//! `/sbin/atoll-agent` replaced by `atoll-link-floor`, which announces `READY` on the port
//! as soon as it has it open and then serves the raw floors ([`super::raw`]).
//! A boot is timed from spawning QEMU until the `READY` line arrives on `agent.port`.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use atoll::sandbox::CreateOptions;
use atoll::vmm::agent_link::PORT_SOCKET;
use atoll::vmm::launcher::{self, GuestRam, QEMU, VmSpec};
use atoll::vmm::process::find_in_path;
use atoll::vmm::state::Paths;
use atoll::vmm::template;
use atoll::vmm::template::Template;
use tokio::io::AsyncReadExt;
use tokio::net::UnixStream;

use super::raw::PortFloor;

/// How long a bare boot may take before it counts as failed.
const BOOT_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest `READY` line accepted.
const MAX_LINE: usize = 256;

/// The minimal template with its initramfs swapped for the bare one.
pub(crate) struct BareVm {
    template: Template,
    qemu: PathBuf,
    accel: launcher::Accel,
}

/// A booted bare VM's QEMU. Dropping it ends QEMU and removes the VM's directory.
pub(crate) struct Running {
    qemu: tokio::process::Child,
    dir: PathBuf,
}

impl Running {
    /// Ends QEMU and waits for it; the directory goes with the drop.
    pub(crate) async fn stop(mut self) {
        let _ = self.qemu.kill().await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.qemu.start_kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl BareVm {
    /// Writes `<scratch>/bare-initrd.cpio`: the template's initramfs followed by a cpio
    /// holding `floor_bin` as `sbin/atoll-agent` (the kernel unpacks concatenated
    /// archives in order, so the later file wins).
    pub(crate) fn prepare(floor_bin: &Path, scratch: &Path) -> Result<BareVm> {
        let templates = atoll::vmm::dirs::templates_dir()?;
        let mut template = template::load(&templates, template::DEFAULT_TEMPLATE)?;
        let base = template.initrd.clone().context("the minimal template has no initramfs")?;
        if base.extension().is_some_and(|e| e == "gz") {
            bail!("the bare boot needs an uncompressed initramfs; rebuild with rootfs/build-minimal.sh");
        }
        let mut initrd = fs::read(&base).with_context(|| format!("read {}", base.display()))?;
        let floor = fs::read(floor_bin).with_context(|| {
            format!(
                "read {}; build it with `cargo build --release -p atoll-link-floor --target x86_64-unknown-linux-musl`",
                floor_bin.display()
            )
        })?;
        initrd.resize(initrd.len().next_multiple_of(4), 0);
        newc_entry(&mut initrd, "sbin/atoll-agent", 0o100_755, &floor);
        newc_entry(&mut initrd, "TRAILER!!!", 0, &[]);
        let path = scratch.join("bare-initrd.cpio");
        fs::write(&path, initrd)?;
        template.initrd = Some(path);
        Ok(BareVm { template, qemu: find_in_path(QEMU)?, accel: launcher::probe_accel() })
    }

    /// Boots one bare VM of `memory_mib` in `dir` (made afresh): returns the time from
    /// spawning QEMU to `READY`, the running VM, and its floor over QEMU's chardev
    /// socket of the port.
    pub(crate) async fn boot(&self, dir: &Path, memory_mib: u32) -> Result<(Duration, Running, PortFloor)> {
        let _ = fs::remove_dir_all(dir);
        fs::create_dir_all(dir)?;
        let paths = Paths::in_dir(dir, false);
        let defaults = CreateOptions::default();
        let spec = VmSpec {
            id: "bare",
            name: "bare",
            template: &self.template,
            memory_mib,
            cpus: defaults.cpus,
            accel: self.accel,
            paths: &paths,
            network: false,
            storage: &defaults.storage,
            ram: GuestRam::Fresh,
        };
        let t = Instant::now();
        let mut qemu = spawn_bare(&self.qemu, &launcher::qemu_args(&spec), &paths.qemu_log)?;
        let port = dir.join(PORT_SOCKET);
        let ready = async {
            // QEMU makes the chardev socket as it starts, before the guest runs.
            let mut stream = loop {
                match UnixStream::connect(&port).await {
                    Ok(s) => break s,
                    Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                }
            };
            let mut line = Vec::new();
            while !line.ends_with(b"\n") {
                let b = stream.read_u8().await.context("the bare VM's port closed before READY")?;
                line.push(b);
                if line.len() > MAX_LINE {
                    bail!("the bare VM sent no READY line: {}", String::from_utf8_lossy(&line));
                }
            }
            let took = t.elapsed();
            if !line.starts_with(b"READY ") {
                bail!("the bare VM announced {:?}, not READY", String::from_utf8_lossy(&line));
            }
            anyhow::Ok((took, stream))
        };
        let console = || launcher::tail(&paths.console_log, 10);
        let booted = tokio::select! {
            r = ready => r,
            s = qemu.wait() => Err(anyhow::anyhow!(
                "QEMU exited during the bare boot ({s:?}); console: {}",
                console()
            )),
            () = tokio::time::sleep(BOOT_TIMEOUT) => Err(anyhow::anyhow!(
                "no READY from the bare boot within {} s; console: {}",
                BOOT_TIMEOUT.as_secs(),
                console()
            )),
        };
        let running = Running { qemu, dir: dir.to_path_buf() };
        let (took, stream) = booted?;
        Ok((took, running, PortFloor::new(stream)))
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

/// QEMU as a bare process (no jail: this is the yardstick the jailed path is measured
/// against), output appended to `log`.
fn spawn_bare(
    program: &std::path::Path,
    args: &[String],
    log: &std::path::Path,
) -> std::io::Result<tokio::process::Child> {
    let open = || std::fs::OpenOptions::new().create(true).append(true).open(log);
    tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(open()?)
        .stderr(open()?)
        .spawn()
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
