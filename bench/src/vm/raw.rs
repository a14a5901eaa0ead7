//! The raw floors over the agent link's transport: [`PortFloor`] talks to
//! `atoll-link-floor`, PID 1 of the bare VM ([`super::bare`]), over QEMU's chardev socket
//! of the same virtio-serial port atoll's agent link uses, with the requests of
//! `atoll_link_floor` (one at a time). [`spawn_true`] runs the floor binary inside the
//! sandbox for the in-guest spawn floor.

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use atoll::client::{Client, ExecSpec, WriteOpts};
use atoll_link_floor::{ECHO, REPLY_LEN, REPLY_MAGIC, SINK, SOURCE, WARM, request, take_frame, u64_at};
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use crate::stats::Samples;

/// Where the floor binary goes in the sandbox.
const GUEST_BIN: &str = "/tmp/atoll-link-floor";
/// Copy buffer on the host side, as large as the guest side's.
const BUF: usize = 128 * 1024;
/// How long one request may wait for its reply header.
const REPLY_WAIT: Duration = Duration::from_secs(60);

/// The floor on the bare VM's port.
pub(crate) struct PortFloor {
    io: UnixStream,
    /// Read past a reply header, not yet consumed.
    pending: Vec<u8>,
    next_nonce: u64,
}

impl PortFloor {
    /// The floor behind `io`, a connection to QEMU's chardev socket of the port (the
    /// `READY` line already read).
    pub(crate) fn new(io: UnixStream) -> Self {
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Self { io, pending: Vec::new(), next_nonce: u64::from(seed.subsec_nanos()) << 20 }
    }

    /// Sends a request and waits for its reply header, dropping anything before it.
    async fn request(&mut self, command: u8, arg: u64) -> Result<()> {
        let nonce = self.next_nonce;
        self.next_nonce += 1;
        self.io.write_all(&request(nonce, command, arg)).await?;
        let mut buf = std::mem::take(&mut self.pending);
        let mut chunk = vec![0u8; BUF];
        let found = tokio::time::timeout(REPLY_WAIT, async {
            loop {
                while let Some(frame) = take_frame(&mut buf, &REPLY_MAGIC, REPLY_LEN) {
                    if u64_at(&frame, 8) == nonce {
                        return anyhow::Ok(buf);
                    }
                }
                match self.io.read(&mut chunk).await? {
                    0 => bail!("the bare VM's port closed (QEMU gone?)"),
                    n => buf.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await
        .with_context(|| format!("the link floor did not answer within {} s", REPLY_WAIT.as_secs()))??;
        self.pending = found;
        Ok(())
    }

    /// Reads what the reply carries: pending bytes first.
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        if !self.pending.is_empty() {
            let n = buf.len().min(self.pending.len());
            buf[..n].copy_from_slice(&self.pending[..n]);
            self.pending.drain(..n);
            return Ok(n);
        }
        match self.io.read(buf).await? {
            0 => bail!("the bare VM's port closed mid-reply"),
            n => Ok(n),
        }
    }

    async fn read_exact(&mut self, buf: &mut [u8]) -> Result<()> {
        let mut at = 0;
        while at < buf.len() {
            at += self.read(&mut buf[at..]).await?;
        }
        Ok(())
    }

    async fn read_u64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read_exact(&mut b).await?;
        Ok(u64::from_le_bytes(b))
    }

    /// 64-byte ping-pongs, all in one echo request.
    pub(crate) async fn echo(&mut self, warmup: usize, n: usize) -> Result<Samples> {
        let ping = [0x5au8; 64];
        let mut pong = [0u8; 64];
        let rounds = warmup + n;
        self.request(ECHO, (rounds * ping.len()) as u64).await?;
        let mut out = Vec::with_capacity(n);
        for i in 0..rounds {
            let t = Instant::now();
            self.io.write_all(&ping).await?;
            self.read_exact(&mut pong).await?;
            if i >= warmup {
                out.push(t.elapsed());
            }
            ensure!(pong == ping, "the port echo answered different bytes");
        }
        Ok(Samples::from_durations(out))
    }

    /// Writes `mib` MiB into the bare guest's memory once, as the sandbox's warm-up does.
    pub(crate) async fn warm(&mut self, mib: u64) -> Result<()> {
        self.request(WARM, mib).await?;
        let done = self.read_u64().await?;
        ensure!(done == mib, "the floor warmed {done} MiB, not {mib}");
        Ok(())
    }

    /// Streams the host file `src` into the guest's sink file (which it fsyncs), until
    /// the guest confirms the count: request to confirmation.
    pub(crate) async fn upload(&mut self, src: &Path) -> Result<Duration> {
        let mut f = std::fs::File::open(src)?;
        let len = f.metadata()?.len();
        let t = Instant::now();
        self.request(SINK, len).await?;
        let mut buf = vec![0u8; BUF];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            self.io.write_all(&buf[..n]).await?;
        }
        let got = self.read_u64().await.context("the port sink did not confirm")?;
        let took = t.elapsed();
        ensure!(got == len, "the port sink got {got} of {len} bytes");
        Ok(took)
    }

    /// Streams the guest's sink file into the host file `dst` (or nowhere) and fsyncs
    /// it and its directory, as `atoll cp --sync` does: request to fsyncs done. Returns
    /// the time and the byte count.
    pub(crate) async fn download(&mut self, dst: Option<&Path>) -> Result<(Duration, u64)> {
        let t = Instant::now();
        self.request(SOURCE, 0).await?;
        let len = self.read_u64().await.context("the port source sent no length")?;
        let mut out = match dst {
            Some(dst) => Some(tokio::fs::File::create(dst).await?),
            None => None,
        };
        let mut buf = vec![0u8; BUF];
        let mut left = len;
        while left > 0 {
            let want = usize::try_from(left).unwrap_or(BUF).min(BUF);
            let n = self.read(&mut buf[..want]).await?;
            if let Some(out) = &mut out {
                out.write_all(&buf[..n]).await?;
            }
            left -= n as u64;
        }
        if let (Some(out), Some(dst)) = (out, dst) {
            out.sync_all().await?;
            tokio::fs::File::open(dst.parent().unwrap_or(Path::new("/"))).await?.sync_all().await?;
        }
        Ok((t.elapsed(), len))
    }
}

/// Spawn+wait of `true` inside the sandbox, timed by the floor binary copied in there:
/// what Exec `true` costs without any RPC.
pub(crate) async fn spawn_true(client: &Client, floor_bin: &Path, n: usize) -> Result<Samples> {
    let bin = std::fs::read(floor_bin).with_context(|| format!("read {}", floor_bin.display()))?;
    let opts = WriteOpts { mode: Some(0o755), ..WriteOpts::default() };
    client.write_bytes(GUEST_BIN, opts, Bytes::from(bin)).await.context("copy the floor into the VM")?;
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
    client.remove(GUEST_BIN, false).await?;
    Ok(Samples::from_durations(us))
}
