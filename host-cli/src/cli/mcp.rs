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
  atoll mcp --http 127.0.0.1:8765
  claude mcp add --transport http atoll http://127.0.0.1:8765/mcp

  umask 077; mkdir -p ~/.config/atoll; head -c32 /dev/urandom | base64 > ~/.config/atoll/mcp-token
  atoll mcp --http 0.0.0.0:8765 --token-file ~/.config/atoll/mcp-token --allowed-host atoll.internal
  claude mcp add --transport http atoll http://atoll.internal:8765/mcp \\
      --header \"Authorization: Bearer $(cat ~/.config/atoll/mcp-token)\"

A bind that is not loopback needs a token (--token-file or ATOLL_MCP_TOKEN); clients send
it as `Authorization: Bearer TOKEN`, and get 401 without it. Requests whose Host is not
a loopback name, the bound address, this host's name or an --allowed-host, and browser
requests from an Origin that is not loopback or an --allowed-origin, get 403.
Port 0 picks a free port; the URL is printed on stderr. SIGINT or SIGTERM stops the
server and cancels open calls. Set-up for Cursor, VS Code, Windsurf, Codex and a systemd
user service: the README's `atoll mcp` section; the details: docs/mcp.md.";

/// `atoll mcp`.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// Let `sandbox_create` mount host folders under DIR (repeatable), besides those
    /// under the roots the MCP client declares.
    #[arg(long, value_name = "DIR")]
    pub allow_mount: Vec<std::path::PathBuf>,
    /// Serve over Streamable HTTP at http://ADDR/mcp instead of stdin/stdout, e.g.
    /// 127.0.0.1:8765 (port 0: a free one).
    #[arg(long, value_name = "ADDR", value_parser = parse_bind)]
    pub http: Option<SocketAddr>,
    /// File holding the bearer token HTTP clients must send (required unless the bind is
    /// loopback; the ATOLL_MCP_TOKEN environment variable gives it inline instead).
    #[arg(long, value_name = "PATH", requires = "http")]
    pub token_file: Option<PathBuf>,
    /// Also accept requests whose Host header names HOST (repeatable): the name clients
    /// use to reach a server bound beyond loopback, e.g. atoll.internal.
    #[arg(long, value_name = "HOST", requires = "http")]
    pub allowed_host: Vec<String>,
    /// Also accept browser requests from ORIGIN (repeatable), written as browsers send it,
    /// e.g. `https://app.example.com` or `http://localhost:5173`.
    #[arg(long, value_name = "ORIGIN", requires = "http")]
    pub allowed_origin: Vec<String>,
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
