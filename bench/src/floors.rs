//! The floors: each operation done locally without the agent, and bare Unix-socket
//! transfers, measured in the same run as the figures they bound.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::stats::Samples;

/// Local `fork+exec+wait` of `true`, what the agent's Exec does at its core.
pub(crate) fn spawn_true(warmup: usize, n: usize) -> Result<Samples> {
    Ok(Samples::measure(warmup, n, || {
        Command::new("true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(drop)
    })?)
}

/// Local open+read+close of `path`.
pub(crate) fn read_file(path: &Path, warmup: usize, n: usize) -> Result<Samples> {
    Ok(Samples::measure(warmup, n, || fs::read(path).map(drop))?)
}

/// Local plain `write(2)` of `data` to `path` (open, write, close), no fsync.
pub(crate) fn write_plain(path: &Path, data: &[u8], warmup: usize, n: usize) -> Result<Samples> {
    Ok(Samples::measure(warmup, n, || fs::write(path, data))?)
}

/// The same durable atomic write the agent does: temp file, write, fsync, rename, and an
/// fsync of the directory so the rename survives a crash too.
pub(crate) fn write_atomic(path: &Path, data: &[u8], warmup: usize, n: usize) -> Result<Samples> {
    let tmp = path.with_extension("tmp");
    let dir = path.parent().unwrap_or(Path::new("/"));
    Ok(Samples::measure(warmup, n, || -> std::io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        fs::File::open(dir)?.sync_all()
    })?)
}

/// Local readdir plus an lstat per entry, what a listing needs.
pub(crate) fn list_dir(dir: &Path, warmup: usize, n: usize) -> Result<Samples> {
    Ok(Samples::measure(warmup, n, || -> std::io::Result<()> {
        for e in fs::read_dir(dir)? {
            std::hint::black_box(e?.metadata()?);
        }
        Ok(())
    })?)
}

/// A 64-byte ping-pong over a Unix socket to an echo thread.
pub(crate) fn unix_ping_pong(dir: &Path, warmup: usize, n: usize) -> Result<Samples> {
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
    let mut s = UnixStream::connect(&path)?;
    let mut buf = [7u8; 64];
    let samples = Samples::measure(warmup, n, || -> std::io::Result<()> {
        s.write_all(&buf)?;
        s.read_exact(&mut buf)
    })?;
    drop(s);
    echo.join().map_err(|_| anyhow::anyhow!("the echo thread panicked"))??;
    Ok(samples)
}

/// Bytes per read and write of the raw copy.
const COPY_BLOCK: usize = 1 << 20;

/// Copies `src` to `dst` through a Unix socket (a reader thread writing the file, this
/// thread streaming it in), the raw transport the agent's copies are compared with.
/// It moves data as `sbx cp` does, 1 MiB per socket call and 64 KiB per file write
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
        out.sync_all()?;
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
