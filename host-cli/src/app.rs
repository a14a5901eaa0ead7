//! The top of the `atoll` command: parse, set up logging and the runtime, run the
//! subcommand, and turn its error into one message (or one JSON document) and an exit
//! code. This is the only place that uses `anyhow`'s error chain for display.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;

use crate::cli::{Cli, Command, EXIT_FAILURE, EXIT_UNREACHABLE, EXIT_USAGE};
use crate::client::ClientError;
use crate::cmd::UsageError;
use crate::connect::ConnectError;
use crate::sandbox::TargetError;

/// Runs `atoll` with the process's arguments and returns its exit code.
pub fn main() -> ExitCode {
    if std::env::args_os().nth(1).is_some_and(|a| a == "net-helper") {
        return net_helper();
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == "secret-runner") {
        let args: Vec<_> = std::env::args_os().skip(2).collect();
        return crate::secrets::runner::main(&args);
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == "agent-link") {
        return agent_link();
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    init_logging(cli.global.verbose);
    let json = cli.global.json;
    let bulk = matches!(cli.command, Command::Cp(_) | Command::Download(_));
    let runtime = match runtime(bulk) {
        Ok(rt) => rt,
        Err(e) => return report(&anyhow::Error::new(e).context("could not start the async runtime"), json),
    };
    let result = runtime.block_on(crate::cmd::run(cli));
    // A blocking read of stdin may still be parked in the runtime; do not wait for it.
    // The tasks still there are dropped first, so a lock one of them held is let go
    // before a dropped create's sandbox waits for it to be marked ready.
    runtime.shutdown_background();
    crate::sandbox::template_snap::finish_marking();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => report(&e, json),
    }
}

/// `atoll net-helper` lives as long as its sandbox, so it parses only its own arguments:
/// building the whole command tree would page in code it never runs again, and the
/// helper's resident set is measured per sandbox (BENCHMARKS.md).
fn net_helper() -> ExitCode {
    #[derive(Parser)]
    #[command(name = "atoll net-helper", about = "The per-sandbox network helper (atoll create runs it)")]
    struct HelperCli {
        #[command(flatten)]
        args: crate::cli::HelperArgs,
    }
    let helper = match HelperCli::try_parse_from(std::env::args_os().skip(1)) {
        Ok(helper) => helper,
        Err(e) => return usage_error(&e),
    };
    // The helper's own log is bounded (rate-limited, rotated); stderr stays for panics.
    if crate::sandbox::network::helper::log::init(&helper.args.dir).is_err() {
        init_logging(0);
    }
    let result =
        runtime(false).map_err(|e| anyhow::Error::new(e).context("could not start the async runtime"));
    let result = result.and_then(|rt| {
        let done = rt.block_on(crate::sandbox::network::helper::run(&helper.args));
        rt.shutdown_background();
        done.map_err(anyhow::Error::new)
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report(&e, false),
    }
}

/// `atoll agent-link` (hidden, for now run by hand): serves a VM's agent link (QEMU's
/// chardev socket of the port `atoll.agent`) on a Unix socket, in the foreground. The
/// per-sandbox `atoll net-helper` is meant to run the same module.
fn agent_link() -> ExitCode {
    #[derive(Parser)]
    #[command(
        name = "atoll agent-link",
        about = "Serve a VM's agent link (its virtio-serial port) on a Unix socket for every client"
    )]
    struct LinkCli {
        /// QEMU's chardev socket of the port atoll.agent (`<sandbox dir>/vm/wire/agent.port`).
        #[arg(long, value_name = "PATH")]
        port: std::path::PathBuf,
        /// The Unix socket to serve (`<sandbox dir>/agent.sock`); reach the agent with
        /// `atoll --agent unix://PATH`.
        #[arg(long, value_name = "PATH")]
        socket: std::path::PathBuf,
        /// How long a call waits for the link to come up before it fails (UNAVAILABLE).
        #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
        wait: std::time::Duration,
    }
    let link = match LinkCli::try_parse_from(std::env::args_os().skip(1)) {
        Ok(link) => link,
        Err(e) => return usage_error(&e),
    };
    init_logging(0);
    let result =
        runtime(false).map_err(|e| anyhow::Error::new(e).context("could not start the async runtime"));
    let result = result.and_then(|rt| {
        let ended = rt.block_on(crate::vmm::agent_link::run(&link.port, &link.socket, link.wait));
        rt.shutdown_background();
        Err(anyhow::Error::new(ended))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report(&e, false),
    }
}

/// The runtime a command runs on.
///
/// An agent call is a chain of small steps (encode, HTTP/2 framing, one socket write,
/// one read, decode). On a current-thread runtime they all run on the calling thread;
/// a multi-thread runtime hands the request to the connection task on a worker and the
/// answer back, a futex wake and a context switch each way (tens of microseconds each
/// inside a VM). So calls, and `atoll mcp`, run on one thread. Bulk copies (`cp` and
/// `download`) keep two workers, so that reading and writing files overlaps the
/// HTTP/2 framing of the stream.
pub fn runtime(bulk: bool) -> io::Result<tokio::runtime::Runtime> {
    let mut builder = if bulk {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.enable_all().build()
}

fn usage_error(e: &clap::Error) -> ExitCode {
    // Not `args()`: it panics on an argument that is not UTF-8 (the one clap refused).
    let json = std::env::args_os().any(|a| a == "--json");
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ if json => {
            let msg = e.render().to_string();
            let first = msg.lines().next().unwrap_or("").trim_start_matches("error: ").to_string();
            print_json_error("usage", &first, &[], EXIT_USAGE);
            ExitCode::from(EXIT_USAGE)
        }
        _ => {
            let _ = e.print();
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "atoll=info",
        2 => "atoll=debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // No colour codes when stderr is a file (the network helper's log, say).
    let ansi = io::IsTerminal::is_terminal(&io::stderr());
    let _ =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(io::stderr).with_ansi(ansi).try_init();
}

/// The exit code and the machine-readable kind of a failure.
fn classify(e: &anyhow::Error) -> (u8, &'static str) {
    for cause in e.chain() {
        if let Some(c) = cause.downcast_ref::<ClientError>() {
            return match c {
                c if c.is_unreachable() => (EXIT_UNREACHABLE, c.kind()),
                ClientError::Invalid(_) => (EXIT_USAGE, c.kind()),
                ClientError::Agent { code: tonic::Code::DeadlineExceeded, .. } => {
                    (crate::client::TIMEOUT_EXIT_CODE, c.kind())
                }
                c => (EXIT_FAILURE, c.kind()),
            };
        }
        if cause.downcast_ref::<ConnectError>().is_some() {
            return (EXIT_UNREACHABLE, "unreachable");
        }
        if let Some(t) = cause.downcast_ref::<TargetError>() {
            return match t {
                // A stopped VM answers nothing, like an endpoint that does not answer.
                TargetError::Stopped(_) => (EXIT_UNREACHABLE, "stopped"),
                TargetError::NoSandbox { .. } => (EXIT_FAILURE, "not_found"),
                TargetError::Lookup { .. } => (EXIT_FAILURE, "sandbox_lookup"),
                _ => (EXIT_USAGE, "usage"),
            };
        }
        if let Some(crate::tty::TtyError::NotATerminal { .. }) = cause.downcast_ref() {
            return (EXIT_USAGE, "usage");
        }
        if cause.downcast_ref::<UsageError>().is_some() {
            return (EXIT_USAGE, "usage");
        }
        // A Dockerfile's failing RUN: the build ends with the RUN's own exit code.
        if let Some(e @ crate::template::dockerfile::DockerfileError::RunFailed { .. }) = cause.downcast_ref()
        {
            return (e.exit_code(), "build_step_failed");
        }
        // A size, a count or a disk that cannot be: a usage error like clap's own.
        if let Some(crate::sandbox::SandboxError::BadResources(_) | crate::sandbox::SandboxError::Mount(_)) =
            cause.downcast_ref()
        {
            return (EXIT_USAGE, "usage");
        }
    }
    (EXIT_FAILURE, "error")
}

fn report(e: &anyhow::Error, json: bool) -> ExitCode {
    // Decided by where the error came from, not by its kind: only a write to stdout
    // whose reader went away (`atoll cat big | head`) ends quietly, as pipelines do. A
    // broken pipe on the agent's socket is a failure like any other.
    if crate::output::is_stdout_closed(e) {
        return ExitCode::SUCCESS;
    }
    let (code, kind) = classify(e);
    let causes: Vec<String> = e.chain().skip(1).map(ToString::to_string).collect();
    // The agent's message names no command; the CLI adds its own next step.
    let step = e
        .chain()
        .find_map(|cause| cause.downcast_ref::<ClientError>().and_then(ClientError::reason))
        .map(|reason| format!("; {}", crate::cmd::next_step(reason)))
        .unwrap_or_default();
    if json {
        print_json_error(kind, &format!("{e}{step}"), &causes, code);
    } else {
        let mut err = io::stderr().lock();
        // The chain may quote the guest (an agent's message, a console tail).
        let text = format!("{e:#}");
        let _ = writeln!(err, "atoll: {}{step}", crate::output::escape_controls_keep_lines(&text));
    }
    ExitCode::from(code)
}

fn print_json_error(kind: &str, message: &str, causes: &[String], exit_code: u8) {
    let doc = serde_json::json!({
        "error": { "kind": kind, "message": message, "causes": causes, "exit_code": exit_code }
    });
    let mut err = io::stderr().lock();
    let _ = serde_json::to_writer(&mut err, &doc);
    let _ = err.write_all(b"\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(e: anyhow::Error) -> ExitCode {
        report(&e, true)
    }

    #[test]
    fn only_a_closed_stdout_ends_quietly() {
        let closed = io::Error::new(io::ErrorKind::BrokenPipe, crate::output::StdoutClosed);
        assert_eq!(exit(anyhow::Error::new(closed).context("writing the result")), ExitCode::SUCCESS);
        // A broken pipe on the agent's socket is a failure, at whatever depth.
        let socket = io::Error::from(io::ErrorKind::BrokenPipe);
        assert_ne!(exit(anyhow::Error::new(socket).context("sending the request")), ExitCode::SUCCESS);
        let addr: atoll_proto::Address = "hvsock:///run/vm.sock:1024".parse().unwrap();
        let refused = ConnectError::Refused { addr, source: io::ErrorKind::BrokenPipe.into() };
        assert_eq!(exit(refused.into()), ExitCode::from(EXIT_UNREACHABLE));
    }
}
