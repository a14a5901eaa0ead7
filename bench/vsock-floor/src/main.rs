//! `sbx-vsock-floor`: the raw virtio-vsock floor that `sbx-bench` measures sbx against
//! inside a real VM. A static musl binary with no runtime: plain threads and blocking
//! AF_VSOCK sockets from the `vsock` crate.
//!
//! ```text
//! sbx-vsock-floor echo PORT          echo every byte back (the 64-byte ping-pong)
//! sbx-vsock-floor sink PORT FILE     read a u64 length, then that many bytes into FILE;
//!                                    fsync; answer with the u64 count written
//! sbx-vsock-floor source PORT FILE   send FILE's u64 size, then its bytes
//! sbx-vsock-floor announce           connect to host CID 2 port 1025, write
//!                                    `READY <version>\n` as sbx-agent does, then idle
//! sbx-vsock-floor spawn N PROGRAM    spawn and wait for PROGRAM N times; print each
//!                                    time in µs, one a line (the in-guest exec floor)
//! ```
//!
//! Lengths are little-endian u64s, so nothing depends on half-closing a vsock
//! connection through the VMM. Run with no arguments as PID 1 (baked into an initramfs
//! as `/sbin/sbx-agent`), it announces: that is the bare-boot baseline of `sbx create`.
//! Never run it on a host: it opens AF_VSOCK sockets.

use std::fs::File;
use std::io::{self, Read, Write};
use std::process::ExitCode;

use vsock::{VMADDR_CID_ANY, VMADDR_CID_HOST, VsockListener, VsockStream};

/// The host port the agent announces itself on (sbx-proto's `DEFAULT_READY_PORT`).
const READY_PORT: u32 = 1025;

/// Copy buffer: large enough that the syscalls are not the bound.
const BUF: usize = 128 * 1024;

const USAGE: &str =
    "usage: sbx-vsock-floor echo PORT | sink PORT FILE | source PORT FILE | announce | spawn N PROGRAM";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["echo", port] => port_arg(port).and_then(|p| serve(p, echo)),
        ["sink", port, file] => {
            let file = file.to_string();
            port_arg(port).and_then(|p| serve(p, move |s| sink(s, &file)))
        }
        ["source", port, file] => {
            let file = file.to_string();
            port_arg(port).and_then(|p| serve(p, move |s| source(s, &file)))
        }
        ["announce"] => announce_and_idle(),
        ["spawn", n, program] => match n.parse() {
            Ok(n) => spawn_times(n, program),
            Err(_) => Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad count `{n}`; {USAGE}"))),
        },
        [] if std::process::id() == 1 => announce_and_idle(),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sbx-vsock-floor: {e}");
            ExitCode::FAILURE
        }
    }
}

fn port_arg(port: &str) -> io::Result<u32> {
    port.parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("bad port `{port}`; {USAGE}")))
}

/// Accepts connections on `port` forever, one thread per connection.
fn serve<F>(port: u32, handle: F) -> io::Result<()>
where
    F: Fn(VsockStream) -> io::Result<()> + Clone + Send + 'static,
{
    let listener = VsockListener::bind_with_cid_port(VMADDR_CID_ANY, port)?;
    loop {
        let (stream, _) = listener.accept()?;
        let handle = handle.clone();
        std::thread::spawn(move || {
            if let Err(e) = handle(stream) {
                eprintln!("sbx-vsock-floor: connection on port {port}: {e}");
            }
        });
    }
}

fn echo(mut s: VsockStream) -> io::Result<()> {
    let mut buf = vec![0u8; BUF];
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        s.write_all(&buf[..n])?;
    }
}

fn sink(mut s: VsockStream, path: &str) -> io::Result<()> {
    let want = read_u64(&mut s)?;
    let mut f = File::create(path)?;
    let copied = copy_exactly(&mut s, &mut f, want)?;
    f.sync_all()?;
    s.write_all(&copied.to_le_bytes())?;
    wait_for_close(&mut s)
}

fn source(mut s: VsockStream, path: &str) -> io::Result<()> {
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    s.write_all(&len.to_le_bytes())?;
    copy_exactly(&mut f, &mut s, len)?;
    wait_for_close(&mut s)
}

/// Copies exactly `n` bytes (fewer only if `from` ends early); returns how many.
fn copy_exactly(from: &mut impl Read, to: &mut impl Write, n: u64) -> io::Result<u64> {
    let mut buf = vec![0u8; BUF];
    let mut left = n;
    while left > 0 {
        let want = usize::try_from(left).unwrap_or(BUF).min(BUF);
        let got = from.read(&mut buf[..want])?;
        if got == 0 {
            break;
        }
        to.write_all(&buf[..got])?;
        left -= got as u64;
    }
    Ok(n - left)
}

fn read_u64(s: &mut impl Read) -> io::Result<u64> {
    let mut b = [0u8; 8];
    s.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Holds the connection until the peer closes it, so nothing still in flight is cut off.
fn wait_for_close(s: &mut VsockStream) -> io::Result<()> {
    let mut b = [0u8; 64];
    while s.read(&mut b)? > 0 {}
    Ok(())
}

/// Spawns and waits for `program` `n` times, printing each time in microseconds.
fn spawn_times(n: usize, program: &str) -> io::Result<()> {
    let mut out = String::new();
    for _ in 0..n {
        let t = std::time::Instant::now();
        let status = std::process::Command::new(program).status()?;
        let us = t.elapsed().as_micros();
        if !status.success() {
            return Err(io::Error::other(format!("{program} failed: {status}")));
        }
        out.push_str(&format!("{us}\n"));
    }
    io::stdout().write_all(out.as_bytes())
}

/// What the agent does once it listens, and nothing else: tell the host it is up.
/// Then idles, since PID 1 must never exit.
fn announce_and_idle() -> io::Result<()> {
    let line = format!("READY {}\n", env!("CARGO_PKG_VERSION"));
    let sent = VsockStream::connect_with_cid_port(VMADDR_CID_HOST, READY_PORT).and_then(|mut s| {
        s.write_all(line.as_bytes())?;
        s.shutdown(std::net::Shutdown::Write)
    });
    if let Err(e) = sent {
        eprintln!("sbx-vsock-floor: could not announce to vsock://{VMADDR_CID_HOST}:{READY_PORT}: {e}");
    }
    loop {
        std::thread::park();
    }
}
