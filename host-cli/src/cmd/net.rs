//! `atoll net show|allow|deny|rm|set|log`: thin callers of [`crate::sandbox::network::policy`] and
//! [`crate::sandbox::network::audit`].

use super::print;
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Result;
use atoll_net::log::Record;
use atoll_net::policy::Verdict;

use super::{Ctx, UsageError};
use crate::cli::{LogArgs, NetCommand, VerdictArg};
use crate::sandbox::network::audit::{self, Follower, LogQuery};
use crate::sandbox::network::policy::{self, PolicyUpdate, PolicyView};

/// How often `atoll net log --follow` looks for new records.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// Runs one `atoll net` subcommand.
pub(crate) async fn run(ctx: &Ctx, cmd: NetCommand) -> Result<u8> {
    match cmd {
        NetCommand::Show(a) => {
            let view = policy::show(&a.sandbox)?;
            print(ctx, &view, &policy_text(&view))
        }
        NetCommand::Allow(a) => {
            let view = policy::set(&a.sandbox, PolicyUpdate { allow: a.rules, ..Default::default() }).await?;
            print(ctx, &view, &policy_text(&view))
        }
        NetCommand::Deny(a) => {
            let view = policy::set(&a.sandbox, PolicyUpdate { deny: a.rules, ..Default::default() }).await?;
            print(ctx, &view, &policy_text(&view))
        }
        NetCommand::Rm(a) => {
            let view =
                policy::set(&a.sandbox, PolicyUpdate { remove: a.rules, ..Default::default() }).await?;
            print(ctx, &view, &policy_text(&view))
        }
        NetCommand::Set(a) => {
            if !a.reset && a.allow_out.is_none() && a.deny_out.is_none() {
                return Err(UsageError(
                    "give --allow-out, --deny-out or --reset (`atoll net set --help`); to add one rule: `atoll net allow SANDBOX RULE`".into(),
                )
                .into());
            }
            let empty = || a.reset.then(Vec::new);
            let update = PolicyUpdate {
                allow_out: a.allow_out.clone().or_else(empty),
                deny_out: a.deny_out.clone().or_else(empty),
                ..Default::default()
            };
            let before = policy::show(&a.sandbox)?;
            let view = policy::set(&a.sandbox, update).await?;
            print(ctx, &view, &(replaced_text(&before, &view, a.reset) + &policy_text(&view)))
        }
        NetCommand::Log(a) => log(ctx, a).await,
    }
}

async fn log(ctx: &Ctx, a: LogArgs) -> Result<u8> {
    let verdict = a.verdict.map(|v| match v {
        VerdictArg::Allow => Verdict::Allow,
        VerdictArg::Deny => Verdict::Deny,
    });
    let query = LogQuery { verdict, limit: a.limit };
    // The follower starts at the log's end as read here, so nothing falls between.
    let mut follower = if a.follow { Some(Follower::new(&a.sandbox)?) } else { None };
    let records = audit::read(&a.sandbox, query)?;
    if let Ok(Some(health)) = audit::health(&a.sandbox).await {
        // On stderr, so that JSON output stays parseable.
        if let Some(e) = &health.error {
            eprintln!("warning: the audit log is FAILING and the sandbox's egress is refused: {e}");
        } else if health.failed_writes > 0 {
            eprintln!(
                "warning: {} audit lines could not be written earlier; the log has gaps",
                health.failed_writes
            );
        }
    }
    let Some(follower) = follower.as_mut() else {
        return if ctx.out.json {
            ctx.out.json(&records)?;
            Ok(0)
        } else {
            ctx.out.text(&records.iter().map(record_line).collect::<String>())?;
            Ok(0)
        };
    };
    // Following: one line per record, JSON lines with --json.
    let emit = |r: &Record| -> Result<()> {
        let line = if ctx.out.json { format!("{}\n", serde_json::to_string(r)?) } else { record_line(r) };
        ctx.out.text(&line)?;
        Ok(())
    };
    records.iter().try_for_each(emit)?;
    loop {
        for r in follower.next_batch().iter().filter(|r| query.wants(r)) {
            emit(r)?;
        }
        if !follower.sandbox_exists() {
            return Ok(0);
        }
        tokio::select! {
            () = tokio::time::sleep(FOLLOW_POLL) => {}
            _ = tokio::signal::ctrl_c() => return Ok(0),
        }
    }
}

/// One record as a line: time, kind, verdict, destination, rule, bytes, duration.
fn record_line(r: &Record) -> String {
    let verdict = match r.verdict {
        Verdict::Allow => "allow",
        Verdict::Deny => "DENY",
    };
    let kind =
        serde_json::to_value(r.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    let ip = r.ip.map_or_else(|| "-".to_string(), |ip| std::net::SocketAddr::new(ip, r.port).to_string());
    // Names and errors can come from the guest: escaped, so they cannot drive the terminal.
    let clean = |s: &str| atoll_net::peek::escape(s.as_bytes());
    let name = r.name.as_deref().map_or_else(|| "-".to_string(), clean);
    let event = match r.event {
        Some(atoll_net::log::Event::Open) => " open",
        Some(atoll_net::log::Event::Close) => " close",
        Some(atoll_net::log::Event::Request) => " request",
        None => "",
    };
    let mut line = format!(
        "{} {kind:<3} {verdict:<5} {name} {ip} rule={}{event} out={} in={} {}ms",
        r.time,
        clean(&r.rule),
        r.bytes_out,
        r.bytes_in,
        r.duration_ms
    );
    if let Some(conn) = r.conn {
        let _ = write!(line, " conn={conn}");
    }
    if let Some(n) = r.suppressed {
        let _ = write!(line, " suppressed={n}");
    }
    if let Some(t) = &r.invalid_name {
        let _ = write!(line, " invalid-name=\"{}\"", clean(t));
    }
    if let Some(s) = &r.secret {
        let _ = write!(line, " secret={}", clean(s));
    }
    if let Some(w) = &r.warning {
        let _ = write!(line, " WARNING=\"{}\"", clean(w));
    }
    if let Some(e) = &r.error {
        let _ = write!(line, " error=\"{}\"", clean(e));
    }
    line.push('\n');
    line
}

/// What `net set` replaced: each list it changed, with the rules it dropped, so a user
/// who meant to add a rule sees what went.
fn replaced_text(before: &PolicyView, after: &PolicyView, reset: bool) -> String {
    let mut t = String::new();
    for (name, old, new) in
        [("allow_out", &before.allow_out, &after.allow_out), ("deny_out", &before.deny_out, &after.deny_out)]
    {
        if old == new {
            continue;
        }
        let dropped: Vec<&str> = old.iter().filter(|r| !new.contains(r)).map(String::as_str).collect();
        if dropped.is_empty() {
            let _ = writeln!(t, "{name} replaced");
        } else if reset {
            let _ = writeln!(t, "{name} reset; dropped: {}", dropped.join(", "));
        } else {
            let _ = writeln!(
                t,
                "{name} replaced; dropped: {} (`atoll net allow|deny {} RULE` adds one rule and keeps the others)",
                dropped.join(", "),
                after.sandbox
            );
        }
    }
    t
}

fn policy_text(v: &PolicyView) -> String {
    let list = |l: &[String]| if l.is_empty() { "(none)".to_string() } else { l.join(", ") };
    let mut t = String::new();
    let _ = writeln!(t, "sandbox:   {}", v.sandbox);
    let _ = writeln!(t, "network:   {} (helper {})", v.network.as_str(), v.helper);
    let _ = writeln!(t, "allow_out: {}", list(&v.allow_out));
    let _ = writeln!(t, "deny_out:  {}", list(&v.deny_out));
    let _ = writeln!(
        t,
        "always denied unless an IP rule inside them allows it: loopback, this host, private ranges \
         (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7), link-local (169.254/16, fe80::/10), \
         168.63.129.16, 192.0.0/24, 198.18/15, multicast;\n\
         port 25 is denied unless an allow rule names :25; UDP other than DNS, and ICMP, are blocked; \
         the most specific matching rule decides; a connection whose name decides but that claims \
         none in time is judged by IP rules only."
    );
    t
}
