//! `sbx-agent`: serves the sbx agent API. Run it as PID 1 of a microVM, or as a service.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use sbx_agent::report::error_chain;
use sbx_agent::{AgentService, init, listen};
use sbx_proto::Address;

/// The sbx guest agent: run commands and manage files inside a microVM over gRPC.
///
/// Addresses: vsock://CID:PORT (CID -1 = any), unix:///PATH, tcp://HOST:PORT.
/// The kernel command line may also set `sbx.listen=ADDR` and `sbx.announce=ADDR`.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Args {
    /// Address to listen on (repeatable). Default: vsock://-1:1024.
    #[arg(long = "listen", value_name = "ADDR", env = "SBX_AGENT_LISTEN", value_delimiter = ',')]
    listen: Vec<Address>,

    /// Once listening, connect here and write `READY <version>` (the host's vsock
    /// listener, e.g. vsock://2:1025). Default as PID 1: vsock://2:1025; as a service: none.
    #[arg(long, value_name = "ADDR", env = "SBX_AGENT_ANNOUNCE")]
    announce: Option<Address>,

    /// Do not announce readiness, even as PID 1.
    #[arg(long, conflicts_with = "announce")]
    no_announce: bool,

    /// Where background jobs keep their log files.
    #[arg(long, value_name = "DIR", default_value = "/run/sbx-agent/jobs", env = "SBX_AGENT_JOB_DIR")]
    job_dir: PathBuf,

    /// File holding the token TCP clients must present (`authorization: Bearer ...`);
    /// required to listen on a non-loopback TCP address. Default: $SBX_AGENT_TOKEN.
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,

    /// Most Exec/ExecStream commands running at once; more are refused (ResourceExhausted).
    #[arg(long, value_name = "N", default_value_t = sbx_agent::service::limits::DEFAULT_MAX_EXECS, env = "SBX_AGENT_MAX_EXECS", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_concurrent_execs: usize,

    /// Most file transfers (read, write, download, upload) at once; more are refused.
    #[arg(long, value_name = "N", default_value_t = sbx_agent::service::limits::DEFAULT_MAX_TRANSFERS, env = "SBX_AGENT_MAX_TRANSFERS", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_concurrent_transfers: usize,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SBX_AGENT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut args = Args::parse();
    let pid1 = init::is_pid1();
    sbx_agent::exec::start_reaper();
    if pid1 {
        if let Err(e) = init::become_init() {
            eprintln!("sbx-agent: init: {}", error_chain(&e));
        }
        match init::power_off_on_sigterm() {
            Ok(task) => drop(tokio::spawn(task)),
            Err(e) => eprintln!("sbx-agent: init: {}", error_chain(&e)),
        }
    }
    let cmdline = init::KernelCmdline::read();
    if args.listen.is_empty() {
        args.listen = cmdline.listen().into_iter().collect();
    }
    if args.listen.is_empty() {
        args.listen.push(Address::default_listen());
    }
    let announce = match (args.no_announce, args.announce.take().or_else(|| cmdline.announce())) {
        (true, _) => None,
        (false, Some(a)) => Some(a),
        (false, None) if pid1 => Some(Address::Vsock {
            cid: sbx_proto::address::VSOCK_CID_HOST,
            port: sbx_proto::limits::DEFAULT_READY_PORT,
        }),
        (false, None) => None,
    };

    let token = match sbx_agent::auth::Token::load(args.token_file.as_deref()) {
        Ok(token) => token,
        Err(e) => {
            eprintln!("sbx-agent: {}", error_chain(&e));
            return ExitCode::FAILURE;
        }
    };
    let mut listeners = Vec::new();
    for addr in &args.listen {
        match listen::Listener::bind(addr).await {
            Ok(l) => match l.check_token(token.as_ref()) {
                Ok(()) => listeners.push(l),
                Err(e) => {
                    eprintln!("sbx-agent: {}", error_chain(&e));
                    return ExitCode::FAILURE;
                }
            },
            Err(e) => {
                eprintln!("sbx-agent: {}", error_chain(&e));
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(addr) = announce {
        tokio::spawn(async move {
            if let Err(e) = init::announce_ready(&addr).await {
                tracing::warn!("could not announce readiness: {}", error_chain(&e));
            }
        });
    }
    let capacity = sbx_agent::service::Capacity {
        max_execs: args.max_concurrent_execs,
        max_transfers: args.max_concurrent_transfers,
    };
    let svc = AgentService::with_capacity(args.job_dir, capacity);
    match listen::serve_listeners(listeners, svc, token).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sbx-agent: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}
