//! `atoll secret ...`: the store and the bindings ([`crate::secrets`]).

use std::fmt::Write as _;
use std::io::Read;

use anyhow::Result;

use super::{Ctx, UsageError, print};
use crate::cli::{SecretCommand, SecretSetArgs};
use crate::secrets::{self, Source};

/// Runs one `atoll secret` command.
pub(crate) async fn run(ctx: &Ctx, cmd: SecretCommand) -> Result<u8> {
    match cmd {
        SecretCommand::Set(args) => set(ctx, args),
        SecretCommand::Ls => {
            let all = secrets::list()?;
            let mut text = String::new();
            for s in &all {
                let _ = writeln!(text, "{}\t{}\t{}\t{}", s.name, s.hosts.join(","), s.source, s.updated);
            }
            if all.is_empty() {
                text.push_str("no secrets; `atoll secret set NAME --host HOST` stores one\n");
            }
            print(ctx, &all, &text)
        }
        SecretCommand::Rm(a) => {
            secrets::remove(&a.name)?;
            print(ctx, &serde_json::json!({ "removed": a.name }), &format!("removed secret {}\n", a.name))
        }
        SecretCommand::Attach(a) => {
            let b = secrets::attach(&a.sandbox, &a.secret, a.env.as_deref()).await?;
            let text = format!(
                "{}={} (secret {}; commands started from now on see it)\n",
                b.env, b.placeholder, b.secret
            );
            print(ctx, &b, &text)
        }
        SecretCommand::Detach(a) => {
            let gone = secrets::detach(&a.sandbox, &a.secret)?;
            let text: String = gone.iter().map(|b| format!("detached {} ({})\n", b.secret, b.env)).collect();
            print(ctx, &gone, &text)
        }
    }
}

fn set(ctx: &Ctx, args: SecretSetArgs) -> Result<u8> {
    let source = match (&args.from_env, &args.from_command) {
        (Some(var), _) => {
            let value = std::env::var(var).map_err(|_| {
                UsageError(format!("--from-env {var}: the variable is not set (or not UTF-8) here"))
            })?;
            Source::Value { value, origin: format!("env {var}") }
        }
        (None, Some(command)) => {
            Source::Command { command: command.clone(), cache_secs: args.cache.as_secs().max(1) }
        }
        (None, None) => {
            if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                eprintln!("reading the value of {} from stdin (end with Ctrl-D)", args.name);
            }
            let mut value = String::new();
            std::io::stdin()
                .take(u64::try_from(secrets::store::VALUE_MAX + 2).unwrap_or(u64::MAX))
                .read_to_string(&mut value)
                .map_err(|e| UsageError(format!("cannot read the value from stdin: {e}")))?;
            let value = value.strip_suffix('\n').unwrap_or(&value);
            let value = value.strip_suffix('\r').unwrap_or(value).to_owned();
            Source::Value { value, origin: "stdin".into() }
        }
    };
    let info = secrets::set(&args.name, &args.hosts, source)?;
    let text = format!("secret {} stored for {}\n", info.name, info.hosts.join(", "));
    print(ctx, &info, &text)
}
