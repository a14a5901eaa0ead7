//! Inside a real VM: `sbx create` boot-to-READY next to a bare boot that only announces
//! itself ([`bare`]); Exec round trips next to a raw vsock echo, and `sbx cp` into and
//! out of the guest's tmpfs next to a raw vsock stream ([`raw`]), in the same VM.

mod bare;
mod raw;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
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
    /// The same VM whose init only announces itself: spawn until READY.
    pub(crate) bare: Samples,
    /// Exec `true` through the typed client over hybrid vsock.
    pub(crate) exec: Samples,
    /// 64-byte ping-pong with the raw vsock echo in the same VM.
    pub(crate) echo: Samples,
    /// Spawn+wait of `true` inside the guest, no RPC.
    pub(crate) spawn: Samples,
    /// Bytes copied each way.
    pub(crate) copy_bytes: u64,
    /// Best runs of the copies.
    pub(crate) copies: Copies,
}

/// Best-of-N durations of the copies, sbx and raw, each way.
pub(crate) struct Copies {
    /// `sbx cp --sync` host to guest tmpfs.
    pub(crate) upload: Duration,
    /// `sbx cp --sync` guest tmpfs to host.
    pub(crate) download: Duration,
    /// Raw vsock stream host to guest tmpfs (fsynced).
    pub(crate) raw_upload: Duration,
    /// Raw vsock stream guest tmpfs to host (fsynced).
    pub(crate) raw_download: Duration,
}

/// What the VM group needs.
pub(crate) struct VmRun<'a> {
    pub(crate) sbx_bin: &'a Path,
    pub(crate) floor_bin: &'a Path,
    pub(crate) scratch: &'a Path,
    pub(crate) boots: usize,
    pub(crate) execs: usize,
    pub(crate) copy_bytes: u64,
    pub(crate) copy_runs: usize,
}

/// The minimal template's directory, if `rootfs/` built it.
pub(crate) fn template_dir() -> Option<PathBuf> {
    let dir = sbx::vmm::dirs::templates_dir().ok()?.join("minimal");
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

/// Alternates bare boots and `sbx create` `boots` times (keeping the last sandbox for
/// the other figures), so both see the same machine load.
pub(crate) fn measure(run: &VmRun<'_>, rt: &tokio::runtime::Runtime) -> Result<VmFigures> {
    template_dir().context("no minimal template; build it with rootfs/build-minimal.sh")?;
    let bare_vm = bare::BareVm::prepare(run.floor_bin, run.scratch)?;
    let state = run.scratch.join("vm-state");
    fs::create_dir_all(&state)?;
    let (mut create, mut bare) = (Vec::new(), Vec::new());
    let mut last: Option<Created> = None;
    for i in 0..run.boots.max(1) {
        if let Some(prev) = last.take() {
            sbx(run.sbx_bin, &state, &["kill", &prev.name])?;
        }
        bare.push(rt.block_on(bare_vm.boot(&run.scratch.join("bare-vm")))?);
        let name = format!("bench-{i}");
        let t = Instant::now();
        let out = sbx(run.sbx_bin, &state, &["create", "--name", &name, "--json"])?;
        create.push(t.elapsed());
        last = Some(serde_json::from_slice(&out.stdout).context("sbx create --json printed no sandbox")?);
    }
    let vm = last.context("no sandbox booted")?;
    let result = with_vm(run, rt, &state, &vm);
    let killed = sbx(run.sbx_bin, &state, &["kill", &vm.name]);
    let (exec, echo, spawn, copies) = result?;
    killed?;
    Ok(VmFigures {
        accel: vm.accel,
        create: Samples::from_durations(create),
        bare: Samples::from_durations(bare),
        exec,
        echo,
        spawn,
        copy_bytes: run.copy_bytes,
        copies,
    })
}

/// MiB of guest memory written once before the copies (the guest has 512 MiB; its
/// tmpfs takes up to half).
const WARM_FILL_MIB: u64 = 224;

fn with_vm(
    run: &VmRun<'_>,
    rt: &tokio::runtime::Runtime,
    state: &Path,
    vm: &Created,
) -> Result<(Samples, Samples, Samples, Copies)> {
    let addr: Address = vm.address.parse().context("the sandbox's agent address")?;
    let Address::HybridVsock { path: vsock, .. } = &addr else {
        anyhow::bail!("the sandbox's address {addr} is not hybrid vsock");
    };
    let guest_file = "/tmp/vm-copy.bin";
    let (client, floor) = rt.block_on(async {
        let c = Client::connect(&addr, Duration::from_secs(10)).await?;
        let floor = raw::Floor::start(&c, vsock, run.floor_bin, guest_file).await?;
        anyhow::Ok((c, floor))
    })?;
    let (warm, n) = (run.execs / 10 + 1, run.execs);
    let exec = rt.block_on(async {
        let spec = ExecSpec::argv(["true"]);
        Samples::measure_async(warm, n, || async {
            let r = tokio::time::timeout(Duration::from_secs(60), client.exec(&spec))
                .await
                .context("Exec `true` in the VM got no answer within 60 s")??;
            ensure!(r.status.code == Some(0), "`true` failed in the VM: {:?}", r.status);
            Ok(())
        })
        .await
    })?;
    let echo = rt.block_on(floor.echo(warm, n))?;
    let spawn = rt.block_on(raw::Floor::spawn_true(&client, n))?;

    let src = run.scratch.join("vm-copy.bin");
    let back = run.scratch.join("vm-copy.back");
    crate::throughput::random_file(&src, run.copy_bytes, 0x77)?;
    let guest = format!("{}:{guest_file}", vm.name);
    let check_back = |what: &str| -> Result<()> {
        ensure!(fs::metadata(&back)?.len() == run.copy_bytes, "{what} out of the VM has the wrong size");
        fs::remove_file(&back)?;
        Ok(())
    };
    let mut best = Copies {
        upload: Duration::MAX,
        download: Duration::MAX,
        raw_upload: Duration::MAX,
        raw_download: Duration::MAX,
    };
    // Guest memory the VM never touched costs more to write under TCG (QEMU backs it on
    // first use), so most of it is written once first (a tmpfs file, removed), then one
    // untimed round, and the copy's old file goes before each upload: both sides then
    // write into guest memory that was just freed.
    rt.block_on(async {
        // busybox's `head -c` takes no size suffix, and `&&` keeps a failed fill from
        // passing unseen, as it once did.
        let fill = ExecSpec::shell(format!(
            "dd if=/dev/zero of=/tmp/warm-fill bs=1048576 count={WARM_FILL_MIB} && rm /tmp/warm-fill"
        ));
        let r = client.exec(&fill).await?;
        ensure!(
            r.status.code == Some(0),
            "warming the guest's memory failed: {:?}: {}",
            r.status,
            String::from_utf8_lossy(&r.stderr.data)
        );
        anyhow::Ok(())
    })?;
    sbx(run.sbx_bin, state, &["cp", &src.display().to_string(), &guest])?;
    rt.block_on(floor.upload(&src))?;
    // Alternated, best of `copy_runs`: the best run is the least disturbed one. Each
    // side copies in and straight back out, and which side goes first swaps every round.
    // Under TCG, a 64 MiB `sbx cp` into the guest right after a raw stream took 0.6-0.7 s
    // where one after another `sbx cp` took 0.37 s: the guest spent up to twice the CPU
    // on the same work, and it wore off over two copies. This way each side's download
    // follows its own upload, and each side's upload follows itself in half the rounds
    // and the other side in the rest. The raw source streams the guest file `sbx cp`
    // wrote, which is removed only right before the next `sbx cp` upload.
    let upload_sbx = || -> Result<Duration> {
        rt.block_on(client.remove(guest_file, false))?;
        let t = Instant::now();
        sbx(run.sbx_bin, state, &["cp", "--sync", &src.display().to_string(), &guest])?;
        Ok(t.elapsed())
    };
    let download_sbx = || -> Result<Duration> {
        let t = Instant::now();
        sbx(run.sbx_bin, state, &["cp", "--sync", &guest, &back.display().to_string()])?;
        let took = t.elapsed();
        check_back("sbx cp")?;
        Ok(took)
    };
    let download_raw = || -> Result<Duration> {
        let (took, len) = rt.block_on(floor.download(&back))?;
        ensure!(len == run.copy_bytes, "the vsock source sent {len} bytes, not {}", run.copy_bytes);
        check_back("the raw vsock stream")?;
        Ok(took)
    };
    for round in 0..run.copy_runs.max(1) {
        let turns = if round % 2 == 0 { [true, false] } else { [false, true] };
        for sbx_turn in turns {
            if sbx_turn {
                best.upload = best.upload.min(upload_sbx()?);
                best.download = best.download.min(download_sbx()?);
            } else {
                best.raw_upload = best.raw_upload.min(rt.block_on(floor.upload(&src))?);
                best.raw_download = best.raw_download.min(download_raw()?);
            }
        }
    }
    fs::remove_file(&src)?;
    rt.block_on(client.remove(raw::SINK_FILE, false))?;
    Ok((exec, echo, spawn, best))
}
