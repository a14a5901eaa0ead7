//! The raw virtio-vsock floor inside the sandbox: `sbx-vsock-floor` is written into the
//! guest with WriteFile, started as three background jobs (echo, sink, source), and
//! dialed from the host over the same hybrid-vsock socket sbx uses (`sbx::connect`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use sbx::client::{Client, ExecSpec, WriteOpts};
use sbx::connect::{AgentStream, ConnectError, dial};
use sbx_proto::Address;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::stats::Samples;

/// Where the floor binary goes in the guest.
const GUEST_BIN: &str = "/tmp/sbx-vsock-floor";
/// The guest file the sink writes: the same tmpfs `sbx cp` writes to.
pub(crate) const SINK_FILE: &str = "/tmp/raw-copy.bin";
const ECHO_PORT: u32 = 5001;
const SINK_PORT: u32 = 5002;
const SOURCE_PORT: u32 = 5003;
/// Copy buffer on the host side, as large as the guest side's.
const BUF: usize = 128 * 1024;

/// The floor's three servers in one sandbox.
pub(crate) struct Floor {
    vsock: PathBuf,
}

impl Floor {
    /// Copies `floor_bin` into the guest and starts echo, sink (into [`SINK_FILE`]) and
    /// source (serving `source_file`), then waits until all three answer.
    pub(crate) async fn start(
        client: &Client,
        vsock: &Path,
        floor_bin: &Path,
        source_file: &str,
    ) -> Result<Floor> {
        let bin = std::fs::read(floor_bin).with_context(|| {
            format!(
                "read {}; build it with `cargo build --release -p sbx-vsock-floor --target x86_64-unknown-linux-musl`",
                floor_bin.display()
            )
        })?;
        let opts = WriteOpts { mode: Some(0o755), ..WriteOpts::default() };
        client.write_bytes(GUEST_BIN, opts, Bytes::from(bin)).await.context("copy the floor into the VM")?;
        for args in [
            vec!["echo".to_string(), ECHO_PORT.to_string()],
            vec!["sink".into(), SINK_PORT.to_string(), SINK_FILE.into()],
            vec!["source".into(), SOURCE_PORT.to_string(), source_file.into()],
        ] {
            let argv = std::iter::once(GUEST_BIN.to_string()).chain(args);
            client.start_job(&ExecSpec::argv(argv)).await.context("start the floor in the VM")?;
        }
        let floor = Floor { vsock: vsock.to_path_buf() };
        for port in [ECHO_PORT, SINK_PORT, SOURCE_PORT] {
            drop(floor.dial(port).await?);
        }
        Ok(floor)
    }

    /// Dials guest `port`, retrying for a few seconds while the job starts listening.
    async fn dial(&self, port: u32) -> Result<AgentStream> {
        let addr = Address::HybridVsock { path: self.vsock.clone(), port };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match dial(&addr).await {
                Ok(s) => return Ok(s),
                Err(ConnectError::NotReady { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e).context("dial the vsock floor in the VM"),
            }
        }
    }

    /// 64-byte ping-pongs on one connection.
    pub(crate) async fn echo(&self, warmup: usize, n: usize) -> Result<Samples> {
        let mut s = self.dial(ECHO_PORT).await?;
        let ping = [0x5au8; 64];
        let mut pong = [0u8; 64];
        let mut out = Vec::with_capacity(n);
        for i in 0..warmup + n {
            let t = Instant::now();
            s.write_all(&ping).await?;
            s.read_exact(&mut pong).await?;
            if i >= warmup {
                out.push(t.elapsed());
            }
            ensure!(pong == ping, "the vsock echo answered different bytes");
        }
        Ok(Samples::from_durations(out))
    }

    /// Spawn+wait of `true` inside the guest, timed by the floor there: what Exec
    /// `true` costs without any RPC.
    pub(crate) async fn spawn_true(client: &Client, n: usize) -> Result<Samples> {
        let argv = [GUEST_BIN.to_string(), "spawn".into(), n.to_string(), "/bin/true".into()];
        let r = client.exec(&ExecSpec::argv(argv)).await.context("run the spawn floor in the VM")?;
        ensure!(r.status.code == Some(0), "the spawn floor failed in the VM: {:?}", r.status);
        let text = String::from_utf8_lossy(&r.stdout.data);
        let us: Vec<Duration> = text
            .lines()
            .map(|l| l.trim().parse().map(Duration::from_micros))
            .collect::<Result<_, _>>()
            .context("the spawn floor printed something other than microseconds")?;
        ensure!(us.len() == n, "the spawn floor printed {} times, not {n}", us.len());
        Ok(Samples::from_durations(us))
    }

    /// Streams the host file `src` into the guest's [`SINK_FILE`] (which it fsyncs),
    /// until the guest confirms the count: dial to confirmation.
    pub(crate) async fn upload(&self, src: &Path) -> Result<Duration> {
        let t = Instant::now();
        let mut s = self.dial(SINK_PORT).await?;
        let mut f = std::fs::File::open(src)?;
        let len = f.metadata()?.len();
        s.write_all(&len.to_le_bytes()).await?;
        let mut buf = vec![0u8; BUF];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            s.write_all(&buf[..n]).await?;
        }
        let got = s.read_u64_le().await.context("the vsock sink did not confirm")?;
        let took = t.elapsed();
        ensure!(got == len, "the vsock sink got {got} of {len} bytes");
        Ok(took)
    }

    /// Streams the guest's source file into the host file `dst` and fsyncs it and its
    /// directory, as `sbx cp --sync` does: dial to fsyncs done. Returns the time and the
    /// byte count.
    pub(crate) async fn download(&self, dst: &Path) -> Result<(Duration, u64)> {
        let t = Instant::now();
        let mut s = self.dial(SOURCE_PORT).await?;
        let len = s.read_u64_le().await.context("the vsock source sent no length")?;
        let mut out = tokio::fs::File::create(dst).await?;
        let mut buf = vec![0u8; BUF];
        let mut left = len;
        while left > 0 {
            let want = usize::try_from(left).unwrap_or(BUF).min(BUF);
            let n = s.read(&mut buf[..want]).await?;
            if n == 0 {
                bail!("the vsock source ended after {} of {len} bytes", len - left);
            }
            out.write_all(&buf[..n]).await?;
            left -= n as u64;
        }
        out.sync_all().await?;
        tokio::fs::File::open(dst.parent().unwrap_or(Path::new("/"))).await?.sync_all().await?;
        Ok((t.elapsed(), len))
    }
}
