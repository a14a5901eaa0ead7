//! `atoll-link-floor`: the raw virtio-serial floor that `atoll-bench` measures atoll against
//! inside a real VM. A static musl binary with no runtime: blocking reads and writes
//! on the port device.
//!
//! ```text
//! atoll-link-floor                    as PID 1 (baked into an initramfs as /sbin/atoll-agent):
//!                                   mount /sys and a tmpfs on /tmp, open the port
//!                                   `atoll.agent`, write `READY <version>\n` on it, then
//!                                   serve the requests of `atoll_link_floor` (echo, sink,
//!                                   source, warm) one after another, forever
//! atoll-link-floor spawn N PROGRAM    spawn and wait for PROGRAM N times; print each
//!                                   time in µs, one a line (the in-guest exec floor)
//! ```
//!
//! The port is found as the agent finds it: the `/sys/class/virtio-ports/*/name` that
//! reads `atoll.agent`, at `/dev/<that entry>`. Read with no host connected returns 0 at
//! once (the port reports HUP), so the floor then sleeps a little instead of spinning.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use atoll_link_floor::{
    ECHO, REQUEST_LEN, REQUEST_MAGIC, SINK, SINK_FILE, SOURCE, WARM, reply, take_frame, u64_at,
};

/// The name of the agent's virtio-serial port (atoll-proto's `link::PORT_NAME`).
const PORT_NAME: &str = "atoll.agent";
/// Where the kernel lists virtio-serial ports.
const PORTS_DIR: &str = "/sys/class/virtio-ports";
/// How long the port may take to appear after boot.
const PORT_WAIT: Duration = Duration::from_secs(30);
/// Copy buffer: large enough that the syscalls are not the bound.
const BUF: usize = 128 * 1024;

const USAGE: &str = "usage: atoll-link-floor (as PID 1) | atoll-link-floor spawn N PROGRAM";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["spawn", n, program] => match n.parse() {
            Ok(n) => spawn_times(n, program),
            Err(_) => Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad count `{n}`; {USAGE}"))),
        },
        [] if std::process::id() == 1 => init(),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    // As PID 1, an exit panics the kernel and ends QEMU: the host sees it at once, with
    // this line on the console.
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("atoll-link-floor: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What the agent does as PID 1 before it serves, reduced to what the floor needs,
/// then the announcement and the requests.
fn init() -> io::Result<()> {
    mount("sysfs", "/sys", "sysfs")?;
    mount("tmpfs", "/tmp", "tmpfs")?;
    let path = wait_for_port()?;
    let mut port = open_port(&path)?;
    port.write_all(format!("READY {}\n", env!("CARGO_PKG_VERSION")).as_bytes())?;
    let mut buf = Vec::with_capacity(REQUEST_LEN + BUF);
    loop {
        let (nonce, command, arg) = next_request(&mut port, &mut buf)?;
        // Bytes read past the request belong to it (an upload's first bytes).
        let rest = std::mem::take(&mut buf);
        let mut input = io::Cursor::new(rest).chain(&port);
        let served = (&port).write_all(&reply(nonce)).and_then(|()| match command {
            ECHO => echo(&mut input, &port, arg),
            SINK => sink(&mut input, &port, arg),
            SOURCE => source(&port),
            WARM => warm(&port, arg),
            other => Err(io::Error::other(format!("unknown command {other:#x}"))),
        });
        if let Err(e) = served {
            eprintln!("atoll-link-floor: request {:?} failed: {e}", char::from(command));
        }
    }
}

fn mount(source: &str, target: &str, fstype: &str) -> io::Result<()> {
    std::fs::create_dir_all(target)?;
    rustix::mount::mount(source, target, fstype, rustix::mount::MountFlags::empty(), None::<&std::ffi::CStr>)
        .map_err(|e| io::Error::other(format!("mount {fstype} on {target}: {e}")))
}

/// The port's device node, once the driver has listed it (it adds ports as the device
/// announces them, after the module loaded) and devtmpfs made its node.
fn wait_for_port() -> io::Result<PathBuf> {
    let deadline = Instant::now() + PORT_WAIT;
    loop {
        let found = std::fs::read_dir(PORTS_DIR).ok().and_then(|entries| {
            entries.flatten().find_map(|entry| {
                let name = std::fs::read_to_string(entry.path().join("name")).ok()?;
                (name.trim_end() == PORT_NAME).then(|| Path::new("/dev").join(entry.file_name()))
            })
        });
        match found {
            Some(dev) if dev.exists() => return Ok(dev),
            _ if Instant::now() > deadline => {
                return Err(io::Error::other(format!(
                    "no virtio-serial port named {PORT_NAME} in {PORTS_DIR} after {} s",
                    PORT_WAIT.as_secs()
                )));
            }
            _ => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

fn open_port(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| io::Error::other(format!("open {}: {e}", path.display())))
}

/// Reads until a whole request; returns its nonce, command and argument, leaving what
/// followed it in `buf`.
fn next_request(port: &mut File, buf: &mut Vec<u8>) -> io::Result<(u64, u8, u64)> {
    let mut chunk = vec![0u8; BUF];
    loop {
        if let Some(frame) = take_frame(buf, &REQUEST_MAGIC, REQUEST_LEN) {
            return Ok((u64_at(&frame, 8), frame[16], u64_at(&frame, 17)));
        }
        match port.read(&mut chunk)? {
            // No host connected: wait for one without spinning.
            0 => std::thread::sleep(Duration::from_millis(10)),
            n => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Echoes exactly `n` bytes back as they come.
fn echo(input: &mut impl Read, mut out: &File, n: u64) -> io::Result<()> {
    let mut buf = vec![0u8; BUF];
    let mut left = n;
    while left > 0 {
        let want = usize::try_from(left).unwrap_or(BUF).min(BUF);
        let got = read_some(input, &mut buf[..want])?;
        out.write_all(&buf[..got])?;
        left -= got as u64;
    }
    Ok(())
}

fn sink(input: &mut impl Read, mut out: &File, n: u64) -> io::Result<()> {
    let mut f = File::create(SINK_FILE)?;
    let mut buf = vec![0u8; BUF];
    let mut left = n;
    while left > 0 {
        let want = usize::try_from(left).unwrap_or(BUF).min(BUF);
        let got = read_some(input, &mut buf[..want])?;
        f.write_all(&buf[..got])?;
        left -= got as u64;
    }
    f.sync_all()?;
    out.write_all(&n.to_le_bytes())
}

fn source(mut out: &File) -> io::Result<()> {
    let mut f = File::open(SINK_FILE)?;
    let len = f.metadata()?.len();
    out.write_all(&len.to_le_bytes())?;
    let mut buf = vec![0u8; BUF];
    let mut left = len;
    while left > 0 {
        let got = f.read(&mut buf)?;
        if got == 0 {
            return Err(io::Error::other(format!("{SINK_FILE} ended {left} bytes early")));
        }
        out.write_all(&buf[..got])?;
        left -= got as u64;
    }
    Ok(())
}

/// Writes `mib` MiB into guest memory once (QEMU backs guest RAM on first use), as the
/// sandbox's warm-up does with `dd`, and frees it again.
fn warm(mut out: &File, mib: u64) -> io::Result<()> {
    let path = "/tmp/warm-fill";
    let mut f = File::create(path)?;
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..mib {
        f.write_all(&zeros)?;
    }
    drop(f);
    std::fs::remove_file(path)?;
    out.write_all(&mib.to_le_bytes())
}

/// One read of at least a byte; the host going away mid-request is an error.
fn read_some(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    match input.read(buf)? {
        0 => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the host went away mid-request")),
        n => Ok(n),
    }
}

/// Spawns and waits for `program` `n` times, printing each time in microseconds.
fn spawn_times(n: usize, program: &str) -> io::Result<()> {
    let mut out = String::new();
    for _ in 0..n {
        let t = Instant::now();
        let status = std::process::Command::new(program).status()?;
        let us = t.elapsed().as_micros();
        if !status.success() {
            return Err(io::Error::other(format!("{program} failed: {status}")));
        }
        out.push_str(&format!("{us}\n"));
    }
    io::stdout().write_all(out.as_bytes())
}
