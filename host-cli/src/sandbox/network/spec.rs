//! The shapes of published ports and network modes, and the `[HOSTPORT:]GUESTPORT`
//! grammar (Docker's order) of `atoll port publish` and `atoll create --publish`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where published ports listen unless `--bind` says otherwise.
pub const DEFAULT_BIND: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Whether a sandbox has a network (a NIC whose traffic the host helper polices).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum NetworkMode {
    /// A NIC: the public internet by policy, DNS through the host.
    #[default]
    Default,
    /// No NIC at all. Published ports still work (they go over the agent link).
    None,
}

impl NetworkMode {
    /// `default` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::Default => "default",
            NetworkMode::None => "none",
        }
    }
}

impl FromStr for NetworkMode {
    type Err = String;

    fn from_str(s: &str) -> Result<NetworkMode, String> {
        match s {
            "default" => Ok(NetworkMode::Default),
            "none" => Ok(NetworkMode::None),
            _ => Err(format!("`{s}` is not a network; give `default` or `none`")),
        }
    }
}

/// A port to publish: `[HOSTPORT:]GUESTPORT`, Docker's order; no host port means an
/// ephemeral one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortSpec {
    /// The TCP port in the guest.
    pub guest_port: u16,
    /// The host port; `None`: one the kernel picks.
    pub host_port: Option<u16>,
    /// The host address to listen on.
    pub bind: IpAddr,
}

impl PortSpec {
    /// The host socket address to listen on.
    pub fn listen_addr(&self) -> SocketAddr {
        SocketAddr::new(self.bind, self.host_port.unwrap_or(0))
    }
}

/// How the port form is written, for messages.
const PORT_FORM: &str = "write [HOSTPORT:]GUESTPORT (Docker's order) with ports 1 to 65535, e.g. 8000 (a free host port) or 8080:8000 (host port 8080 to guest port 8000)";

impl FromStr for PortSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<PortSpec, String> {
        let port = |p: &str, which: &str| {
            p.parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("`{s}`: {which} `{p}` is not a TCP port; {PORT_FORM}"))
        };
        // Docker's `/tcp` suffix is accepted; anything else it takes is refused by name
        // rather than guessed at.
        let body = s.strip_suffix("/tcp").unwrap_or(s);
        if body.contains('/') {
            return Err(format!("`{s}`: only TCP ports are published (no `/udp`); {PORT_FORM}"));
        }
        if body.contains('-') {
            return Err(format!(
                "`{s}`: port ranges are not taken; publish each port on its own; {PORT_FORM}"
            ));
        }
        let (host, guest) = match body.split(':').collect::<Vec<_>>()[..] {
            [guest] => (None, port(guest, "guest port")?),
            [host, guest] => (Some(port(host, "host port")?), port(guest, "guest port")?),
            _ => {
                return Err(format!(
                    "`{s}`: a host address goes in --bind (`atoll port publish SANDBOX PORT --bind ADDR`), not in the port; {PORT_FORM}"
                ));
            }
        };
        Ok(PortSpec { guest_port: guest, host_port: host, bind: DEFAULT_BIND })
    }
}

/// A guest port published on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(inline)]
pub struct PublishedPort {
    /// The TCP port in the guest.
    pub guest_port: u16,
    /// The host address it listens on.
    pub bind: IpAddr,
    /// The host port.
    pub host_port: u16,
    /// `http://ADDR:PORT`, for scripts and tools.
    pub url: String,
    /// `http://NAME.localhost:PORT`, for a browser on this host: browsers send
    /// `*.localhost` to loopback, and cookies are kept per host name, not per port, so a
    /// preview opened there shares no cookies with other sandboxes or other loopback
    /// servers. Absent when the port is not on loopback or the sandbox's name is not a
    /// DNS label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser_url: Option<String>,
}

impl PublishedPort {
    /// The publication of `guest_port` at `host`.
    pub fn new(guest_port: u16, host: SocketAddr) -> PublishedPort {
        let shown = match host.ip() {
            // A wildcard listens on loopback too, the address a browser on this host uses.
            IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::new(DEFAULT_BIND, host.port()),
            IpAddr::V6(ip) if ip.is_unspecified() => {
                SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), host.port())
            }
            _ => host,
        };
        PublishedPort {
            guest_port,
            bind: host.ip(),
            host_port: host.port(),
            url: format!("http://{shown}"),
            browser_url: None,
        }
    }

    /// The same, with the browser URL of sandbox `name` (see [`PublishedPort::browser_url`]).
    pub fn named(mut self, name: &str) -> PublishedPort {
        let loopback = self.bind.is_loopback() || self.bind.is_unspecified();
        self.browser_url = (loopback && is_dns_label(name))
            .then(|| format!("http://{}.localhost:{}", name.to_ascii_lowercase(), self.host_port));
        self
    }
}

/// True when `name` can stand as one label of a host name (letters, digits and inner
/// hyphens, at most 63 bytes).
fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with('-')
        && !name.ends_with('-')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_specs_parse_and_bad_ones_say_the_form() {
        let s: PortSpec = "8000".parse().unwrap();
        assert_eq!((s.guest_port, s.host_port), (8000, None));
        // Docker's order: host port first.
        let s: PortSpec = "18080:8000".parse().unwrap();
        assert_eq!((s.guest_port, s.host_port, s.bind), (8000, Some(18080), DEFAULT_BIND));
        let s: PortSpec = "18080:8000/tcp".parse().unwrap();
        assert_eq!((s.guest_port, s.host_port), (8000, Some(18080)));
        for (bad, why) in [
            ("0", "guest port `0`"),
            ("70000", "guest port `70000`"),
            ("0:80", "host port `0`"),
            ("80:0", "guest port `0`"),
            ("x", "is not a TCP port"),
            ("", "is not a TCP port"),
            ("80:", "guest port ``"),
            (":80", "host port ``"),
            ("127.0.0.1:80:80", "--bind"),
            ("1:2:3", "--bind"),
            ("53/udp", "only TCP"),
            ("8000-8010", "ranges"),
        ] {
            let e = bad.parse::<PortSpec>().unwrap_err();
            assert!(e.contains("[HOSTPORT:]GUESTPORT") && e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn urls_name_an_address_a_browser_can_open() {
        let p = PublishedPort::new(8000, "127.0.0.1:4000".parse().unwrap());
        assert_eq!(p.url, "http://127.0.0.1:4000");
        assert_eq!(PublishedPort::new(1, "0.0.0.0:4000".parse().unwrap()).url, "http://127.0.0.1:4000");
        assert_eq!(PublishedPort::new(1, "[::]:4000".parse().unwrap()).url, "http://[::1]:4000");
        assert_eq!(PublishedPort::new(1, "[::1]:4000".parse().unwrap()).url, "http://[::1]:4000");
    }

    #[test]
    fn browsers_get_a_host_name_of_the_sandbox_own_on_loopback_only() {
        let at =
            |host: &str, name: &str| PublishedPort::new(80, host.parse().unwrap()).named(name).browser_url;
        assert_eq!(at("127.0.0.1:4000", "brisk-seal").as_deref(), Some("http://brisk-seal.localhost:4000"));
        assert_eq!(at("0.0.0.0:4000", "Dev1").as_deref(), Some("http://dev1.localhost:4000"));
        assert_eq!(at("[::1]:4000", "dev").as_deref(), Some("http://dev.localhost:4000"));
        // Not on loopback: another machine's browser would not send NAME.localhost here.
        assert_eq!(at("192.168.1.5:4000", "dev"), None);
        // Names that are not one DNS label get no host name.
        for bad in ["my_box", "a.b", "-x", "x-", &"a".repeat(64)] {
            assert_eq!(at("127.0.0.1:4000", bad), None, "{bad}");
        }
    }
}
