//! The `atoll.*` settings on the kernel command line (`atoll.listen=`, `atoll.announce=`,
//! `atoll.hostname=`, `atoll.net=`, `atoll.mount=`, `atoll.disk=`).

use atoll_proto::Address;

/// The `atoll.*` settings from the kernel command line.
#[derive(Debug, Default)]
pub struct KernelCmdline {
    listen: Option<Address>,
    announce: Option<Address>,
    hostname: Option<String>,
    net: Option<crate::net::NetSpec>,
    mounts: Vec<crate::storage::ShareSpec>,
    disk: Option<u64>,
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
                "atoll.listen" => &mut out.listen,
                "atoll.announce" => &mut out.announce,
                "atoll.hostname" => {
                    if valid_hostname(value) {
                        out.hostname = Some(value.to_owned());
                    } else {
                        tracing::warn!(
                            "ignoring atoll.hostname={value}: use 1 to 64 letters, digits, `-` and `.`"
                        );
                    }
                    continue;
                }
                "atoll.mount" => {
                    match value.parse() {
                        Ok(spec) => out.mounts.push(spec),
                        Err(e) => tracing::warn!("ignoring atoll.mount: {e}"),
                    }
                    continue;
                }
                "atoll.disk" => {
                    match value.parse() {
                        Ok(bytes) => out.disk = Some(bytes),
                        Err(e) => tracing::warn!("ignoring atoll.disk={value}: {e}"),
                    }
                    continue;
                }
                "atoll.net" => {
                    match value.parse() {
                        Ok(spec) => out.net = Some(spec),
                        Err(e) => tracing::warn!("ignoring atoll.net: {e}"),
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

    /// `atoll.listen=`, if given.
    pub fn listen(&self) -> Option<Address> {
        self.listen.clone()
    }

    /// `atoll.announce=`, if given.
    pub fn announce(&self) -> Option<Address> {
        self.announce.clone()
    }

    /// `atoll.net=`, if given and valid: the guest's NIC settings.
    pub fn net(&self) -> Option<crate::net::NetSpec> {
        self.net
    }

    /// Every valid `atoll.mount=`: the host folders to mount, in order.
    pub fn mounts(&self) -> &[crate::storage::ShareSpec] {
        &self.mounts
    }

    /// `atoll.disk=`, if given: the size of the writable root in bytes.
    pub fn disk(&self) -> Option<u64> {
        self.disk
    }

    /// `atoll.hostname=`, if given and valid.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_reads_atoll_settings_and_ignores_the_rest() {
        let c = KernelCmdline::parse(
            "console=ttyS0 quiet atoll.listen=vsock://-1:2000 atoll.announce=vsock://2:1025 atoll.hostname=box-1 atoll.net=10.0.2.15/24,10.0.2.2",
        );
        assert_eq!(c.net().map(|n| n.addr), Some(std::net::Ipv4Addr::new(10, 0, 2, 15)));
        assert_eq!(KernelCmdline::parse("atoll.net=nonsense").net(), None);
        assert_eq!(c.listen(), Some(Address::Vsock { cid: u32::MAX, port: 2000 }));
        assert_eq!(c.announce(), Some(Address::Vsock { cid: 2, port: 1025 }));
        assert_eq!(c.hostname(), Some("box-1"));
        let c = KernelCmdline::parse(
            "atoll.mount=atoll0:/a:ro atoll.mount=atoll1:/b:rw atoll.mount=bad atoll.disk=1048576",
        );
        assert_eq!(c.mounts().len(), 2);
        assert_eq!(c.disk(), Some(1 << 20));
        assert_eq!(KernelCmdline::parse("atoll.disk=8G").disk(), None);
    }

    #[test]
    fn cmdline_refuses_bad_hostnames() {
        for bad in ["atoll.hostname=", "atoll.hostname=-x", "atoll.hostname=a/b", "atoll.hostname=a;reboot"] {
            assert_eq!(KernelCmdline::parse(bad).hostname(), None, "{bad}");
        }
        let long = format!("atoll.hostname={}", "a".repeat(65));
        assert_eq!(KernelCmdline::parse(&long).hostname(), None);
    }
}
