//! Inside a real VM: `sbx create` boot-to-READY next to a bare boot of the same kernel
//! and initramfs, exec round trips over virtio-vsock, and `sbx cp` into and out of it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use sbx::client::{Client, ExecSpec};
use sbx_proto::Address;
use serde::Deserialize;

use crate::stats::Samples;

/// What `sbx create --json` prints that we use.
#[derive(Deserialize)]
struct Created {
    name: String,
    address: String,
    accel: String,
}

/// The figures of one VM run.
pub(crate) struct VmFigures {
    /// QEMU accelerator used.
    pub(crate) accel: String,
    /// `sbx create` until it returned (READY seen).
    pub(crate) create: Samples,
    /// QEMU with the same kernel and initramfs and an init that powers off at once.
    pub(crate) bare: Samples,
    /// Exec `true` through the typed client over hybrid vsock.
    pub(crate) exec: Samples,
    /// Bytes copied each way.
    pub(crate) copy_bytes: u64,
    /// `sbx cp` host to guest (tmpfs).
    pub(crate) upload: Duration,
    /// `sbx cp` guest to host.
    pub(crate) download: Duration,
}

/// The minimal template's directory, if `rootfs/` built it.
pub(crate) fn template_dir() -> Option<PathBuf> {
    let data = std::env::var_os("SBX_DATA_DIR").map(PathBuf::from).or_else(|| {
        let xdg = std::env::var_os("XDG_DATA_HOME").map(PathBuf::from);
        xdg.or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .map(|d| d.join("sbx"))
    })?;
    let dir = data.join("templates/minimal");
    (dir.join("vmlinux").exists() && dir.join("initrd.cpio").exists()).then_some(dir)
}

fn sbx(sbx_bin: &Path, state: &Path, args: &[&str]) -> Result<std::process::Output> {
    let out = Command::new(sbx_bin)
        .env("SBX_STATE_DIR", state)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("run sbx")?;
    ensure!(
        out.status.success(),
        "`sbx {}` failed with {}: {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(out)
}

/// Boots `boots` sandboxes (keeping the last for the other figures) and as many bare VMs.
pub(crate) fn measure(
    sbx_bin: &Path,
    rt: &tokio::runtime::Runtime,
    scratch: &Path,
    boots: usize,
    execs: usize,
    copy_bytes: u64,
) -> Result<VmFigures> {
    let template = template_dir().context("no minimal template; build it with rootfs/build-minimal.sh")?;
    let state = scratch.join("vm-state");
    fs::create_dir_all(&state)?;
    let mut create = Vec::new();
    let mut last: Option<Created> = None;
    for i in 0..boots.max(1) {
        if let Some(prev) = last.take() {
            sbx(sbx_bin, &state, &["kill", &prev.name])?;
        }
        let name = format!("bench-{i}");
        let t = Instant::now();
        let out = sbx(sbx_bin, &state, &["create", "--name", &name, "--json"])?;
        create.push(t.elapsed());
        last = Some(serde_json::from_slice(&out.stdout).context("sbx create --json printed no sandbox")?);
    }
    let vm = last.context("no sandbox booted")?;
    let result = with_vm(sbx_bin, rt, scratch, &state, &vm, execs, copy_bytes);
    let killed = sbx(sbx_bin, &state, &["kill", &vm.name]);
    let (exec, upload, download) = result?;
    killed?;
    let bare = Samples::from_durations(
        (0..boots.max(1)).map(|_| bare_boot(&template, &vm.accel, scratch)).collect::<Result<_>>()?,
    );
    Ok(VmFigures {
        accel: vm.accel,
        create: Samples::from_durations(create),
        bare,
        exec,
        copy_bytes,
        upload,
        download,
    })
}

fn with_vm(
    sbx_bin: &Path,
    rt: &tokio::runtime::Runtime,
    scratch: &Path,
    state: &Path,
    vm: &Created,
    execs: usize,
    copy_bytes: u64,
) -> Result<(Samples, Duration, Duration)> {
    let addr: Address = vm.address.parse().context("the sandbox's agent address")?;
    let exec = rt.block_on(async {
        let c = Client::connect(&addr, Duration::from_secs(10)).await?;
        let spec = ExecSpec::argv(["true"]);
        Samples::measure_async(execs / 10 + 1, execs, || async {
            let r = tokio::time::timeout(Duration::from_secs(60), c.exec(&spec))
                .await
                .context("Exec `true` in the VM got no answer within 60 s")??;
            ensure!(r.status.code == Some(0), "`true` failed in the VM: {:?}", r.status);
            Ok(())
        })
        .await
    })?;
    let src = scratch.join("vm-copy.bin");
    let back = scratch.join("vm-copy.back");
    crate::throughput::random_file(&src, copy_bytes, 0x77)?;
    let guest = format!("{}:/tmp/vm-copy.bin", vm.name);
    let t = Instant::now();
    sbx(sbx_bin, state, &["cp", &src.display().to_string(), &guest])?;
    let upload = t.elapsed();
    let t = Instant::now();
    sbx(sbx_bin, state, &["cp", &guest, &back.display().to_string()])?;
    let download = t.elapsed();
    ensure!(fs::metadata(&back)?.len() == copy_bytes, "the copy out of the VM has the wrong size");
    fs::remove_file(&src)?;
    fs::remove_file(&back)?;
    Ok((exec, upload, download))
}

/// QEMU with the sandbox's machine, kernel and initramfs, whose init powers off at
/// once: spawn until QEMU exits.
fn bare_boot(template: &Path, accel: &str, scratch: &Path) -> Result<Duration> {
    let t = Instant::now();
    let status = Command::new("qemu-system-x86_64")
        .args(["-machine", "q35", "-accel", accel, "-smp", "1", "-m", "512M"])
        .args(["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"])
        .arg("-serial")
        .arg(format!("file:{}", scratch.join("bare-boot.log").display()))
        .arg("-kernel")
        .arg(template.join("vmlinux"))
        .arg("-initrd")
        .arg(template.join("initrd.cpio"))
        .args(["-append", "console=ttyS0 panic=-1 reboot=t quiet rdinit=/sbin/poweroff -- -f"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .context("run qemu-system-x86_64")?;
    if !status.success() {
        bail!("the bare VM boot failed with {status}; see {}", scratch.join("bare-boot.log").display());
    }
    Ok(t.elapsed())
}
