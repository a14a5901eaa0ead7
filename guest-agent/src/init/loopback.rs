//! Bringing up the loopback interface, as `ip link set lo up` would.

/// `ip link set lo up`, with the two ioctls it makes.
pub(super) fn loopback_up() -> std::io::Result<()> {
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
        *dst = libc::c_char::from_ne_bytes([*src]);
    }
    // SAFETY: SIOCGIFFLAGS reads the NUL-terminated name and writes ifru_flags of `req`,
    // which lives for the whole call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just filled ifru_flags; reading a c_short from the union is sound.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    let up = libc::c_short::try_from(libc::IFF_UP | libc::IFF_RUNNING)
        .expect("IFF_UP and IFF_RUNNING are low bits");
    req.ifr_ifru.ifru_flags = flags | up;
    // SAFETY: SIOCSIFFLAGS reads the name and the flags from `req`, valid for the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
