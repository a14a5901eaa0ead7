//! `atoll port publish|ls|unpublish`: thin callers of [`crate::sandbox::network`].

use super::print;
use std::fmt::Write as _;

use anyhow::Result;

use super::Ctx;
use crate::cli::PortCommand;
use crate::sandbox::network::{self, PortSpec};

/// Runs one `atoll port` subcommand.
pub(crate) async fn run(ctx: &Ctx, cmd: PortCommand) -> Result<u8> {
    match cmd {
        PortCommand::Publish(a) => {
            let spec = PortSpec { bind: a.bind, ..a.port };
            let p = network::publish(&a.sandbox, spec).await?;
            if p.listening == Some(false) && !ctx.out.json {
                eprintln!(
                    "note: nothing listens on guest port {} yet; the port is published and works once a server listens there",
                    p.port.guest_port
                );
            }
            if let (Some(browser), false) = (&p.port.browser_url, ctx.out.json) {
                eprintln!("in a browser on this host: {browser} (cookies of its own)");
            }
            print(ctx, &p, &format!("{}\n", p.port.url))
        }
        PortCommand::Ls(a) => {
            let list = network::ports(&a.sandbox).await?;
            let mut t = String::new();
            if !list.ports.is_empty() {
                let _ = writeln!(t, "{:<7} {:<22} {:<28} BROWSER", "GUEST", "HOST", "URL");
            }
            // A parked sandbox's ports come back with it; until then nothing listens.
            let state = if list.parked { "  (parked: not listening)" } else { "" };
            for p in &list.ports {
                let host = std::net::SocketAddr::new(p.bind, p.host_port).to_string();
                let browser = p.browser_url.as_deref().unwrap_or("-");
                let _ = writeln!(t, "{:<7} {:<22} {:<28} {browser}{state}", p.guest_port, host, p.url);
            }
            if list.parked && !list.ports.is_empty() && !ctx.out.json {
                eprintln!(
                    "note: `{0}` is parked; its ports listen again once it is resumed (`atoll resume {0}`)",
                    a.sandbox
                );
            }
            print(ctx, &list.ports, &t)
        }
        PortCommand::Unpublish(a) => {
            let p = network::unpublish(&a.sandbox, a.guest_port).await?;
            print(ctx, &p, &format!("{} closed\n", p.url))
        }
    }
}
