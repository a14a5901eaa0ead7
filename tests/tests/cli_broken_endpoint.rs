//! `atoll` never exits 0 when the agent's socket breaks: every subcommand, against a
//! hybrid-vsock endpoint that misbehaves at each step (accepts and closes, closes
//! after `OK`, answers garbage instead of `OK`, cuts the connection mid-call), many
//! tries each, every try ending within its `--connect-timeout` plus 2 s. A closed
//! stdout (`atoll cat big | head -c 1`) still ends quietly.
//!
//! These tries once ran with `--connect-timeout 20s` and no bound of their own, and the
//! whole test ran past nextest's 300 s on a fresh machine: a try that waited was only
//! ever seen as the test's timeout. A try's first call was then bounded by nothing at
//! all (only dialing and the HTTP/2 handshake were); now reaching the agent, its first
//! answer included, is bounded by the timeout, and a try that waits past it fails here
//! at once, naming itself.

mod cli_util;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use atoll_tests::Agent;
use cli_util::{atoll_cmd, code, s, stderr};

/// Tries per subcommand and endpoint behaviour: each fault is met at a random point of
/// the exchange (where the cut falls, whether the close beats the client's next write),
/// so more tries meet more of them.
const TRIES: usize = 30;

/// How much longer than its `--connect-timeout` a try may run before it counts as
/// waiting on.
const MARGIN: Duration = Duration::from_secs(2);

impl Fault {
    /// Each try's `--connect-timeout`. An endpoint that serves nothing is given 2 s; one
    /// that splices to a real agent does real calls, 21 commands at once on a busy
    /// machine, and its agent must not be taken for a silent one: 20 s.
    fn timeout(self) -> Duration {
        match self {
            Fault::CutMidCall => Duration::from_secs(20),
            _ => Duration::from_secs(2),
        }
    }
}

/// How the endpoint treats each connection.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Accept and close at once, reading nothing (a VMM whose guest is not up yet).
    AcceptClose,
    /// Read `CONNECT`, answer `OK`, then close.
    CloseAfterOk,
    /// Read `CONNECT`, answer something that is not `OK`.
    Garbage,
    /// Answer `OK`, splice to a real agent, and cut the connection at a point before
    /// the agent's answer to the call is complete.
    CutMidCall,
}

/// A hybrid-vsock endpoint with a fault; serves until the test ends.
struct Endpoint {
    path: PathBuf,
    /// Connections cut mid-call so far.
    cuts: Arc<AtomicUsize>,
    _dir: tempfile::TempDir,
}

impl Endpoint {
    fn start(fault: Fault, agent: &Path, seed: u64) -> Endpoint {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vm.vsock");
        let listener = UnixListener::bind(&path).unwrap();
        let cuts = Arc::new(AtomicUsize::new(0));
        let (agent, counter) = (agent.to_path_buf(), cuts.clone());
        std::thread::spawn(move || {
            let state = AtomicU64::new(seed);
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                if matches!(fault, Fault::AcceptClose) {
                    // In the accept loop itself, as fast as a VMM does it: the client's
                    // CONNECT then often meets a socket already closed (EPIPE).
                    drop(conn);
                    continue;
                }
                let (agent, counter) = (agent.clone(), counter.clone());
                let cut = next_random(&state);
                std::thread::spawn(move || serve(conn, fault, &agent, cut, &counter));
            }
        });
        Endpoint { path, cuts, _dir: dir }
    }

    fn addr(&self) -> String {
        format!("hvsock://{}:1024", self.path.display())
    }
}

/// A splitmix64 step: reproducible cut points without a random-number crate.
fn next_random(state: &AtomicU64) -> u64 {
    let mut z = state.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn read_line(conn: &mut UnixStream) {
    let mut byte = [0u8; 1];
    while conn.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {}
}

/// Serves one connection, counting it in `cuts` (before the client can see the cut)
/// when it was cut mid-call.
fn serve(mut conn: UnixStream, fault: Fault, agent: &Path, cut: u64, cuts: &AtomicUsize) {
    match fault {
        Fault::AcceptClose => drop(conn),
        Fault::CloseAfterOk => {
            read_line(&mut conn);
            let _ = conn.write_all(b"OK 1073741824\n");
        }
        Fault::Garbage => {
            read_line(&mut conn);
            let _ = conn.write_all(b"\x16\x03\x01garbage\n");
        }
        Fault::CutMidCall => {
            read_line(&mut conn);
            let upstream = UnixStream::connect(agent).unwrap();
            let _ = conn.write_all(b"OK 1073741824\n");
            let (mut c_in, mut u_out) = (conn.try_clone().unwrap(), upstream.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c_in, &mut u_out);
            });
            if forward_until_cut(upstream, &conn, cut) {
                cuts.fetch_add(1, Ordering::SeqCst);
            }
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Copies the agent's HTTP/2 frames to the client, call by call: the frames of a call
/// are held until the agent ends it (END_STREAM or RST_STREAM on a stream). The first
/// `cut % 3` calls pass whole; in the next, the connection is cut at a random byte
/// before its last DATA frame is complete, so its final message (a unary answer, an
/// exit status, a zip's summary) never arrives. True when it cut.
fn forward_until_cut(mut upstream: UnixStream, mut client: &UnixStream, cut: u64) -> bool {
    const DATA: u8 = 0x0;
    const HEADERS: u8 = 0x1;
    const RST_STREAM: u8 = 0x3;
    const END_STREAM: u8 = 0x1;
    let mut calls_to_pass = cut % 3;
    let mut held: Vec<u8> = Vec::new();
    let mut last_data_end = None;
    let mut ended = std::collections::HashSet::new();
    loop {
        let mut header = [0u8; 9];
        if upstream.read_exact(&mut header).is_err() {
            let _ = client.write_all(&held);
            return false;
        }
        let len = usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let (kind, flags) = (header[3], header[4]);
        let stream = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
        held.extend_from_slice(&header);
        let body = held.len();
        held.resize(body + len, 0);
        if upstream.read_exact(&mut held[body..]).is_err() {
            return false;
        }
        if kind == DATA && stream != 0 && len > 0 {
            last_data_end = Some(held.len());
        }
        // A call ends once: the RST_STREAM that may follow its trailers is not another.
        let ends_call = stream != 0
            && (kind == RST_STREAM || (matches!(kind, HEADERS | DATA) && flags & END_STREAM != 0))
            && ended.insert(stream);
        if !ends_call {
            continue;
        }
        if calls_to_pass > 0 {
            calls_to_pass -= 1;
            if client.write_all(&held).is_err() {
                return false;
            }
            held.clear();
            last_data_end = None;
            continue;
        }
        let limit = last_data_end.unwrap_or(held.len()) - 1;
        let at = usize::try_from((cut >> 8) % u64::try_from(limit + 1).unwrap()).unwrap();
        let _ = client.write_all(&held[..at]);
        return true;
    }
}

/// Given the host scratch dir and the try's number: the arguments of one try (after
/// preparing what it needs).
type Args = Box<dyn Fn(&Path, usize) -> Vec<String> + Send + Sync>;

/// Given the host scratch dir and the try's number: a path a failed try must not leave.
type Leftover = Box<dyn Fn(&Path, usize) -> PathBuf + Send + Sync>;

/// One subcommand to try, with what it needs prepared before each try.
struct Case {
    name: &'static str,
    args: Args,
    stdin: &'static [u8],
    /// A host path that must not exist after a failed try (a download's target).
    leaves_nothing_at: Option<Leftover>,
}

fn case(name: &'static str, args: impl Fn(&Path, usize) -> Vec<String> + Send + Sync + 'static) -> Case {
    Case { name, args: Box::new(args), stdin: b"", leaves_nothing_at: None }
}

fn strings(parts: &[&str]) -> Vec<String> {
    parts.iter().map(ToString::to_string).collect()
}

/// Every subcommand that talks to an agent. `w` is a scratch directory the agent
/// (running on this host) and the host side share; `i` the try's number.
fn cases(w: &Path) -> Vec<Case> {
    let d = w.display().to_string();
    std::fs::create_dir_all(w.join("tree/sub")).unwrap();
    std::fs::write(w.join("file.txt"), b"some bytes\n").unwrap();
    std::fs::write(w.join("tree/sub/a.txt"), b"a\n").unwrap();
    let mut write = case("write", {
        let d = d.clone();
        move |_, i| strings(&["write", &format!("{d}/w{i}")])
    });
    write.stdin = b"data\n";
    let mut exec_stdin = case("exec with stdin", |_, _| strings(&["exec", "--", "cat"]));
    exec_stdin.stdin = b"through stdin\n";
    let mut cp_down = case("cp guest to host", {
        let d = d.clone();
        move |h, i| strings(&["cp", &format!(":{d}/file.txt"), &format!("{}/down{i}", h.display())])
    });
    cp_down.leaves_nothing_at = Some(Box::new(|h, i| h.join(format!("down{i}"))));
    let mut cp_dir_down = case("cp a guest dir to host", {
        let d = d.clone();
        move |h, i| strings(&["cp", &format!(":{d}/tree"), &format!("{}/dirdown{i}", h.display())])
    });
    cp_dir_down.leaves_nothing_at = Some(Box::new(|h, i| h.join(format!("dirdown{i}"))));
    let mut download = case("download", {
        let d = d.clone();
        move |h, i| strings(&["download", &format!("{d}/tree"), "-o", &format!("{}/zip{i}.zip", h.display())])
    });
    download.leaves_nothing_at = Some(Box::new(|h, i| h.join(format!("zip{i}.zip"))));
    vec![
        case("info", |_, _| strings(&["info"])),
        case("--json info", |_, _| strings(&["--json", "info"])),
        case("exec", |_, _| strings(&["exec", "--", "echo", "hi"])),
        exec_stdin,
        case("exec --capture", |_, _| strings(&["exec", "--capture", "--", "echo", "hi"])),
        case("--json exec --capture", |_, _| strings(&["--json", "exec", "--capture", "--", "echo", "hi"])),
        write,
        case("cat", {
            let d = d.clone();
            move |_, _| strings(&["cat", &format!("{d}/file.txt")])
        }),
        case("--json cat", {
            let d = d.clone();
            move |_, _| strings(&["--json", "cat", &format!("{d}/file.txt")])
        }),
        case("ls", {
            let d = d.clone();
            move |_, _| strings(&["ls", &d])
        }),
        case("stat", {
            let d = d.clone();
            move |_, _| strings(&["stat", &format!("{d}/file.txt")])
        }),
        case("mkdir", {
            let d = d.clone();
            move |_, i| strings(&["mkdir", "-p", &format!("{d}/m{i}")])
        }),
        case("rm", {
            let d = d.clone();
            move |_, i| {
                std::fs::write(format!("{d}/rm{i}"), b"x").unwrap();
                strings(&["rm", &format!("{d}/rm{i}")])
            }
        }),
        case("mv", {
            let d = d.clone();
            move |_, i| {
                std::fs::write(format!("{d}/mv{i}"), b"x").unwrap();
                strings(&["mv", &format!("{d}/mv{i}"), &format!("{d}/moved{i}")])
            }
        }),
        case("cp host to guest", {
            let d = d.clone();
            move |h, i| {
                let src = h.join(format!("up{i}"));
                std::fs::write(&src, b"up\n").unwrap();
                strings(&["cp", s(&src), &format!(":{d}/up{i}")])
            }
        }),
        cp_down,
        cp_dir_down,
        download,
        case("run -d", |_, _| strings(&["run", "-d", "--", "true"])),
        case("run", |_, _| strings(&["run", "--", "echo", "job"])),
        case("jobs", |_, _| strings(&["jobs"])),
    ]
}

/// Runs every case `TRIES` times against an endpoint with `fault` and checks that no
/// try whose connection broke exits 0, that each exits 69 with the unreachable or
/// lost-connection message, and that a failed download leaves nothing behind.
fn never_exits_zero(fault: Fault) {
    let agent = Agent::start();
    let work = agent.dir.path().join("work");
    let host = tempfile::tempdir().unwrap();
    let cases = cases(&work);
    std::thread::scope(|scope| {
        for (n, case) in cases.iter().enumerate() {
            let (agent, host, work) = (&agent.socket, host.path(), work.as_path());
            scope.spawn(move || {
                let endpoint = Endpoint::start(fault, agent, u64::try_from(n).unwrap());
                let addr = endpoint.addr();
                let mut broken = 0;
                for i in 0..TRIES {
                    let args = (case.args)(work, i);
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let cuts_before = endpoint.cuts.load(Ordering::SeqCst);
                    let (out, took) = run(&addr, &args, case.stdin, fault.timeout());
                    let err = stderr(&out);
                    assert!(
                        took < fault.timeout() + MARGIN,
                        "{fault:?}: `atoll {}` (try {i}) took {took:?}, past its {:?} timeout + \
                         {MARGIN:?} (exit {:?}): {err}",
                        case.name,
                        fault.timeout(),
                        out.status.code()
                    );
                    let was_cut = endpoint.cuts.load(Ordering::SeqCst) > cuts_before;
                    if matches!(fault, Fault::CutMidCall) && !was_cut {
                        // The command made fewer calls than the endpoint let pass.
                        assert_eq!(
                            code(&out),
                            0,
                            "`atoll {}` with its calls whole (try {i}): {err}",
                            case.name
                        );
                        continue;
                    }
                    broken += 1;
                    assert_ne!(
                        code(&out),
                        0,
                        "{fault:?}: `atoll {}` exited 0 (try {i}): {err} stdout={:?}",
                        case.name,
                        String::from_utf8_lossy(&out.stdout)
                    );
                    assert_eq!(code(&out), 69, "{fault:?}: `atoll {}` (try {i}): {err}", case.name);
                    assert!(
                        err.contains("did not let us through")
                            || err.contains("lost the connection")
                            || err.contains("the connection was lost before the agent answered")
                            || err.contains("could not start a gRPC session")
                            || err.contains("\"kind\":\"unreachable\"")
                            || err.contains("\"kind\":\"disconnected\""),
                        "{fault:?}: `atoll {}` (try {i}) said: {err}",
                        case.name
                    );
                    if let Some(path) = &case.leaves_nothing_at {
                        let path = path(host, i);
                        assert!(!path.exists(), "{fault:?}: `atoll {}` left {}", case.name, path.display());
                    }
                }
                assert!(broken >= TRIES / 4, "{fault:?}: `atoll {}` broke in only {broken} tries", case.name);
            });
        }
    });
}

/// One try, and how long it ran (killed, failing the test, if it outlives a hang guard).
fn run(addr: &str, args: &[&str], stdin: &[u8], timeout: Duration) -> (std::process::Output, Duration) {
    let timeout = format!("{}s", timeout.as_secs());
    let command = atoll_cmd(addr, &[&["--connect-timeout", timeout.as_str()], args].concat());
    atoll_tests::commands::run_bounded(command, stdin, Duration::from_secs(60))
}

#[test]
fn an_endpoint_that_accepts_and_closes_never_gives_exit_0() {
    never_exits_zero(Fault::AcceptClose);
}

#[test]
fn an_endpoint_that_closes_after_ok_never_gives_exit_0() {
    never_exits_zero(Fault::CloseAfterOk);
}

#[test]
fn an_endpoint_that_answers_garbage_never_gives_exit_0() {
    never_exits_zero(Fault::Garbage);
}

#[test]
fn a_connection_cut_mid_call_never_gives_exit_0() {
    never_exits_zero(Fault::CutMidCall);
}

#[test]
fn a_closed_stdout_still_ends_quietly() {
    let agent = Agent::start();
    let big = agent.dir.path().join("big");
    std::fs::write(&big, vec![b'x'; 8 << 20]).unwrap();
    let addr = format!("unix://{}", agent.socket.display());
    for args in [vec!["cat", s(&big)], vec!["exec", "--", "cat", s(&big)]] {
        let mut child = atoll_cmd(&addr, &args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 1];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        // The reader is gone (dropped above), as after `| head -c 1`.
        let out = child.wait_with_output().unwrap();
        assert_eq!(first, *b"x");
        assert_eq!(code(&out), 0, "`atoll {}` with its reader gone: {}", args[0], stderr(&out));
        assert_eq!(stderr(&out), "", "`atoll {}` with its reader gone said something", args[0]);
    }
    // The shell pipeline itself, as users write it.
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("set -o pipefail; \"$ATOLL\" --agent '{addr}' cat '{}' | head -c 1", big.display()))
        .env("ATOLL", atoll_tests::workspace_bin("atoll"))
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"x");
    assert_eq!(stderr(&out), "");
}
