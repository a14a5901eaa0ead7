//! The address grammar shared by `atoll` and `atoll-agent`.
//!
//! | form                      | meaning                                                     |
//! |---------------------------|-------------------------------------------------------------|
//! | `vsock://CID:PORT`        | AF_VSOCK; CID `-1` means "any" (for listening)              |
//! | `hvsock:///PATH:PORT`     | Firecracker / Cloud Hypervisor hybrid vsock: a Unix socket  |
//! |                           | on the host, then `CONNECT PORT\n` and `OK ...\n`           |
//! | `unix:///PATH`            | a Unix socket (development, tests)                          |
//! | `tcp://HOST:PORT`         | TCP (development)                                           |

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// `VMADDR_CID_ANY`: listen on every CID.
pub const VSOCK_CID_ANY: u32 = u32::MAX;
/// `VMADDR_CID_HOST`: the host, as seen from a guest.
pub const VSOCK_CID_HOST: u32 = 2;

/// Where an agent listens or where the host reaches one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Address {
    /// AF_VSOCK context id and port.
    Vsock {
        /// Context id; [`VSOCK_CID_ANY`] for "any".
        cid: u32,
        /// vsock port.
        port: u32,
    },
    /// A hybrid-vsock Unix socket and the guest port to ask it for.
    HybridVsock {
        /// The VMM's Unix socket on the host.
        path: PathBuf,
        /// The guest vsock port, sent as `CONNECT <port>\n`.
        port: u32,
    },
    /// A Unix stream socket.
    Unix(PathBuf),
    /// A TCP `host:port`.
    Tcp(String),
}

/// Why a string is not an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// No `scheme://` or an unknown one.
    #[error(
        "`{0}` is not an agent address; use vsock://CID:PORT, hvsock:///PATH:PORT, unix:///PATH or tcp://HOST:PORT"
    )]
    UnknownScheme(String),
    /// A port that is missing or not a number.
    #[error("`{0}` needs a port after the last `:` (a number from 0 to 4294967295)")]
    BadPort(String),
    /// A TCP port out of range.
    #[error("`{0}` needs a TCP port from 1 to 65535")]
    BadTcpPort(String),
    /// A vsock CID that is not a number or -1.
    #[error("`{0}` needs a CID: a number, or -1 for any")]
    BadCid(String),
    /// Unix and hybrid-vsock paths must be absolute.
    #[error("`{0}` needs an absolute socket path, as in unix:///run/atoll/agent.sock")]
    RelativePath(String),
    /// A NUL byte in a path.
    #[error("`{0}` contains a NUL byte")]
    Nul(String),
}

impl Address {
    /// The agent's default listen address: every CID, port 1024.
    pub fn default_listen() -> Self {
        Address::Vsock { cid: VSOCK_CID_ANY, port: crate::limits::DEFAULT_AGENT_PORT }
    }
}

impl FromStr for Address {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.contains('\0') {
            return Err(AddressError::Nul(s.escape_debug().to_string()));
        }
        let unknown = || AddressError::UnknownScheme(s.to_string());
        let (scheme, rest) = s.split_once("://").ok_or_else(unknown)?;
        match scheme {
            "vsock" => {
                let (cid, port) = rest.rsplit_once(':').ok_or_else(|| AddressError::BadPort(s.into()))?;
                let cid = match cid {
                    "-1" | "any" => VSOCK_CID_ANY,
                    _ => cid.parse().map_err(|_| AddressError::BadCid(s.into()))?,
                };
                Ok(Address::Vsock { cid, port: parse_port(port, s)? })
            }
            "hvsock" => {
                let (path, port) = rest.rsplit_once(':').ok_or_else(|| AddressError::BadPort(s.into()))?;
                let port = parse_port(port, s)?;
                Ok(Address::HybridVsock { path: absolute(path, s)?, port })
            }
            "unix" => Ok(Address::Unix(absolute(rest, s)?)),
            "tcp" => {
                let (host, port) = rest.rsplit_once(':').ok_or_else(|| AddressError::BadTcpPort(s.into()))?;
                match port.parse::<u16>() {
                    Ok(p) if p > 0 && !host.is_empty() => Ok(Address::Tcp(rest.to_string())),
                    _ => Err(AddressError::BadTcpPort(s.into())),
                }
            }
            _ => Err(unknown()),
        }
    }
}

fn parse_port(port: &str, whole: &str) -> Result<u32, AddressError> {
    port.parse().map_err(|_| AddressError::BadPort(whole.into()))
}

fn absolute(path: &str, whole: &str) -> Result<PathBuf, AddressError> {
    if path.starts_with('/') {
        Ok(PathBuf::from(path))
    } else {
        Err(AddressError::RelativePath(whole.into()))
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Vsock { cid: VSOCK_CID_ANY, port } => write!(f, "vsock://-1:{port}"),
            Address::Vsock { cid, port } => write!(f, "vsock://{cid}:{port}"),
            Address::HybridVsock { path, port } => write!(f, "hvsock://{}:{port}", path.display()),
            Address::Unix(path) => write!(f, "unix://{}", path.display()),
            Address::Tcp(hostport) => write!(f, "tcp://{hostport}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Address, AddressError> {
        s.parse()
    }

    #[test]
    fn parses_every_form_and_prints_it_back() {
        for s in [
            "vsock://3:1024",
            "vsock://-1:1024",
            "hvsock:///run/vm/v.sock:1024",
            "unix:///tmp/agent.sock",
            "tcp://127.0.0.1:7000",
            "tcp://[::1]:7000",
        ] {
            assert_eq!(parse(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn vsock_any_cid() {
        assert_eq!(parse("vsock://any:5").unwrap(), Address::Vsock { cid: VSOCK_CID_ANY, port: 5 });
        assert_eq!(Address::default_listen().to_string(), "vsock://-1:1024");
    }

    #[test]
    fn hybrid_vsock_path_may_contain_colons() {
        assert_eq!(
            parse("hvsock:///run/a:b/v.sock:52").unwrap(),
            Address::HybridVsock { path: "/run/a:b/v.sock".into(), port: 52 }
        );
    }

    #[test]
    fn rejects_with_a_reason() {
        assert!(matches!(parse("/tmp/x.sock"), Err(AddressError::UnknownScheme(_))));
        assert!(matches!(parse("http://x:1"), Err(AddressError::UnknownScheme(_))));
        assert!(matches!(parse("vsock://3"), Err(AddressError::BadPort(_))));
        assert!(matches!(parse("vsock://x:1"), Err(AddressError::BadCid(_))));
        assert!(matches!(parse("vsock://3:-2"), Err(AddressError::BadPort(_))));
        assert!(matches!(parse("hvsock://rel/v.sock:1"), Err(AddressError::RelativePath(_))));
        assert!(matches!(parse("hvsock:///v.sock"), Err(AddressError::BadPort(_))));
        assert!(matches!(parse("unix://rel.sock"), Err(AddressError::RelativePath(_))));
        assert!(matches!(parse("tcp://host:0"), Err(AddressError::BadTcpPort(_))));
        assert!(matches!(parse("tcp://:80"), Err(AddressError::BadTcpPort(_))));
        assert!(matches!(parse("unix:///a\0b"), Err(AddressError::Nul(_))));
        let msg = parse("foo").unwrap_err().to_string();
        assert!(msg.contains("vsock://CID:PORT"), "{msg}");
    }
}
