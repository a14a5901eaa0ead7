//! The host's own addresses (every interface), which a sandbox must not reach.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Every address on the host's interfaces, from getifaddrs(3).
pub(crate) fn host_addrs() -> io::Result<Vec<IpAddr>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a pointer to a list it allocates into `list`.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut addrs = Vec::new();
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let node = unsafe { &*cur };
        if !node.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr whose family says its real type.
            let family = i32::from(unsafe { (*node.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: the family is AF_INET, so the sockaddr is a sockaddr_in.
                let sin = unsafe { &*(node.ifa_addr as *const libc::sockaddr_in) };
                addrs.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))));
            } else if family == libc::AF_INET6 {
                // SAFETY: the family is AF_INET6, so the sockaddr is a sockaddr_in6.
                let sin6 = unsafe { &*(node.ifa_addr as *const libc::sockaddr_in6) };
                addrs.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
            }
        }
        cur = node.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once, after the last use.
    unsafe { libc::freeifaddrs(list) };
    addrs.sort();
    addrs.dedup();
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_host_has_at_least_loopback() {
        let addrs = super::host_addrs().expect("getifaddrs");
        assert!(addrs.contains(&"127.0.0.1".parse().expect("ip")), "{addrs:?}");
    }
}
