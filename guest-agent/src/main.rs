//! `atoll-agent`: serves the atoll agent API. Run it as PID 1 of a microVM, or as a service.

use std::path::PathBuf;
use std::process::ExitCode;

use atoll_agent::report::error_chain;
use atoll_agent::{AgentService, announce, cmdline, init, listen};
use atoll_proto::Address;
use clap::Parser;

/// See [`atoll_agent::allocator`].
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Where background jobs keep their log files unless `--job-dir` says otherwise.
const DEFAULT_JOB_DIR: &str = "/run/atoll-agent/jobs";

/// The environment variable holding the log filter.
const LOG_ENV: &str = "ATOLL_AGENT_LOG";

/// What `--help` prints after the options.
const AFTER_HELP: &str = "\
Addresses: vsock://CID:PORT (CID -1 = any), unix:///PATH, tcp://HOST:PORT.
The kernel command line may also set atoll.listen=ADDR and atoll.announce=ADDR.
Logs go to stderr; ATOLL_AGENT_LOG sets their level, per target if wanted
(debug, warn,atoll_agent=trace); default info.";

/// The atoll guest agent: run commands and manage files inside a microVM over gRPC.
#[derive(Parser, Debug, PartialEq)]
#[command(version, about, long_about = None, after_help = AFTER_HELP)]
struct Args {
    /// Address to listen on (repeatable). Default: vsock://-1:1024. In a VM with the
    /// agent link's port (as atoll starts them: no vsock device), a vsock address that
    /// cannot be bound is left out with a log line.
    #[arg(long = "listen", value_name = "ADDR", env = "ATOLL_AGENT_LISTEN", value_delimiter = ',')]
    listen: Vec<Address>,

    /// Once listening, connect here and write `READY <version>` (the host's vsock
    /// listener, e.g. vsock://2:1025). Default as PID 1: vsock://2:1025; as a service: none.
    #[arg(long, value_name = "ADDR", env = "ATOLL_AGENT_ANNOUNCE")]
    announce: Option<Address>,

    /// Do not announce readiness, even as PID 1.
    #[arg(long, conflicts_with = "announce")]
    no_announce: bool,

    /// Where background jobs keep their log files.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_JOB_DIR, env = "ATOLL_AGENT_JOB_DIR")]
    job_dir: PathBuf,

    /// File holding the token TCP clients must present (`authorization: Bearer ...`);
    /// required to listen on a non-loopback TCP address. Default: $ATOLL_AGENT_TOKEN.
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,

    /// Most Exec/ExecStream commands running at once; more are refused (ResourceExhausted).
    #[arg(long, value_name = "N", default_value_t = atoll_agent::service::limits::DEFAULT_MAX_EXECS, env = "ATOLL_AGENT_MAX_EXECS", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_concurrent_execs: usize,

    /// Most file transfers (read, write, download, upload) at once; more are refused.
    #[arg(long, value_name = "N", default_value_t = atoll_agent::service::limits::DEFAULT_MAX_TRANSFERS, env = "ATOLL_AGENT_MAX_TRANSFERS", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_concurrent_transfers: usize,

    /// Serve the agent link on this character device (a stand-in for the port, for
    /// tests). Default: the virtio-serial port named atoll.agent, if the VM has one.
    #[arg(long, value_name = "PATH", env = "ATOLL_AGENT_LINK_DEVICE")]
    link_device: Option<PathBuf>,
}

impl Args {
    /// The arguments, parsed by clap unless there is nothing to parse: the kernel starts
    /// the agent as PID 1 with no arguments, and under software emulation clap's first
    /// run costs 10-20 ms of the VM's boot. `ATOLL_AGENT_*` variables (which the kernel
    /// passes on from its command line) go through clap like arguments do.
    fn from_env() -> Args {
        let no_args = std::env::args_os().len() <= 1;
        let no_env = !std::env::vars_os().any(|(k, _)| k.as_encoded_bytes().starts_with(b"ATOLL_AGENT_"));
        if no_args && no_env { Args::defaults() } else { Args::parse() }
    }

    /// What clap yields for no arguments and no `ATOLL_AGENT_*` variables (a test checks).
    fn defaults() -> Args {
        Args {
            listen: Vec::new(),
            announce: None,
            no_announce: false,
            job_dir: PathBuf::from(DEFAULT_JOB_DIR),
            token_file: None,
            max_concurrent_execs: atoll_agent::service::limits::DEFAULT_MAX_EXECS,
            max_concurrent_transfers: atoll_agent::service::limits::DEFAULT_MAX_TRANSFERS,
            link_device: None,
        }
    }
}

/// Logs to stderr at the level `ATOLL_AGENT_LOG` gives (`info` without it).
///
/// A `Targets` filter (`LEVEL`, `TARGET=LEVEL`, comma-separated) rather than an
/// `EnvFilter`: building the latter compiles regexes, about 10 ms of a VM's boot under
/// software emulation, for span and field filters the agent's logs do not need.
fn init_logging() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let default = || Targets::new().with_default(LevelFilter::INFO);
    let filter = match std::env::var(LOG_ENV) {
        Ok(spec) if !spec.trim().is_empty() => spec.parse().unwrap_or_else(|e| {
            eprintln!("atoll-agent: ignoring {LOG_ENV}={spec} ({e}); logging at info");
            default()
        }),
        _ => default(),
    };
    // A bare fmt layer: `fmt()`'s own builder would cap everything at info first.
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    tracing_subscriber::registry().with(logs).with(filter).init();
}

fn main() -> ExitCode {
    atoll_agent::exec::spawn::keep_inherited_fds_from_commands();
    // One worker thread, whatever the VM's vCPU count: the agent's async work is moving
    // bytes between sockets, pipes and files, while commands run in their own processes
    // and slow disk work in the blocking pool. With a worker per vCPU, a stream's buffers
    // were allocated on one worker and freed on another, where the allocator could not
    // reuse them at once: a 1 GiB output flood grew the agent by 25 MiB instead of 7
    // (BENCHMARKS.md), with no call measurably faster.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .on_thread_park(atoll_agent::allocator::on_worker_park)
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => {
            eprintln!("atoll-agent: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> ExitCode {
    init_logging();
    let mut args = Args::from_env();
    let pid1 = init::is_pid1();
    atoll_agent::exec::start_reaper();
    if pid1 {
        if let Err(e) = init::become_init() {
            eprintln!("atoll-agent: init: {}", error_chain(&e));
        }
        match init::power_off_on_sigterm() {
            Ok(task) => drop(tokio::spawn(task)),
            Err(e) => eprintln!("atoll-agent: init: {}", error_chain(&e)),
        }
    }
    let cmdline = cmdline::KernelCmdline::read();
    if let Some(spec) = cmdline.net() {
        // Before listening: once the host hears READY, commands may use the network.
        match atoll_agent::net::configure(&spec) {
            Ok(iface) => tracing::debug!("{iface}: {}/{} via {}", spec.addr, spec.prefix, spec.gateway),
            Err(e) => eprintln!("atoll-agent: network: {}", error_chain(&e)),
        }
    }
    // Before listening too: a sandbox whose folders or disk are not as asked must not
    // announce itself. As PID 1, exiting ends the VM and `atoll create` shows this line.
    if let Err(e) = setup_storage(&cmdline) {
        eprintln!("atoll-agent: storage: {}", error_chain(&e));
        return ExitCode::FAILURE;
    }
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
            cid: atoll_proto::address::VSOCK_CID_HOST,
            port: atoll_proto::limits::DEFAULT_READY_PORT,
        }),
        (false, None) => None,
    };

    let token = match atoll_agent::auth::Token::load(args.token_file.as_deref()) {
        Ok(token) => token,
        Err(e) => {
            eprintln!("atoll-agent: {}", error_chain(&e));
            return ExitCode::FAILURE;
        }
    };
    // The link's port first: with it, a vsock address that cannot be bound (a VM that
    // atoll starts has no vsock device) is left out instead of stopping the agent.
    let port = match args.link_device.take() {
        Some(path) => Some(listen::link::PortSource::Device(path)),
        None if listen::port::virtio_ports_exist() => {
            Some(listen::link::PortSource::Named(atoll_proto::link::PORT_NAME))
        }
        None => None,
    };
    let listeners = match listen::bind_listeners(&args.listen, port.is_some()).await {
        Ok(listeners) => listeners,
        Err(e) => {
            eprintln!("atoll-agent: {}", error_chain(&e));
            return ExitCode::FAILURE;
        }
    };
    for l in &listeners {
        if let Err(e) = l.check_token(token.as_ref()) {
            eprintln!("atoll-agent: {}", error_chain(&e));
            return ExitCode::FAILURE;
        }
    }
    if let Some(addr) = announce {
        tokio::spawn(async move {
            match announce::announce_ready(&addr).await {
                Ok(()) => {}
                // No vsock device (the agent serves only the link): nobody listens for it.
                Err(e) if e.no_vsock() => tracing::info!("{}; not announced", error_chain(&e)),
                Err(e) => tracing::warn!("{}", error_chain(&e)),
            }
        });
    }
    let capacity = atoll_agent::service::Capacity {
        max_execs: args.max_concurrent_execs,
        max_transfers: args.max_concurrent_transfers,
    };
    tokio::spawn(atoll_agent::allocator::trim_when_idle());
    let svc = AgentService::with_capacity(args.job_dir, capacity);
    match listen::serve_listeners(listeners, port, svc, token).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("atoll-agent: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The host folders and the disk size the kernel command line asks for.
fn setup_storage(cmdline: &cmdline::KernelCmdline) -> Result<(), atoll_agent::storage::StorageError> {
    if let Some(bytes) = cmdline.disk() {
        atoll_agent::storage::size_root(bytes)?;
    }
    atoll_agent::storage::mount_shares(cmdline.mounts())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn defaults_are_what_clap_gives_without_arguments() {
        // Only meaningful when the test's own environment sets none of clap's variables.
        let set: Vec<_> = Args::command()
            .get_arguments()
            .filter_map(|a| a.get_env().map(|e| e.to_owned()))
            .filter(|e| std::env::var_os(e).is_some())
            .collect();
        assert!(set.is_empty(), "unset {set:?} to run this test");
        assert_eq!(Args::try_parse_from(["atoll-agent"]).unwrap(), Args::defaults());
    }

    #[test]
    fn log_filters_parse_as_documented() {
        for spec in ["debug", "warn,atoll_agent=trace", "h2=off,info"] {
            assert!(spec.parse::<tracing_subscriber::filter::Targets>().is_ok(), "{spec}");
        }
    }
}
