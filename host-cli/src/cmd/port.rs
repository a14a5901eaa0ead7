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
            print(ctx, &p, &format!("{}\n", p.port.url))
        }
        PortCommand::Ls(a) => {
            let ports = network::ports(&a.sandbox).await?;
            let mut t = String::new();
            if !ports.is_empty() {
                let _ = writeln!(t, "{:<7} {:<22} URL", "GUEST", "HOST");
            }
            for p in &ports {
                let host = std::net::SocketAddr::new(p.bind, p.host_port).to_string();
                let _ = writeln!(t, "{:<7} {:<22} {}", p.guest_port, host, p.url);
            }
            print(ctx, &ports, &t)
        }
        PortCommand::Unpublish(a) => {
            let p = network::unpublish(&a.sandbox, a.guest_port).await?;
            print(ctx, &p, &format!("{} closed\n", p.url))
        }
    }
}
