//! The floors: each operation done locally without the agent, and bare Unix-socket
//! transfers, measured in the same run as the figures they bound.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// One local operation, timed call by call next to the agent call it bounds (see
/// [`Samples::alternate`](crate::stats::Samples::alternate)).
pub(crate) type Op<'a> = Box<dyn FnMut() -> std::io::Result<()> + 'a>;

/// Local spawn+wait of `true`, what the agent's Exec does at its core.
pub(crate) fn spawn_true() -> Op<'static> {
    Box::new(|| {
        Command::new("true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(drop)
    })
}

/// Local open+read+close of `path`.
pub(crate) fn read_file(path: &Path) -> Op<'_> {
    Box::new(move || fs::read(path).map(drop))
}

/// Local plain `write(2)` of `data` to `path` (open, write, close), no fsync.
pub(crate) fn write_plain<'a>(path: &'a Path, data: &'a [u8]) -> Op<'a> {
    Box::new(move || fs::write(path, data))
}

/// The same atomic write the agent does: temp file, write, rename; with `sync` (the
/// durable write) the file is fsynced before the rename and the directory after it.
pub(crate) fn write_atomic<'a>(path: &'a Path, data: &'a [u8], sync: bool) -> Op<'a> {
    let tmp = path.with_extension("tmp");
    let dir = path.parent().unwrap_or(Path::new("/"));
    Box::new(move || {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(data)?;
        if sync {
            f.sync_all()?;
        }
        fs::rename(&tmp, path)?;
        if sync { fs::File::open(dir)?.sync_all() } else { Ok(()) }
    })
}

/// Local readdir plus an lstat per entry, what a listing needs.
pub(crate) fn list_dir(dir: &Path) -> Op<'_> {
    Box::new(move || {
        for e in fs::read_dir(dir)? {
            std::hint::black_box(e?.metadata()?);
        }
        Ok(())
    })
}

/// A 64-byte ping-pong over a Unix socket to an echo thread.
pub(crate) struct PingPong {
    socket: UnixStream,
    buf: [u8; 64],
    echo: std::thread::JoinHandle<std::io::Result<()>>,
}

impl PingPong {
    /// Binds a socket in `dir` and starts the echo thread.
    pub(crate) fn start(dir: &Path) -> Result<Self> {
        let path = dir.join("pingpong.sock");
        let _ = fs::remove_file(&path);
        let listener = UnixListener::bind(&path).context("bind the ping-pong socket")?;
        let echo = std::thread::spawn(move || -> std::io::Result<()> {
            let (mut s, _) = listener.accept()?;
            let mut buf = [0u8; 64];
            loop {
                if let Err(e) = s.read_exact(&mut buf) {
                    return if e.kind() == std::io::ErrorKind::UnexpectedEof { Ok(()) } else { Err(e) };
                }
                s.write_all(&buf)?;
            }
        });
        let socket = UnixStream::connect(&path)?;
        Ok(PingPong { socket, buf: [7u8; 64], echo })
    }

    /// One round trip.
    pub(crate) fn round(&mut self) -> std::io::Result<()> {
        self.socket.write_all(&self.buf)?;
        self.socket.read_exact(&mut self.buf)
    }

    /// Closes the socket and reports how the echo thread ended.
    pub(crate) fn finish(self) -> Result<()> {
        drop(self.socket);
        self.echo.join().map_err(|_| anyhow::anyhow!("the echo thread panicked"))??;
        Ok(())
    }
}

/// Bytes per read and write of the raw copy.
const COPY_BLOCK: usize = 1 << 20;

/// Copies `src` to `dst` through a Unix socket (a reader thread writing the file, this
/// thread streaming it in), the raw transport the agent's copies are compared with.
/// It moves data as `atoll cp` does, 1 MiB per socket call and 64 KiB per file write
/// (`std::io::copy` would move 8 KiB at a time and make a weak floor).
pub(crate) fn unix_copy(dir: &Path, src: &Path, dst: &Path) -> Result<Duration> {
    let path = dir.join("copy.sock");
    let _ = fs::remove_file(&path);
    let listener = UnixListener::bind(&path).context("bind the copy socket")?;
    let dst = dst.to_path_buf();
    let t = Instant::now();
    let sink = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut s, _) = listener.accept()?;
        let mut out = fs::File::create(&dst)?;
        let mut buf = vec![0u8; COPY_BLOCK];
        let mut n = 0;
        loop {
            let got = s.read(&mut buf)?;
            if got == 0 {
                break;
            }
            buf[..got].chunks(64 * 1024).try_for_each(|piece| out.write_all(piece))?;
            n += got as u64;
        }
        // Durable like `atoll cp --sync`: the file, then the directory entry of the new file.
        out.sync_all()?;
        fs::File::open(dst.parent().unwrap_or(Path::new("/")))?.sync_all()?;
        Ok(n)
    });
    let mut s = UnixStream::connect(&path)?;
    let mut f = fs::File::open(src)?;
    let mut buf = vec![0u8; COPY_BLOCK];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        s.write_all(&buf[..n])?;
    }
    drop(s);
    sink.join().map_err(|_| anyhow::anyhow!("the copy sink thread panicked"))??;
    Ok(t.elapsed())
}

/// Spawn rate of `true` with `parallel` threads each spawning `per_thread` times.
pub(crate) fn spawn_rate(parallel: usize, per_thread: usize) -> Result<f64> {
    let t = Instant::now();
    std::thread::scope(|scope| -> Result<()> {
        let handles: Vec<_> = (0..parallel)
            .map(|_| {
                scope.spawn(move || -> std::io::Result<()> {
                    for _ in 0..per_thread {
                        Command::new("true").stdin(Stdio::null()).stdout(Stdio::null()).status()?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| anyhow::anyhow!("a spawning thread panicked"))??;
        }
        Ok(())
    })?;
    Ok((parallel * per_thread) as f64 / t.elapsed().as_secs_f64())
}
