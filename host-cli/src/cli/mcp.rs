//! `atoll mcp`: stdio by default, Streamable HTTP with `--http`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

/// The examples under `atoll mcp --help`.
pub(super) const MCP_AFTER_HELP: &str = "\
Over stdio (the client starts atoll):
  claude mcp add atoll -- atoll mcp --agent unix:///tmp/agent.sock
  ATOLL_SANDBOX=dev atoll mcp
  atoll mcp --allow-mount ~/projects   (sandbox_create may mount folders under it)

Over HTTP (one long-running server, many clients):
  atoll mcp --http 127.0.0.1:8765      (prints where the token it made is)
  claude mcp add --transport http atoll http://127.0.0.1:8765/mcp \\
      --header \"Authorization: Bearer $(cat ~/.local/state/atoll/mcp-token)\"

  umask 077; mkdir -p ~/.config/atoll; head -c32 /dev/urandom | base64 > ~/.config/atoll/mcp-token
  atoll mcp --http 0.0.0.0:8765 --token-file ~/.config/atoll/mcp-token --allowed-host atoll.internal
  claude mcp add --transport http atoll http://atoll.internal:8765/mcp \\
      --header \"Authorization: Bearer $(cat ~/.config/atoll/mcp-token)\"

Every HTTP server needs a token, loopback too: --token-file (one token per line, each a
client of its own), ATOLL_MCP_TOKEN, or, without either, one the server makes in
$ATOLL_STATE_DIR/mcp-token (mode 0600). Clients send it as `Authorization: Bearer TOKEN`,
and get 401 without it. Over HTTP, client roots never count: only --allow-mount folders
can be mounted. Requests whose Host is not a loopback name, the bound address, this
host's name or an --allowed-host, and browser requests from an Origin that is not
exactly an --allowed-origin, get 403. A client over --max-sessions or --max-in-flight
gets 429.
Port 0 picks a free port; the URL is printed on stderr. SIGINT or SIGTERM stops the
server and cancels open calls. Set-up for Cursor, VS Code, Windsurf, Codex and a systemd
user service: the README's `atoll mcp` section; the details: docs/mcp.md.";

/// `atoll mcp`.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// Let `sandbox_create` mount host folders under DIR (repeatable). Over stdio, folders
    /// under the roots the MCP client declares may be mounted too; over HTTP only these.
    #[arg(long, value_name = "DIR")]
    pub allow_mount: Vec<std::path::PathBuf>,
    /// Let MCP tools open private destinations inside CIDR (repeatable): loopback, this
    /// host's addresses, link-local and metadata, private and shared ranges are refused to
    /// every allow_out a client sends otherwise.
    #[arg(long, value_name = "CIDR", value_parser = parse_cidr)]
    pub allow_private_egress: Vec<ipnet::IpNet>,
    /// Let `sandbox_template_create` pull images with your registry credentials (what
    /// `skopeo` finds: $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json,
    /// ~/.docker/config.json). Every MCP client can then build a template from any image
    /// you can pull, private ones too, and read its files. Without it, pulls over MCP are
    /// anonymous: public images only.
    #[arg(long)]
    pub registry_credentials: bool,
    /// Let MCP tools bind the stored secret NAME (repeatable) to sandboxes (as a
    /// placeholder; no MCP tool ever sees or sets a value). Without it (or
    /// --allow-all-secrets) no secret can be bound over MCP.
    #[arg(long = "secret", value_name = "NAME")]
    pub secrets: Vec<String>,
    /// Let MCP tools bind every stored secret.
    #[arg(long)]
    pub allow_all_secrets: bool,
    /// Hand sandbox NAME (repeatable) over to MCP clients: besides the sandboxes a client
    /// created itself, MCP tools act only on those handed over. NAME is resolved to the
    /// sandbox's id when the server starts: one made later under that name is not.
    #[arg(long, value_name = "NAME")]
    pub share_sandbox: Vec<String>,
    /// Hand every sandbox the CLI created over to MCP clients.
    #[arg(long)]
    pub share_cli_sandboxes: bool,
    /// Serve over Streamable HTTP at http://ADDR/mcp instead of stdin/stdout, e.g.
    /// 127.0.0.1:8765 (port 0: a free one).
    #[arg(long, value_name = "ADDR", value_parser = parse_bind)]
    pub http: Option<SocketAddr>,
    /// File holding the bearer tokens HTTP clients must send, one per line, each a client
    /// of its own (the ATOLL_MCP_TOKEN environment variable gives one inline instead).
    /// Without either, the server makes a token in a 0600 file in the state directory and
    /// prints where it is.
    #[arg(long, value_name = "PATH", requires = "http")]
    pub token_file: Option<PathBuf>,
    /// The most MCP sessions one HTTP client (one token) may hold open; over it, 429.
    #[arg(long, value_name = "N", requires = "http", default_value_t = crate::mcp::http::limits::DEFAULT_MAX_SESSIONS,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_sessions: u32,
    /// The most requests one HTTP client (one token) may have in flight; over it, 429.
    #[arg(long, value_name = "N", requires = "http", default_value_t = crate::mcp::http::limits::DEFAULT_MAX_IN_FLIGHT,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_in_flight: u32,
    /// Also accept requests whose Host header names HOST (repeatable): the name clients
    /// use to reach a server bound beyond loopback, e.g. atoll.internal.
    #[arg(long, value_name = "HOST", requires = "http")]
    pub allowed_host: Vec<String>,
    /// Also accept browser requests from ORIGIN (repeatable), written as browsers send it,
    /// e.g. `https://app.example.com` or `http://localhost:5173`.
    #[arg(long, value_name = "ORIGIN", requires = "http")]
    pub allowed_origin: Vec<String>,
    /// Give up on a tool's read from a guest (a file, a folder's zip) when its agent sends
    /// nothing for this long.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = super::parse_duration)]
    pub idle_timeout: std::time::Duration,
}

/// A CIDR (`10.1.0.0/16`) or one address (`127.0.0.1`, a /32 or /128).
fn parse_cidr(s: &str) -> Result<ipnet::IpNet, String> {
    let text = s.trim();
    text.parse::<ipnet::IpNet>()
        .map(|n| n.trunc())
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("`{s}` is not a CIDR or an IP; e.g. 10.1.0.0/16, 127.0.0.1 or fd00::/8"))
}

/// `IP:PORT`, or `localhost:PORT` for 127.0.0.1.
fn parse_bind(s: &str) -> Result<SocketAddr, String> {
    let text = s.trim();
    let text = match text.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => text.to_owned(),
    };
    text.parse().map_err(|_| format!("`{s}` is not IP:PORT; e.g. 127.0.0.1:8765, [::1]:8765 or 0.0.0.0:8765"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds() {
        assert_eq!(parse_bind("localhost:8765").unwrap(), "127.0.0.1:8765".parse().unwrap());
        assert_eq!(parse_bind("[::1]:0").unwrap(), "[::1]:0".parse().unwrap());
        assert!(parse_bind("8765").unwrap_err().contains("IP:PORT"));
    }
}
