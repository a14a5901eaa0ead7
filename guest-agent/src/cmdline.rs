//! The `sbx.*` settings on the kernel command line (`sbx.listen=`, `sbx.announce=`,
//! `sbx.hostname=`, `sbx.net=`, `sbx.mount=`, `sbx.disk=`).

use sbx_proto::Address;

/// The `sbx.*` settings from the kernel command line.
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
                "sbx.mount" => {
                    match value.parse() {
                        Ok(spec) => out.mounts.push(spec),
                        Err(e) => tracing::warn!("ignoring sbx.mount: {e}"),
                    }
                    continue;
                }
                "sbx.disk" => {
                    match value.parse() {
                        Ok(bytes) => out.disk = Some(bytes),
                        Err(e) => tracing::warn!("ignoring sbx.disk={value}: {e}"),
                    }
                    continue;
                }
                "sbx.net" => {
                    match value.parse() {
                        Ok(spec) => out.net = Some(spec),
                        Err(e) => tracing::warn!("ignoring sbx.net: {e}"),
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

    /// `sbx.net=`, if given and valid: the guest's NIC settings.
    pub fn net(&self) -> Option<crate::net::NetSpec> {
        self.net
    }

    /// Every valid `sbx.mount=`: the host folders to mount, in order.
    pub fn mounts(&self) -> &[crate::storage::ShareSpec] {
        &self.mounts
    }

    /// `sbx.disk=`, if given: the size of the writable root in bytes.
    pub fn disk(&self) -> Option<u64> {
        self.disk
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_reads_sbx_settings_and_ignores_the_rest() {
        let c = KernelCmdline::parse(
            "console=ttyS0 quiet sbx.listen=vsock://-1:2000 sbx.announce=vsock://2:1025 sbx.hostname=box-1 sbx.net=10.0.2.15/24,10.0.2.2",
        );
        assert_eq!(c.net().map(|n| n.addr), Some(std::net::Ipv4Addr::new(10, 0, 2, 15)));
        assert_eq!(KernelCmdline::parse("sbx.net=nonsense").net(), None);
        assert_eq!(c.listen(), Some(Address::Vsock { cid: u32::MAX, port: 2000 }));
        assert_eq!(c.announce(), Some(Address::Vsock { cid: 2, port: 1025 }));
        assert_eq!(c.hostname(), Some("box-1"));
        let c =
            KernelCmdline::parse("sbx.mount=sbx0:/a:ro sbx.mount=sbx1:/b:rw sbx.mount=bad sbx.disk=1048576");
        assert_eq!(c.mounts().len(), 2);
        assert_eq!(c.disk(), Some(1 << 20));
        assert_eq!(KernelCmdline::parse("sbx.disk=8G").disk(), None);
    }

    #[test]
    fn cmdline_refuses_bad_hostnames() {
        for bad in ["sbx.hostname=", "sbx.hostname=-x", "sbx.hostname=a/b", "sbx.hostname=a;reboot"] {
            assert_eq!(KernelCmdline::parse(bad).hostname(), None, "{bad}");
        }
        let long = format!("sbx.hostname={}", "a".repeat(65));
        assert_eq!(KernelCmdline::parse(&long).hostname(), None);
    }
}
