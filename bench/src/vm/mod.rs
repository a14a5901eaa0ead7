//! Inside a real VM: `atoll create` boot-to-READY next to a bare boot of the same QEMU
//! line whose init only announces itself on the agent link's virtio-serial port
//! ([`bare`]); Exec round trips in the sandbox next to a raw 64-byte echo over the bare
//! VM's port, and `atoll cp` into and out of the sandbox's tmpfs next to a raw stream over
//! the bare VM's port into and out of its tmpfs ([`raw`]).

mod bare;
mod raw;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use atoll::client::{Client, ExecSpec};
use atoll_proto::Address;
use serde::Deserialize;
use tokio::runtime::Runtime;

use crate::stats::Samples;

/// What `atoll create --json` prints that we use.
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
    /// `atoll create` until it returned (READY seen).
    pub(crate) create: Samples,
    /// The same VM whose init only announces itself: spawn until READY.
    pub(crate) bare: Samples,
    /// Exec `true` through the typed client over the agent link.
    pub(crate) exec: Samples,
    /// 64-byte ping-pong with the raw echo over the bare VM's port.
    pub(crate) echo: Samples,
    /// Spawn+wait of `true` inside the guest, no RPC.
    pub(crate) spawn: Samples,
    /// Bytes copied each way.
    pub(crate) copy_bytes: u64,
    /// Best runs of the copies.
    pub(crate) copies: Copies,
}

/// Best-of-N durations of the copies, atoll and raw, each way.
pub(crate) struct Copies {
    /// `atoll cp --sync` host to guest tmpfs.
    pub(crate) upload: Duration,
    /// `atoll cp --sync` guest tmpfs to host.
    pub(crate) download: Duration,
    /// Raw port stream host to the bare guest's tmpfs (fsynced).
    pub(crate) raw_upload: Duration,
    /// Raw port stream the bare guest's tmpfs to host (fsynced).
    pub(crate) raw_download: Duration,
}

/// What the VM group needs.
pub(crate) struct VmRun<'a> {
    pub(crate) atoll_bin: &'a Path,
    pub(crate) floor_bin: &'a Path,
    pub(crate) scratch: &'a Path,
    pub(crate) boots: usize,
    pub(crate) execs: usize,
    pub(crate) copy_bytes: u64,
    pub(crate) copy_runs: usize,
}

/// The minimal template's directory, if `rootfs/` built it.
pub(crate) fn template_dir() -> Option<PathBuf> {
    let dir = atoll::vmm::dirs::templates_dir().ok()?.join("minimal");
    (dir.join("vmlinux").exists() && dir.join("initrd.cpio").exists()).then_some(dir)
}

/// Runs `atoll` on the state directory `state`; template snapshots are off, so `atoll
/// create` boots, as the bare VM does.
fn atoll(atoll_bin: &Path, state: &Path, args: &[&str]) -> Result<std::process::Output> {
    let out = Command::new(atoll_bin)
        .env("ATOLL_STATE_DIR", state)
        .env("ATOLL_TEMPLATE_SNAPSHOT", "off")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("run atoll")?;
    ensure!(
        out.status.success(),
        "`atoll {}` failed with {}: {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(out)
}

/// Guest memory of both VMs: `atoll create`'s default.
const MEMORY_MIB: u32 = 512;

/// Alternates bare boots and `atoll create --net none` `boots` times (keeping the last
/// sandbox for the other figures), so both see the same machine load and the same
/// devices; then boots one more bare VM for the raw floors.
pub(crate) fn measure(run: &VmRun<'_>, rt: &Runtime) -> Result<VmFigures> {
    template_dir().context("no minimal template; build it with rootfs/build-minimal.sh")?;
    let bare_vm = bare::BareVm::prepare(run.floor_bin, run.scratch)?;
    let bare_dir = run.scratch.join("bare-vm");
    let state = run.scratch.join("vm-state");
    fs::create_dir_all(&state)?;
    // atoll refuses a state directory others may enter.
    fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let (mut create, mut bare) = (Vec::new(), Vec::new());
    let mut last: Option<Created> = None;
    let memory = MEMORY_MIB.to_string();
    for i in 0..run.boots.max(1) {
        if let Some(prev) = last.take() {
            atoll(run.atoll_bin, &state, &["kill", &prev.name])?;
        }
        rt.block_on(async {
            let (took, vm, _floor) = bare_vm.boot(&bare_dir, MEMORY_MIB).await?;
            vm.stop().await;
            bare.push(took);
            anyhow::Ok(())
        })?;
        let name = format!("bench-{i}");
        let t = Instant::now();
        let out = atoll(
            run.atoll_bin,
            &state,
            &["create", "--name", &name, "--memory", &memory, "--net", "none", "--json"],
        )?;
        create.push(t.elapsed());
        last = Some(serde_json::from_slice(&out.stdout).context("atoll create --json printed no sandbox")?);
    }
    let vm = last.context("no sandbox booted")?;
    let result = rt.block_on(bare_vm.boot(&bare_dir, MEMORY_MIB)).and_then(|(_, bare_running, mut floor)| {
        let r = with_vms(run, rt, &state, &vm, &mut floor);
        rt.block_on(bare_running.stop());
        r
    });
    let killed = atoll(run.atoll_bin, &state, &["kill", &vm.name]);
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

/// `bench/egress.sh`'s floor: a bare VM with room for `mib` MiB on its tmpfs gets that
/// many random bytes (untimed), then streams them to the host `runs` times, read and
/// discarded; returns the best time.
pub(crate) fn port_stream(
    floor_bin: &Path,
    scratch: &Path,
    mib: u64,
    runs: usize,
    rt: &Runtime,
) -> Result<Duration> {
    template_dir().context("no minimal template; build it with rootfs/build-minimal.sh")?;
    let bare_vm = bare::BareVm::prepare(floor_bin, scratch)?;
    let src = scratch.join("port-stream.bin");
    crate::throughput::random_file(&src, mib << 20, 0x78)?;
    let memory = u32::try_from(mib * 2 + 256).context("too many MiB")?;
    rt.block_on(async {
        let (_, vm, mut floor) = bare_vm.boot(&scratch.join("bare-vm"), memory).await?;
        let streamed = async {
            floor.upload(&src).await?;
            let mut best = Duration::MAX;
            for _ in 0..runs.max(1) {
                let (took, len) = floor.download(None).await?;
                ensure!(len == mib << 20, "the port source sent {len} bytes, not {}", mib << 20);
                best = best.min(took);
            }
            anyhow::Ok(best)
        }
        .await;
        vm.stop().await;
        fs::remove_file(&src)?;
        streamed
    })
}

/// MiB of guest memory written once before the copies (the guest has 512 MiB; its
/// tmpfs takes up to half).
const WARM_FILL_MIB: u64 = 224;

/// The figures with both VMs up: the sandbox `vm` (exec, spawn, `atoll cp`) and the bare
/// VM behind `floor` (echo, raw streams).
fn with_vms(
    run: &VmRun<'_>,
    rt: &Runtime,
    state: &Path,
    vm: &Created,
    floor: &mut raw::PortFloor,
) -> Result<(Samples, Samples, Samples, Copies)> {
    let addr: Address = vm.address.parse().context("the sandbox's agent address")?;
    let guest_file = "/tmp/vm-copy.bin";
    let client = rt.block_on(Client::connect(&addr, Duration::from_secs(10)))?;
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
    let spawn = rt.block_on(raw::spawn_true(&client, run.floor_bin, n))?;

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
    // first use), so in both VMs most of it is written once first (a tmpfs file,
    // removed), then one untimed round, and the copy's old file goes before each upload
    // (the floor's sink truncates its file): both sides then write into guest memory
    // that was just freed.
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
        floor.warm(WARM_FILL_MIB).await
    })?;
    atoll(run.atoll_bin, state, &["cp", &src.display().to_string(), &guest])?;
    rt.block_on(floor.upload(&src))?;
    // Alternated, best of `copy_runs`: the best run is the least disturbed one. Each
    // side copies in and straight back out, and which side goes first swaps every round.
    // Under TCG, a 64 MiB `atoll cp` into the guest right after a raw stream took 0.6-0.7 s
    // where one after another `atoll cp` took 0.37 s (both in one VM, when the raw floor
    // ran in the sandbox): the guest spent up to twice the CPU on the same work, and it
    // wore off over two copies. This way each side's download follows its own upload,
    // and each side's upload follows itself in half the rounds and the other side in
    // the rest.
    for round in 0..run.copy_runs.max(1) {
        let turns = if round % 2 == 0 { [true, false] } else { [false, true] };
        for atoll_turn in turns {
            if atoll_turn {
                rt.block_on(client.remove(guest_file, false))?;
                let t = Instant::now();
                atoll(run.atoll_bin, state, &["cp", "--sync", &src.display().to_string(), &guest])?;
                best.upload = best.upload.min(t.elapsed());
                let t = Instant::now();
                atoll(run.atoll_bin, state, &["cp", "--sync", &guest, &back.display().to_string()])?;
                best.download = best.download.min(t.elapsed());
                check_back("atoll cp")?;
            } else {
                best.raw_upload = best.raw_upload.min(rt.block_on(floor.upload(&src))?);
                let (took, len) = rt.block_on(floor.download(Some(&back)))?;
                ensure!(len == run.copy_bytes, "the port source sent {len} bytes, not {}", run.copy_bytes);
                best.raw_download = best.raw_download.min(took);
                check_back("the raw port stream")?;
            }
        }
    }
    fs::remove_file(&src)?;
    Ok((exec, echo, spawn, best))
}
