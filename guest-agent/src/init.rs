//! PID 1 duties and the READY announcement.
//!
//! As PID 1 the agent mounts the pseudo filesystems, brings up `lo`, sets the hostname
//! and powers off on SIGTERM. Orphans are reaped by the one reaper in [`crate::exec`].
//! As a service it does none of this.

use std::path::{Path, PathBuf};

use crate::exec::spec::DEFAULT_PATH;
use crate::report::error_chain;
use sbx_proto::Address;

/// Hostname used when the kernel command line sets none (or an invalid one).
pub const DEFAULT_HOSTNAME: &str = "sbx";

/// Why an init duty failed.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The announcement could not be delivered.
    #[error("could not announce readiness to {addr}")]
    Announce {
        /// Where it was sent.
        addr: Address,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A pseudo filesystem could not be mounted.
    #[error("could not mount {fstype} on {target}; commands that need it will fail")]
    Mount {
        /// The filesystem type.
        fstype: &'static str,
        /// Where it was to be mounted.
        target: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The loopback interface could not be brought up.
    #[error("could not bring up the loopback interface `lo`; servers on 127.0.0.1 will not be reachable")]
    Loopback(#[source] std::io::Error),
    /// The hostname could not be set.
    #[error("could not set the hostname to `{name}`")]
    Hostname {
        /// The name asked for.
        name: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The SIGTERM handler could not be installed.
    #[error("could not watch for SIGTERM; the VM will not power off cleanly when asked")]
    Signal(#[source] std::io::Error),
}

/// True when this process is PID 1.
pub fn is_pid1() -> bool {
    std::process::id() == 1
}

/// Performs the PID 1 set-up: pseudo filesystems, `/dev` links, `lo`, the hostname and
/// a default `PATH`.
///
/// Every duty is attempted even when an earlier one fails; the failures after the
/// first are logged and the first is returned. Call it at the very start of `main`,
/// before any task is spawned (it may set environment variables).
pub fn become_init() -> Result<(), InitError> {
    let mut first = None;
    let mut note = |r: Result<(), InitError>| {
        if let Err(e) = r {
            if first.is_none() {
                first = Some(e);
            } else {
                tracing::warn!("init: {}", error_chain(&e));
            }
        }
    };
    // Read once before /proc is mounted (nothing: mount it) and once after, instead of
    // once per mount: under software emulation each read costs milliseconds of boot.
    let mut mounted = current_mount_points();
    for m in MOUNTS {
        note(mount_pseudo(m, &mounted));
        if m.target == "/proc" {
            mounted = current_mount_points();
        }
    }
    dev_links();
    note(loopback_up().map_err(InitError::Loopback));
    let cmdline = KernelCmdline::read();
    let name = cmdline.hostname().unwrap_or(DEFAULT_HOSTNAME).to_owned();
    note(
        rustix::system::sethostname(name.as_bytes())
            .map_err(|e| InitError::Hostname { name, source: e.into() }),
    );
    default_env();
    first.map_or(Ok(()), Err)
}

/// Powers the VM off (after `sync`) when SIGTERM arrives. Spawn it on the runtime as
/// PID 1; the kernel delivers no signal to PID 1 that has no handler.
pub fn power_off_on_sigterm() -> Result<impl Future<Output = ()>, InitError> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(InitError::Signal)?;
    Ok(async move {
        term.recv().await;
        tracing::info!("SIGTERM: syncing and powering off");
        rustix::fs::sync();
        if let Err(e) = rustix::system::reboot(rustix::system::RebootCommand::PowerOff) {
            tracing::error!("power off failed: {e}");
        }
    })
}

/// One pseudo filesystem PID 1 mounts.
struct PseudoMount {
    fstype: &'static str,
    target: &'static str,
    mode: u32,
    data: &'static str,
    flags: rustix::mount::MountFlags,
}

const NOSUID_NODEV_NOEXEC: rustix::mount::MountFlags = rustix::mount::MountFlags::NOSUID
    .union(rustix::mount::MountFlags::NODEV)
    .union(rustix::mount::MountFlags::NOEXEC);

/// In order: `/proc` first, since the "already mounted?" check reads it.
const MOUNTS: &[PseudoMount] = &[
    PseudoMount { fstype: "proc", target: "/proc", mode: 0o555, data: "", flags: NOSUID_NODEV_NOEXEC },
    PseudoMount { fstype: "sysfs", target: "/sys", mode: 0o555, data: "", flags: NOSUID_NODEV_NOEXEC },
    PseudoMount {
        fstype: "devtmpfs",
        target: "/dev",
        mode: 0o755,
        data: "mode=0755",
        flags: rustix::mount::MountFlags::NOSUID,
    },
    PseudoMount {
        fstype: "devpts",
        target: "/dev/pts",
        mode: 0o755,
        data: "mode=0620,ptmxmode=0666",
        flags: rustix::mount::MountFlags::NOSUID.union(rustix::mount::MountFlags::NOEXEC),
    },
    PseudoMount {
        fstype: "tmpfs",
        target: "/dev/shm",
        mode: 0o1777,
        data: "mode=1777",
        flags: rustix::mount::MountFlags::NOSUID.union(rustix::mount::MountFlags::NODEV),
    },
    PseudoMount {
        fstype: "tmpfs",
        target: "/run",
        mode: 0o755,
        data: "mode=0755",
        flags: rustix::mount::MountFlags::NOSUID.union(rustix::mount::MountFlags::NODEV),
    },
    PseudoMount {
        fstype: "tmpfs",
        target: "/tmp",
        mode: 0o1777,
        data: "mode=1777",
        flags: rustix::mount::MountFlags::NOSUID.union(rustix::mount::MountFlags::NODEV),
    },
];

/// Mounts `m` unless something is already mounted there (listed in `mounted`).
fn mount_pseudo(m: &PseudoMount, mounted: &[PathBuf]) -> Result<(), InitError> {
    let target = Path::new(m.target);
    let err =
        |source: std::io::Error| InitError::Mount { fstype: m.fstype, target: target.to_owned(), source };
    if mounted.iter().any(|p| p == target) {
        return Ok(());
    }
    if !target.is_dir() {
        std::fs::create_dir_all(target).map_err(err)?;
        let _ = std::fs::set_permissions(target, std::os::unix::fs::PermissionsExt::from_mode(m.mode));
    }
    let data = std::ffi::CString::new(m.data).expect("mount options are constants without NUL");
    rustix::mount::mount(m.fstype, target, m.fstype, m.flags, data.as_c_str()).map_err(|e| err(e.into()))
}

/// The mount points listed in `/proc/self/mountinfo`; none while `/proc` is not mounted.
fn current_mount_points() -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    mount_points(&info).map(PathBuf::from).collect()
}

/// The mount points (field 5) of a mountinfo text, with `\040`-style escapes decoded.
fn mount_points(info: &str) -> impl Iterator<Item = String> + '_ {
    info.lines().filter_map(|line| line.split(' ').nth(4)).map(unescape_octal)
}

fn unescape_octal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| std::str::from_utf8(d).ok());
        if bytes[i] == b'\\'
            && let Some(v) = octal.and_then(|d| u8::from_str_radix(d, 8).ok())
        {
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `/dev/fd`, `/dev/std{in,out,err}`: devtmpfs does not create them and shells expect them.
fn dev_links() {
    for (link, target) in [
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
        ("/dev/ptmx", "pts/ptmx"),
    ] {
        if std::fs::symlink_metadata(link).is_err() {
            let _ = std::os::unix::fs::symlink(target, link);
        }
    }
}

/// `ip link set lo up`, with the two ioctls it makes.
fn loopback_up() -> std::io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: socket(2) with constant arguments; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a freshly created descriptor owned by nothing else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is a plain C struct for which all-zero bytes are a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the NUL-terminated name and writes ifru_flags of `req`,
    // which lives for the whole call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just filled ifru_flags; reading a c_short from the union is sound.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    req.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads the name and the flags from `req`, valid for the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `PATH` and `HOME` for commands, when the kernel started the agent without them.
fn default_env() {
    for (key, value) in [("PATH", DEFAULT_PATH), ("HOME", "/root")] {
        if std::env::var_os(key).is_none_or(|v| v.is_empty() || (key == "HOME" && v == "/")) {
            // SAFETY: called from `become_init` at the start of `main`, before any task or
            // thread that reads the environment exists.
            unsafe { std::env::set_var(key, value) };
        }
    }
}

/// The `sbx.*` settings from the kernel command line.
#[derive(Debug, Default)]
pub struct KernelCmdline {
    listen: Option<Address>,
    announce: Option<Address>,
    hostname: Option<String>,
}

impl KernelCmdline {
    /// Reads `/proc/cmdline`; missing or unparsable settings are ignored with a warning.
    pub fn read() -> Self {
        let text = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
        Self::parse(&text)
    }

    /// Parses a kernel command line.
    pub fn parse(text: &str) -> Self {
        let mut out = KernelCmdline::default();
        for word in text.split_whitespace() {
            let Some((key, value)) = word.split_once('=') else { continue };
            let slot = match key {
                "sbx.listen" => &mut out.listen,
                "sbx.announce" => &mut out.announce,
                "sbx.hostname" => {
                    if valid_hostname(value) {
                        out.hostname = Some(value.to_owned());
                    } else {
                        tracing::warn!(
                            "ignoring sbx.hostname={value}: use 1 to 64 letters, digits, `-` and `.`"
                        );
                    }
                    continue;
                }
                _ => continue,
            };
            match value.parse() {
                Ok(addr) => *slot = Some(addr),
                Err(e) => tracing::warn!("ignoring {key}: {e}"),
            }
        }
        out
    }

    /// `sbx.listen=`, if given.
    pub fn listen(&self) -> Option<Address> {
        self.listen.clone()
    }

    /// `sbx.announce=`, if given.
    pub fn announce(&self) -> Option<Address> {
        self.announce.clone()
    }

    /// `sbx.hostname=`, if given and valid.
    pub fn hostname(&self) -> Option<&str> {
        self.hostname.as_deref()
    }
}

/// A hostname the kernel accepts and shells print sanely.
fn valid_hostname(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        && !name.starts_with(['-', '.'])
}

/// Connects to `addr` and writes `READY <version>\n`.
pub async fn announce_ready(addr: &Address) -> Result<(), InitError> {
    use tokio::io::AsyncWriteExt;
    let line = format!("READY {}\n", env!("CARGO_PKG_VERSION"));
    let err = |source| InitError::Announce { addr: addr.clone(), source };
    match addr {
        Address::Vsock { cid, port } => {
            let mut s = tokio_vsock::VsockStream::connect(tokio_vsock::VsockAddr::new(*cid, *port))
                .await
                .map_err(err)?;
            s.write_all(line.as_bytes()).await.map_err(err)?;
            AsyncWriteExt::shutdown(&mut s).await.map_err(err)
        }
        Address::Unix(path) => {
            let mut s = tokio::net::UnixStream::connect(path).await.map_err(err)?;
            s.write_all(line.as_bytes()).await.map_err(err)?;
            s.shutdown().await.map_err(err)
        }
        Address::Tcp(hostport) => {
            let mut s = tokio::net::TcpStream::connect(hostport.as_str()).await.map_err(err)?;
            s.write_all(line.as_bytes()).await.map_err(err)?;
            s.shutdown().await.map_err(err)
        }
        Address::HybridVsock { .. } => Err(err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "announce over vsock://2:PORT from inside the VM, not hvsock://",
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_reads_sbx_settings_and_ignores_the_rest() {
        let c = KernelCmdline::parse(
            "console=ttyS0 quiet sbx.listen=vsock://-1:2000 sbx.announce=vsock://2:1025 sbx.hostname=box-1",
        );
        assert_eq!(c.listen(), Some(Address::Vsock { cid: u32::MAX, port: 2000 }));
        assert_eq!(c.announce(), Some(Address::Vsock { cid: 2, port: 1025 }));
        assert_eq!(c.hostname(), Some("box-1"));
    }

    #[test]
    fn cmdline_refuses_bad_hostnames() {
        for bad in ["sbx.hostname=", "sbx.hostname=-x", "sbx.hostname=a/b", "sbx.hostname=a;reboot"] {
            assert_eq!(KernelCmdline::parse(bad).hostname(), None, "{bad}");
        }
        let long = format!("sbx.hostname={}", "a".repeat(65));
        assert_eq!(KernelCmdline::parse(&long).hostname(), None);
    }

    #[test]
    fn mountinfo_points_are_unescaped() {
        let info = "22 1 0:21 / /proc rw,nosuid - proc proc rw\n\
                    30 22 0:40 / /mnt/with\\040space rw - tmpfs tmpfs rw\n";
        let points: Vec<_> = mount_points(info).collect();
        assert_eq!(points, ["/proc", "/mnt/with space"]);
    }
}
