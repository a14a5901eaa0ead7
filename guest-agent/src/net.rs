//! The guest's NIC, configured from `atoll.net=ADDR/PREFIX,GATEWAY[,DNS]` on the kernel
//! command line (the host adds it only when the sandbox has a network): the first
//! interface other than `lo` gets the address and comes up, the default route goes
//! through the gateway, and `/etc/resolv.conf` names the DNS server (the gateway unless
//! given). The same ioctls as `ifconfig` and `route` (SIOCSIFADDR, SIOCSIFNETMASK,
//! SIOCSIFFLAGS, SIOCADDRT): no netlink code for three settings.
//!
//! None of this is a security boundary: guest root can change it all. The host's network
//! helper enforces the policy on every frame the NIC sends.

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// How long the NIC may take to show up after its driver was loaded.
const NIC_WAIT: Duration = Duration::from_secs(3);

/// Why the NIC could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// `atoll.net=` does not parse.
    #[error("atoll.net={0} is not ADDR/PREFIX,GATEWAY[,DNS] (e.g. 10.0.2.15/24,10.0.2.2)")]
    BadSpec(String),
    /// No interface but `lo`.
    #[error("no network interface appeared within {} s; is the virtio_net module loaded?", NIC_WAIT.as_secs())]
    NoInterface,
    /// An ioctl failed.
    #[error("could not {what} on {iface}")]
    Ioctl {
        /// What was being done.
        what: &'static str,
        /// The interface.
        iface: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// `/etc/resolv.conf` could not be written.
    #[error("could not write /etc/resolv.conf; names will not resolve")]
    Resolv(#[source] std::io::Error),
}

/// The guest's addressing, as `atoll.net=` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetSpec {
    /// The guest's address.
    pub addr: Ipv4Addr,
    /// The prefix length of its subnet.
    pub prefix: u8,
    /// The default gateway.
    pub gateway: Ipv4Addr,
    /// The DNS server.
    pub dns: Ipv4Addr,
}

impl FromStr for NetSpec {
    type Err = NetError;

    fn from_str(s: &str) -> Result<NetSpec, NetError> {
        let bad = || NetError::BadSpec(s.to_string());
        let mut parts = s.split(',');
        let (addr, prefix) = parts.next().and_then(|a| a.split_once('/')).ok_or_else(bad)?;
        let addr = addr.parse().map_err(|_| bad())?;
        let prefix = prefix.parse().ok().filter(|p| (1..=32).contains(p)).ok_or_else(bad)?;
        let gateway = parts.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let dns = match parts.next() {
            Some(d) => d.parse().map_err(|_| bad())?,
            None => gateway,
        };
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(NetSpec { addr, prefix, gateway, dns })
    }
}

impl NetSpec {
    fn netmask(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0))
    }
}

/// Configures the NIC and the resolver as `spec` says; returns the interface's name.
pub fn configure(spec: &NetSpec) -> Result<String, NetError> {
    let iface = wait_for_interface(Path::new("/sys/class/net"))?;
    let name = &iface;
    let fail = |what| move |source| NetError::Ioctl { what, iface: name.clone(), source };
    let sock = inet_socket().map_err(fail("open a socket"))?;
    set_addr(&sock, &iface, libc::SIOCSIFADDR, spec.addr).map_err(fail("set the address"))?;
    set_addr(&sock, &iface, libc::SIOCSIFNETMASK, spec.netmask()).map_err(fail("set the netmask"))?;
    interface_up(&sock, &iface).map_err(fail("bring the interface up"))?;
    default_route(&sock, spec.gateway).map_err(fail("add the default route"))?;
    write_resolv_conf(Path::new("/etc"), spec.dns).map_err(NetError::Resolv)?;
    Ok(iface)
}

/// The first interface under `sys_class_net` other than `lo`, waiting for its driver.
fn wait_for_interface(sys_class_net: &Path) -> Result<String, NetError> {
    let deadline = Instant::now() + NIC_WAIT;
    loop {
        let mut names: Vec<String> = std::fs::read_dir(sys_class_net)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n != "lo")
            .collect();
        names.sort();
        if let Some(first) = names.into_iter().next() {
            return Ok(first);
        }
        if Instant::now() >= deadline {
            return Err(NetError::NoInterface);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Writes `nameserver DNS` to `etc/resolv.conf` through a temp file and a rename, which
/// also replaces a symlink (to systemd-resolved's file, say) instead of following it.
fn write_resolv_conf(etc: &Path, dns: Ipv4Addr) -> std::io::Result<()> {
    let tmp = etc.join(".resolv.conf.atoll");
    std::fs::write(&tmp, format!("nameserver {dns}\n"))?;
    std::fs::rename(&tmp, etc.join("resolv.conf"))
}

fn inet_socket() -> std::io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a freshly created descriptor owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ifreq(iface: &str) -> libc::ifreq {
    // SAFETY: ifreq is a plain C struct for which all-zero bytes are a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().take(libc::IFNAMSIZ - 1).zip(iface.bytes()) {
        *dst = libc::c_char::from_ne_bytes([src]);
    }
    req
}

fn sockaddr_in(ip: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::sa_family_t::try_from(libc::AF_INET).expect("AF_INET fits sa_family_t"),
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: u32::from(ip).to_be() },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr are both 16 bytes, and the kernel reads a
    // sockaddr whose family is AF_INET as a sockaddr_in.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

fn ioctl<T>(sock: &OwnedFd, request: libc::c_ulong, arg: &mut T) -> std::io::Result<()> {
    // SAFETY: every caller passes the struct type its request reads and writes, and the
    // struct lives for the whole call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), request as _, arg as *mut T) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn set_addr(sock: &OwnedFd, iface: &str, request: libc::c_ulong, ip: Ipv4Addr) -> std::io::Result<()> {
    let mut req = ifreq(iface);
    req.ifr_ifru.ifru_addr = sockaddr_in(ip);
    ioctl(sock, request, &mut req)
}

fn interface_up(sock: &OwnedFd, iface: &str) -> std::io::Result<()> {
    let mut req = ifreq(iface);
    ioctl(sock, libc::SIOCGIFFLAGS, &mut req)?;
    // SAFETY: SIOCGIFFLAGS just filled ifru_flags; reading a c_short from the union is sound.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    let up = libc::c_short::try_from(libc::IFF_UP | libc::IFF_RUNNING)
        .expect("IFF_UP and IFF_RUNNING are low bits");
    req.ifr_ifru.ifru_flags = flags | up;
    ioctl(sock, libc::SIOCSIFFLAGS, &mut req)
}

/// The kernel's `struct rtentry` (linux/route.h), which the libc crate has for musl only.
#[repr(C)]
struct RtEntry {
    rt_pad1: libc::c_ulong,
    rt_dst: libc::sockaddr,
    rt_gateway: libc::sockaddr,
    rt_genmask: libc::sockaddr,
    rt_flags: libc::c_ushort,
    rt_pad2: libc::c_short,
    rt_pad3: libc::c_ulong,
    rt_pad4: *mut libc::c_void,
    rt_metric: libc::c_short,
    rt_dev: *mut libc::c_char,
    rt_mtu: libc::c_ulong,
    rt_window: libc::c_ulong,
    rt_irtt: libc::c_ushort,
}

fn default_route(sock: &OwnedFd, gateway: Ipv4Addr) -> std::io::Result<()> {
    let any = sockaddr_in(Ipv4Addr::UNSPECIFIED);
    let mut rt = RtEntry {
        rt_pad1: 0,
        rt_dst: any,
        rt_gateway: sockaddr_in(gateway),
        rt_genmask: any,
        rt_flags: libc::RTF_UP | libc::RTF_GATEWAY,
        rt_pad2: 0,
        rt_pad3: 0,
        rt_pad4: std::ptr::null_mut(),
        rt_metric: 0,
        rt_dev: std::ptr::null_mut(),
        rt_mtu: 0,
        rt_window: 0,
        rt_irtt: 0,
    };
    match ioctl(sock, libc::SIOCADDRT, &mut rt) {
        // A default route that is already there (an agent restarted as a service) is fine.
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_the_gateway_as_default_dns() {
        let s: NetSpec = "10.0.2.15/24,10.0.2.2".parse().unwrap();
        assert_eq!(s.addr, Ipv4Addr::new(10, 0, 2, 15));
        assert_eq!(s.netmask(), Ipv4Addr::new(255, 255, 255, 0));
        assert_eq!((s.gateway, s.dns), (Ipv4Addr::new(10, 0, 2, 2), Ipv4Addr::new(10, 0, 2, 2)));
        let s: NetSpec = "192.168.7.2/30,192.168.7.1,1.1.1.1".parse().unwrap();
        assert_eq!(s.dns, Ipv4Addr::new(1, 1, 1, 1));
        assert_eq!(s.netmask(), Ipv4Addr::new(255, 255, 255, 252));
        for bad in [
            "",
            "10.0.2.15",
            "10.0.2.15/24",
            "10.0.2.15/33,10.0.2.2",
            "x/24,10.0.2.2",
            "1.2.3.4/8,1.1.1.1,2.2.2.2,3",
        ] {
            assert!(bad.parse::<NetSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn resolv_conf_replaces_a_symlink_instead_of_following_it() {
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/nonexistent/stub-resolv.conf", d.path().join("resolv.conf")).unwrap();
        write_resolv_conf(d.path(), Ipv4Addr::new(10, 0, 2, 2)).unwrap();
        assert_eq!(std::fs::read_to_string(d.path().join("resolv.conf")).unwrap(), "nameserver 10.0.2.2\n");
    }

    #[test]
    fn the_first_interface_but_lo_is_picked() {
        let d = tempfile::tempdir().unwrap();
        for n in ["lo", "eth1", "eth0"] {
            std::fs::create_dir(d.path().join(n)).unwrap();
        }
        assert_eq!(wait_for_interface(d.path()).unwrap(), "eth0");
    }
}
