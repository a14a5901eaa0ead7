//! Runs each group of figures and turns it into table rows, each next to its floor or
//! its peers. Progress goes to stderr; the table to stdout.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::runtime::Runtime;

use crate::mcp::{self, Measured, Op, ServerSpec};
use crate::peers::{self, PeerInstall, Workload};
use crate::report::Row;
use crate::stats::{Samples, fmt_bytes, fmt_dur, fmt_rate, rate_mib};
use crate::{Opts, agent::Agent, calls, floors, footprint, http, official, throughput, vm};

/// One table section: a title and its rows.
pub(crate) type Section = (String, Vec<Row>);

fn say(what: &str) {
    eprintln!("atoll-bench: {what}");
}

/// The machine the figures come from.
pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| s.lines().next().map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_string()))
        .and_then(|k| k.parse::<u64>().ok())
        .map(|k| fmt_bytes(k * 1024))
        .unwrap_or_default();
    format!("Machine: {cores} cores ({cpu}), {mem} RAM, Linux {}.", kernel.trim())
}

/// Every section, in table order.
pub(crate) fn all(opts: &Opts, scratch: &Path, rt: &Runtime) -> Result<Vec<Section>> {
    // The tmpfs the writes are also measured on; dropped (removed) at the end.
    let shm = tempfile::Builder::new().prefix("atoll-bench-").tempdir_in("/dev/shm").ok();
    if shm.is_none() {
        say("  no writable /dev/shm: the tmpfs write rows are left out");
    }
    let work = Workload::create(&scratch.join("work"), shm.as_ref().map(|d| d.path()))?;
    let mut out = Vec::new();
    let agent = Agent::start(&opts.agent_bin, scratch, "main")?;
    if opts.runs("agent") {
        say("agent call latency");
        out.push(agent_latency(opts, scratch, &agent, &work, rt)?);
    }
    if opts.runs("mcp") {
        say("MCP latency");
        out.extend(mcp_sections(opts, &agent, &work)?);
    }
    if opts.runs("http") {
        say("MCP over HTTP");
        out.push(http_section(opts, scratch, &agent)?);
    }
    if opts.runs("copy") {
        say("throughput");
        out.push(copies(opts, scratch, &agent)?);
    }
    if opts.runs("concurrency") {
        say("concurrency");
        out.push(concurrency(&agent, rt)?);
    }
    if opts.runs("footprint") {
        say("footprint");
        out.push(footprint_section(opts, scratch, &agent, rt)?);
    }
    if opts.runs("vm") && !opts.no_vm {
        say("real VM");
        out.push(vm_section(opts, scratch, rt));
    }
    Ok(out)
}

fn agent_latency(opts: &Opts, scratch: &Path, agent: &Agent, w: &Workload, rt: &Runtime) -> Result<Section> {
    let (warm, n) = (opts.iters() / 10 + 1, opts.iters());
    let client = rt.block_on(agent.client())?;
    let c = rt.block_on(calls::latency(&client, w, scratch, warm, n))?;
    Ok((
        "Agent calls, warm connection, Unix socket (typed client of atoll; each call alternates with its floors)"
            .into(),
        vec![
            Row::latency("Info (the smallest unary RPC)", &c.info.atoll, Some(("64 B Unix ping-pong", c.info.floor(0)))),
            Row::latency("Exec `true`", &c.exec_true.atoll, Some(("local spawn+wait of `true`", c.exec_true.floor(0)))),
            Row::latency("ReadFile 1 KiB", &c.read_1k.atoll, Some(("local open+read+close", c.read_1k.floor(0)))),
            Row::latency(
                "WriteFile 1 KiB (atomic)",
                &c.write_1k.atoll,
                Some(("local temp+write+rename", c.write_1k.floor(0))),
            ),
            Row::latency("  same, vs plain write", &c.write_1k.atoll, Some(("local open+write+close", c.write_1k.floor(1)))),
            Row::latency(
                "WriteFile 1 KiB, sync (durable)",
                &c.write_1k_sync.atoll,
                Some(("local temp+write+fsync+rename+dir fsync", c.write_1k_sync.floor(0))),
            ),
            Row::latency("ListDir 100 entries", &c.list_100.atoll, Some(("local readdir+lstat", c.list_100.floor(0)))),
        ],
    ))
}

fn mcp_sections(opts: &Opts, agent: &Agent, w: &Workload) -> Result<Vec<Section>> {
    let logs = w.root.parent().unwrap_or(&w.root).join("mcp-logs");
    std::fs::create_dir_all(&logs)?;
    let (n, warm) = (opts.mcp_iters(), opts.mcp_iters() / 10 + 1);
    let cold_runs = if opts.quick { 5 } else { 15 };
    let mut servers = vec![peers::atoll(&opts.atoll_bin, &agent.address(), w)];
    let mut notes = Vec::new();
    if !opts.no_peers {
        let install = PeerInstall {
            npm_bin: opts.peers_dir.join("peers/node_modules/.bin"),
            shell_venv: opts.peers_dir.join("venv-shell"),
            home: opts.peers_dir.join("home"),
        };
        std::fs::create_dir_all(&install.home)?;
        let (found, missing) = peers::peers(&install, w);
        let known: Vec<&str> = found
            .iter()
            .map(|s| s.name.as_str())
            .chain(missing.iter().filter_map(|m| m.split(':').next()))
            .collect();
        if let Some(unknown) = opts.peer.iter().find(|p| !known.contains(&p.as_str())) {
            anyhow::bail!("--peer {unknown}: no such peer; the peers are {}", known.join(", "));
        }
        servers.extend(found.into_iter().filter(|s| opts.peer.is_empty() || opts.peer.contains(&s.name)));
        notes = missing;
    }
    let mut bare = Vec::new();
    for s in &servers {
        say(&format!("  bare client: {}", s.name));
        bare.push((s.name.clone(), mcp::measure(s, &logs, cold_runs, warm, n).map_err(|e| format!("{e:#}"))));
    }
    let mut out = vec![mcp_section("MCP, bare newline-JSON-RPC client (Rust)", &servers, &bare, &notes)];
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = |venv: &str, title| official::OfficialClient {
        title,
        program: opts.peers_dir.join(venv).join("bin/python"),
        script: here.join("mcp_official.py"),
    };
    let mut clients = Vec::new();
    if !opts.no_python {
        clients.push(python("venv-client", "MCP, official Python SDK client (mcp 2.3.0)"));
        clients.push(python("venv-client1", "MCP, official Python SDK 1.x client (mcp 1.30.0)"));
    }
    if !opts.no_typescript {
        clients.push(official::OfficialClient {
            title: "MCP, official TypeScript SDK client (@modelcontextprotocol/sdk 1.32.2, Node.js)",
            program: "node".into(),
            script: here.join("ts/mcp_official.mjs"),
        });
    }
    for client in &clients {
        say(&format!("  {}", client.title));
        let figures = official::measure(client, &servers, cold_runs, warm, n).context(client.title)?;
        out.push(mcp_section(client.title, &servers, &figures, &notes));
    }
    Ok(out)
}

/// `atoll mcp --http` next to stdio, with the official Python and TypeScript clients.
fn http_section(opts: &Opts, scratch: &Path, agent: &Agent) -> Result<Section> {
    let server = http::HttpServer::start(&opts.atoll_bin, &agent.address(), &scratch.join("mcp-http.log"))?;
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut drivers = Vec::new();
    if !opts.no_python {
        drivers.push(http::Driver {
            name: "Python SDK (mcp 2.3.0)",
            program: opts.peers_dir.join("venv-client/bin/python"),
            script: here.join("mcp_http.py"),
        });
    }
    if !opts.no_typescript {
        drivers.push(http::Driver {
            name: "TypeScript SDK (1.32.2)",
            program: "node".into(),
            script: here.join("ts/mcp_http.mjs"),
        });
    }
    let counts = (opts.mcp_iters() / 10 + 1, opts.mcp_iters(), if opts.quick { 10 } else { 20 });
    let mut rows = Vec::new();
    for driver in &drivers {
        say(&format!("  {}", driver.name));
        rows.extend(
            http::rows(driver, &server, &opts.atoll_bin, &agent.address(), counts).context(driver.name)?,
        );
    }
    Ok(("MCP over Streamable HTTP (`atoll mcp --http`), the same call over stdio beside it".to_owned(), rows))
}

/// Rows: per operation, `atoll mcp` then each peer with peer/atoll ratios.
fn mcp_section(
    title: &str,
    servers: &[ServerSpec],
    res: &[(String, Result<Measured, String>)],
    notes: &[String],
) -> Section {
    let atoll = res.first().and_then(|(_, r)| r.as_ref().ok());
    let mut rows = Vec::new();
    let peer_row = |figure: String, s: &Samples, base: Option<&Samples>| {
        let mut r = Row::latency(figure, s, None);
        if let Some(b) = base {
            r.against = format!("atoll mcp {}", fmt_dur(b.p50()));
            r.ratio = format!("peer/atoll {:.2}x", s.p50().as_secs_f64() / b.p50().as_secs_f64().max(1e-9));
        }
        r
    };
    // Cold start first.
    for (i, (name, r)) in res.iter().enumerate() {
        match r {
            Ok(m) => rows.push(peer_row(
                format!("cold: spawn+initialize+tools/list, {name}"),
                &m.cold,
                if i == 0 { None } else { atoll.map(|m| &m.cold) },
            )),
            Err(e) => rows.push(Row::missing(name.clone(), e.clone())),
        }
    }
    for op in Op::ALL {
        for (i, (name, r)) in res.iter().enumerate() {
            let Ok(m) = r else { continue };
            let Some((_, s)) = m.calls.iter().find(|(o, _)| *o == op) else { continue };
            let base = if i == 0 {
                None
            } else {
                atoll.and_then(|m| m.calls.iter().find(|(o, _)| *o == op)).map(|(_, s)| s)
            };
            let tool = servers
                .iter()
                .find(|x| &x.name == name)
                .and_then(|x| x.calls.iter().find(|c| c.op == op))
                .map(|c| c.tool.as_str())
                .unwrap_or("");
            rows.push(peer_row(format!("{}: {name} `{tool}`", op.label()), s, base));
        }
    }
    for n in notes {
        rows.push(Row::missing("peer", n.clone()));
    }
    (title.to_string(), rows)
}

fn copies(opts: &Opts, scratch: &Path, agent: &Agent) -> Result<Section> {
    let dir = scratch.join("copies");
    std::fs::create_dir_all(&dir)?;
    let runs = 3;
    let t = throughput::measure(
        &opts.atoll_bin,
        &agent.address(),
        &dir,
        opts.file_size(),
        opts.tree_size(),
        runs,
    )?;
    let raw = rate_mib(t.file_bytes, t.raw);
    let row = |figure: String, bytes: u64, d: Duration| {
        Row::plain(
            figure,
            fmt_rate(bytes, d),
            format!("raw Unix-socket copy {raw:.0} MiB/s"),
            format!("{:.0}% of raw", 100.0 * rate_mib(bytes, d) / raw),
        )
    };
    let size = fmt_bytes(t.file_bytes);
    Ok((
        format!(
            "Throughput, Unix socket (best of {runs}; `atoll cp --sync` and the raw copy both fsync; same disk)"
        ),
        vec![
            row(format!("`atoll cp --sync` {size} file, host to guest"), t.file_bytes, t.upload),
            row(format!("`atoll cp --sync` {size} file, guest to host"), t.file_bytes, t.download),
            row(
                format!(
                    "`atoll download` {} tree ({} files, random bytes)",
                    fmt_bytes(t.tree_bytes),
                    t.tree_files
                ),
                t.tree_bytes,
                t.tree,
            ),
        ],
    ))
}

fn concurrency(agent: &Agent, rt: &Runtime) -> Result<Section> {
    let client = rt.block_on(agent.client())?;
    let (parallel, total) = (64, 640);
    let rate = rt.block_on(calls::concurrent_execs(&client, parallel, total))?;
    let local = floors::spawn_rate(parallel, total / parallel)?;
    Ok((
        "Concurrency".into(),
        vec![Row::plain(
            format!("{parallel} concurrent Exec `true` ({total} calls, one connection)"),
            format!("{rate:.0} calls/s"),
            format!("local spawn+wait, {parallel} threads: {local:.0}/s"),
            format!("{:.0}% of local", 100.0 * rate / local),
        )],
    ))
}

fn footprint_section(opts: &Opts, scratch: &Path, agent: &Agent, rt: &Runtime) -> Result<Section> {
    let size = std::fs::metadata(&opts.agent_bin)?.len();
    let warm = agent.memory()?;
    std::thread::sleep(footprint::SETTLED);
    let settled = agent.memory()?;
    let startup = footprint::startup(&opts.agent_bin, scratch, if opts.quick { 5 } else { 20 })?;
    // A quarter of the flood first, in its own fresh agent: flat means the full flood
    // peaks no higher than a quarter of it does.
    let q = rt.block_on(footprint::flood(&opts.agent_bin, scratch, opts.flood_size() / 4))?;
    let f = rt.block_on(footprint::flood(&opts.agent_bin, scratch, opts.flood_size()))?;
    let grew = f.after.hwm.saturating_sub(f.idle.hwm);
    let q_grew = q.after.hwm.saturating_sub(q.idle.hwm);
    Ok((
        "Agent footprint (static musl release binary)".into(),
        vec![
            Row::plain("stripped binary size", fmt_bytes(size), "target: under 5 MiB", ""),
            Row::plain("idle RSS, just started", fmt_bytes(f.idle.rss), "target: under 8 MiB", ""),
            Row::plain(
                "RSS after all the benches above (warm)",
                fmt_bytes(warm.rss),
                format!("peak so far {}", fmt_bytes(warm.hwm)),
                "",
            ),
            Row::plain(
                format!("same, {} s later (idle)", footprint::SETTLED.as_secs()),
                fmt_bytes(settled.rss),
                "",
                "",
            ),
            Row::plain(
                format!("peak RSS (VmHWM) while a command prints {} through ExecStream", fmt_bytes(f.bytes)),
                fmt_bytes(f.after.hwm),
                format!(
                    "peak before: {}; a {} flood: {} (grew {})",
                    fmt_bytes(f.idle.hwm),
                    fmt_bytes(q.bytes),
                    fmt_bytes(q.after.hwm),
                    fmt_bytes(q_grew)
                ),
                format!("grew {} at {}", fmt_bytes(grew), fmt_rate(f.bytes, f.took)),
            ),
            Row::plain(
                format!("RSS {} s after the flood (idle)", footprint::SETTLED.as_secs()),
                fmt_bytes(f.settled.rss),
                format!("right after: {}", fmt_bytes(f.after.rss)),
                "",
            ),
            Row::latency("exec of the agent to its socket accepting", &startup, None),
        ],
    ))
}

fn vm_section(opts: &Opts, scratch: &Path, rt: &Runtime) -> Section {
    let title = "Inside a real VM (minimal template, agent link over virtio-serial)".to_string();
    let (boots, execs, bytes, copy_runs) =
        if opts.quick { (3, 20, 16 << 20, 2) } else { (15, 100, 64 << 20, 6) };
    let run = vm::VmRun {
        atoll_bin: &opts.atoll_bin,
        floor_bin: &opts.link_floor_bin,
        scratch,
        boots,
        execs,
        copy_bytes: bytes,
        copy_runs,
    };
    let f = match vm::measure(&run, rt) {
        Ok(f) => f,
        Err(e) => return (title, vec![Row::missing("VM figures", format!("{e:#}"))]),
    };
    let accel = &f.accel;
    let boot = Row::latency(
        format!("`atoll create --net none` to READY, cold boot ({accel}, {boots} boots, alternated)"),
        &f.create,
        Some((
            "bare boot: same QEMU line, kernel, initramfs, /init and modules; init only announces READY on the port",
            &f.bare,
        )),
    );
    let exec = Row::latency(
        format!("Exec `true` over the agent link ({accel})"),
        &f.exec,
        Some(("raw virtio-serial echo, 64 B, bare VM", &f.echo)),
    );
    let spawn = Row::latency(
        "  same, vs spawn+wait of `true` inside the guest",
        &f.exec,
        Some(("spawn+wait in the VM, no RPC", &f.spawn)),
    );
    let size = fmt_bytes(f.copy_bytes);
    let c = &f.copies;
    let row = |figure: String, atoll: Duration, raw: Duration| {
        Row::plain(
            figure,
            fmt_rate(f.copy_bytes, atoll),
            format!("raw virtio-serial stream, bare VM: {}", fmt_rate(f.copy_bytes, raw)),
            format!("{:.0}% of raw", 100.0 * rate_mib(f.copy_bytes, atoll) / rate_mib(f.copy_bytes, raw)),
        )
    };
    let rows = vec![
        boot,
        exec,
        spawn,
        row(
            format!("`atoll cp --sync` {size} host to guest tmpfs (best of {copy_runs})"),
            c.upload,
            c.raw_upload,
        ),
        row(
            format!("`atoll cp --sync` {size} guest tmpfs to host (best of {copy_runs})"),
            c.download,
            c.raw_download,
        ),
    ];
    (title, rows)
}
