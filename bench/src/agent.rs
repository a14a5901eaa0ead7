//! A real `atoll-agent` on a Unix socket in a scratch directory, the typed client connected
//! to it, and what `/proc` says about its memory.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use atoll::client::Client;
use atoll_proto::Address;

/// A running agent; killed when dropped.
pub(crate) struct Agent {
    child: Child,
    /// Its Unix socket.
    pub(crate) socket: PathBuf,
    /// From spawning the process to its socket accepting a connection.
    pub(crate) startup: Duration,
}

impl Agent {
    /// Starts `bin` listening on `<dir>/agent-<tag>.sock` and waits until it accepts.
    pub(crate) fn start(bin: &Path, dir: &Path, tag: &str) -> Result<Agent> {
        let socket = dir.join(format!("agent-{tag}.sock"));
        let _ = std::fs::remove_file(&socket);
        let t = Instant::now();
        let mut child = Command::new(bin)
            .arg("--listen")
            .arg(format!("unix://{}", socket.display()))
            .arg("--job-dir")
            .arg(dir.join(format!("jobs-{tag}")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("agent-{tag}.log")))?)
            .spawn()
            .with_context(|| format!("could not start {}; build it with bench/run.sh", bin.display()))?;
        // Poll without sleeping between tries so the figure is not rounded up to a sleep.
        while UnixStream::connect(&socket).is_err() {
            if let Some(status) = child.try_wait()? {
                bail!("{} exited with {status} before listening; run it by hand to see why", bin.display());
            }
            if t.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                bail!("{} did not listen on {} within 20 s", bin.display(), socket.display());
            }
            std::thread::yield_now();
        }
        let startup = t.elapsed();
        Ok(Agent { child, socket, startup })
    }

    /// `unix:///...` for `atoll --agent`.
    pub(crate) fn address(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The typed client of `atoll`, connected.
    pub(crate) async fn client(&self) -> Result<Client> {
        let addr: Address = self.address().parse().context("agent address")?;
        Ok(Client::connect(&addr, Duration::from_secs(5)).await?)
    }

    /// Resident set size now and its high-water mark, in bytes.
    pub(crate) fn memory(&self) -> Result<Memory> {
        Memory::of(self.child.id())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A process's memory as `/proc/PID/status` reports it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Memory {
    /// VmRSS.
    pub(crate) rss: u64,
    /// VmHWM: the peak RSS so far.
    pub(crate) hwm: u64,
}

impl Memory {
    fn of(pid: u32) -> Result<Memory> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let field = |name: &str| -> Result<u64> {
            let line = status
                .lines()
                .find(|l| l.starts_with(name))
                .with_context(|| format!("/proc/{pid}/status has no {name}"))?;
            let kib: u64 = line.split_whitespace().nth(1).context("malformed /proc status line")?.parse()?;
            Ok(kib * 1024)
        };
        Ok(Memory { rss: field("VmRSS:")?, hwm: field("VmHWM:")? })
    }
}
