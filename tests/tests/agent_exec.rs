//! Exec and ExecStream through the real agent over its Unix socket: exit codes and
//! signals, shell and argv, cwd/env/stdin/user, timeouts that kill every descendant,
//! capped output in bounded memory, streaming with stdin, client disconnects, and
//! refused requests.

use std::path::Path;
use std::time::{Duration, Instant};

use atoll_proto::agent::v1 as pb;
use atoll_proto::agent::v1::exec_event::Event;
use atoll_tests::{Agent, pid_reaped};
use futures::SinkExt;
use tonic::Code;

use pb::exit_status::Kind;

fn shell(cmd: &str) -> pb::ExecRequest {
    pb::ExecRequest {
        command: Some(pb::Command { shell: cmd.into(), ..Default::default() }),
        ..Default::default()
    }
}

fn argv(args: &[&str]) -> pb::ExecRequest {
    let argv = args.iter().map(|s| s.to_string()).collect();
    pb::ExecRequest { command: Some(pb::Command { argv, ..Default::default() }), ..Default::default() }
}

fn with_command(mut req: pb::ExecRequest, f: impl FnOnce(&mut pb::Command)) -> pb::ExecRequest {
    f(req.command.as_mut().unwrap());
    req
}

async fn run(agent: &Agent, req: pb::ExecRequest) -> pb::ExecResponse {
    agent.client().await.exec(req).await.expect("exec").into_inner()
}

async fn refused(agent: &Agent, req: pb::ExecRequest) -> tonic::Status {
    agent.client().await.exec(req).await.expect_err("the agent should refuse this request")
}

fn stdout(resp: &pb::ExecResponse) -> String {
    String::from_utf8_lossy(&resp.stdout.as_ref().unwrap().data).into_owned()
}

fn kind(resp: &pb::ExecResponse) -> Kind {
    resp.status.as_ref().unwrap().kind.unwrap()
}

/// Polls `cond` until it holds; panics with `what` after a generous deadline.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The process's peak resident set size (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

fn read_pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path).unwrap_or_default().split_whitespace().map(|p| p.parse().unwrap()).collect()
}

#[tokio::test]
async fn exit_codes_and_signals_are_reported() {
    let agent = Agent::start();
    assert_eq!(kind(&run(&agent, shell("exit 3")).await), Kind::Code(3));
    assert_eq!(kind(&run(&agent, argv(&["true"])).await), Kind::Code(0));
    let killed = run(&agent, shell("kill -9 $$")).await;
    assert_eq!(kind(&killed), Kind::Signal(9));
    assert!(!killed.status.unwrap().timed_out);
}

#[tokio::test]
async fn shell_expands_and_argv_does_not() {
    let agent = Agent::start();
    assert_eq!(stdout(&run(&agent, shell("echo $((1+2)) \"$0\"")).await), "3 /bin/sh\n");
    let literal = run(&agent, argv(&["echo", "a  b", "$HOME", "*"])).await;
    assert_eq!(stdout(&literal), "a  b $HOME *\n");
}

#[tokio::test]
async fn cwd_env_and_stdin_reach_the_command() {
    let agent = Agent::start();
    let dir = agent.dir.path().join("work dir");
    std::fs::create_dir(&dir).unwrap();
    let req = with_command(shell("pwd; echo \"$GREETING\"; cat"), |c| {
        c.cwd = dir.display().to_string();
        c.env.insert("GREETING".into(), "hi there".into());
    });
    let resp = run(&agent, pb::ExecRequest { stdin: b"from stdin".to_vec().into(), ..req }).await;
    assert_eq!(stdout(&resp), format!("{}\nhi there\nfrom stdin", dir.display()));
    // Empty cwd is `/`.
    assert_eq!(stdout(&run(&agent, argv(&["pwd"])).await), "/\n");
}

#[tokio::test]
async fn stdin_larger_than_a_pipe_is_fed_while_output_is_drained() {
    let agent = Agent::start();
    let input: Vec<u8> = (0..3_000_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let req =
        pb::ExecRequest { stdin: input.clone().into(), output_limit: 4 * 1024 * 1024, ..argv(&["cat"]) };
    let resp = run(&agent, req).await;
    let out = resp.stdout.unwrap();
    assert!(!out.truncated);
    assert_eq!(out.data, input);
}

#[tokio::test]
async fn user_by_uid_and_name_and_unknown_user() {
    let agent = Agent::start();
    for (user, want) in [("0", "0 0"), ("root", "0 0"), ("nobody", "65534 65534"), ("4321", "4321 4321")] {
        let req = with_command(shell("echo $(id -u) $(id -g)"), |c| c.user = user.into());
        assert_eq!(stdout(&run(&agent, req).await), format!("{want}\n"), "user {user}");
    }
    let home = with_command(shell("echo $HOME $USER"), |c| c.user = "nobody".into());
    assert_eq!(stdout(&run(&agent, home).await), "/nonexistent nobody\n");
    let status = refused(&agent, with_command(shell("id"), |c| c.user = "no-such-user-xyz".into())).await;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("no-such-user-xyz") && status.message().contains("/etc/passwd"));
}

/// Both ways of starting a command (posix_spawn for the agent's own user, fork for a
/// user switch) give the same start: a session of its own, no blocked or ignored
/// signal (the agent ignores SIGPIPE), no fd of the agent's (even one it inherited),
/// PATH searched, and a script without `#!` run by /bin/sh.
#[tokio::test]
async fn every_command_leads_a_session_with_default_signals_and_only_its_stdio() {
    // A pipe without close-on-exec: the agent inherits it, and must not pass it on.
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills the two-int array it is given.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    let agent = Agent::start();
    // glibc's posix_spawn leaves its two internal signals (32, 33) ignored; they mean
    // nothing to other programs, and the musl agent in the images does not.
    let probe = r#"set -- $(cut -d' ' -f6 /proc/$$/stat); echo sid=$(( $1 == $$ ));
        set -- $(grep -E '^Sig(Blk|Ign)' /proc/$$/status); echo $1 $(( 0x$2 )) $3 $(( 0x$4 & ~0x180000000 ))"#;
    for user in ["", "nobody"] {
        let req = with_command(shell(probe), |c| c.user = user.into());
        let resp = run(&agent, req).await;
        assert_eq!(
            (kind(&resp), stdout(&resp).as_str()),
            (Kind::Code(0), "sid=1\nSigBlk: 0 SigIgn: 0\n"),
            "user {user:?}"
        );
        // `ls` is found through PATH; its fds are the three it was given and its own
        // directory handle.
        let req = with_command(argv(&["ls", "/proc/self/fd"]), |c| c.user = user.into());
        assert_eq!(stdout(&run(&agent, req).await), "0\n1\n2\n3\n", "user {user:?}");
        let req = with_command(argv(&["env"]), |c| {
            c.user = user.into();
            _ = c.env.insert("ATOLL_PROBE".into(), "here".into());
        });
        assert!(stdout(&run(&agent, req).await).lines().any(|l| l == "ATOLL_PROBE=here"), "user {user:?}");
    }
    // A script without `#!` runs through /bin/sh, as execvp would run it.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("no-shebang");
    std::fs::write(&script, "echo ran as $0 with $1\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let resp = run(&agent, argv(&[script.to_str().unwrap(), "arg"])).await;
    assert_eq!(stdout(&resp), format!("ran as {} with arg\n", script.display()));
}

#[tokio::test]
async fn timeout_kills_every_descendant_and_returns_partial_output() {
    let agent = Agent::start();
    let pids = agent.dir.path().join("pids");
    let script = format!(
        "echo started; echo $$ > {p}; sleep 1000 & echo $! >> {p}; \
         ( sleep 1000 & echo $! >> {p} ); sh -c 'sleep 1000 & echo $! >> {p}; wait' & \
         echo $! >> {p}; wait",
        p = pids.display()
    );
    let resp = run(&agent, pb::ExecRequest { timeout_ms: 500, ..shell(&script) }).await;
    let status = resp.status.unwrap();
    assert!(status.timed_out);
    assert_eq!(status.kind, Some(Kind::Signal(15)), "the shell dies of SIGTERM");
    assert_eq!(String::from_utf8_lossy(&resp.stdout.unwrap().data), "started\n");
    let pids = read_pids(&pids);
    assert_eq!(pids.len(), 5, "shell, two sleeps, the subshell's orphan, the inner shell: {pids:?}");
    for pid in pids {
        eventually(&format!("pid {pid} to be killed and reaped"), || pid_reaped(pid)).await;
    }
}

#[tokio::test]
async fn huge_output_keeps_head_and_tail_in_bounded_memory() {
    let agent = Agent::start();
    let total: u64 = 200_000_000;
    let script = format!(
        "printf HEAD-; yes 0123456789 | head -c {}; printf -- -TAIL; head -c 3000000 /dev/zero >&2",
        total - 10
    );
    let resp = run(&agent, shell(&script)).await;
    assert_eq!(kind(&resp), Kind::Code(0));
    let out = resp.stdout.unwrap();
    assert!(out.truncated);
    assert_eq!(out.total_bytes, total);
    assert!(out.data.len() <= 32 * 1024, "kept {} bytes, over the default limit", out.data.len());
    let text = String::from_utf8_lossy(&out.data);
    assert!(text.starts_with("HEAD-0123456789\n0123456789\n"), "head kept: {}", &text[..40]);
    assert!(text.ends_with("-TAIL"), "tail kept");
    let marker_at = text.find("\n... [").expect("omitted-bytes marker");
    let marker_len = text[marker_at..].find("] ...\n").expect("marker end") + "] ...\n".len();
    let omitted: u64 = text[marker_at + 6..].split(' ').next().unwrap().parse().unwrap();
    let kept = (text.len() - marker_len) as u64;
    assert_eq!(omitted + kept, total, "the marker counts exactly the bytes left out");
    let err = resp.stderr.unwrap();
    assert_eq!((err.total_bytes, err.truncated), (3_000_000, true));

    let hwm_kib = peak_rss_kib(agent.pid());
    assert!(hwm_kib < 64 * 1024, "agent peak RSS {hwm_kib} KiB after 200 MB of output: output is being held");
}

#[tokio::test]
async fn output_limit_is_per_request_and_capped() {
    let agent = Agent::start();
    let resp = run(&agent, pb::ExecRequest { output_limit: 100, ..shell("seq 1 1000") }).await;
    let out = resp.stdout.unwrap();
    assert!(out.truncated && out.data.len() <= 100 && out.total_bytes == 3893);
    assert!(out.data.starts_with(b"1\n2\n3\n") && out.data.ends_with(b"999\n1000\n"));
    let status =
        refused(&agent, pb::ExecRequest { output_limit: 4 * 1024 * 1024 + 1, ..shell("true") }).await;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("4194304") && status.message().contains("stream the output"));
}

#[tokio::test]
async fn a_background_process_holding_the_output_open_does_not_hold_the_exec() {
    let agent = Agent::start();
    let pidfile = agent.dir.path().join("pid");
    let script = format!("sleep 1000 & echo $! > {}; echo done", pidfile.display());
    let resp = run(&agent, pb::ExecRequest { timeout_ms: 30_000, ..shell(&script) }).await;
    let status = resp.status.unwrap();
    assert!(!status.timed_out, "the exec waited for the background sleep");
    assert_eq!((stdout(&resp), status.kind), ("done\n".to_owned(), Some(Kind::Code(0))));
    let pid = read_pids(&pidfile)[0];
    eventually(&format!("the leftover sleep {pid} to be killed"), || pid_reaped(pid)).await;
}

#[tokio::test]
async fn stdout_and_stderr_are_captured_separately() {
    let agent = Agent::start();
    let resp = run(&agent, shell("for i in 1 2 3; do echo out$i; echo err$i >&2; done")).await;
    assert_eq!(stdout(&resp), "out1\nout2\nout3\n");
    let err = resp.stderr.unwrap();
    assert_eq!((err.data.as_ref(), err.total_bytes, err.truncated), (&b"err1\nerr2\nerr3\n"[..], 15, false));
}

#[tokio::test]
async fn dropping_a_unary_exec_kills_the_command() {
    let agent = Agent::start();
    let pidfile = agent.dir.path().join("pid");
    let mut client = agent.client().await;
    let script = format!("sleep 1000 & echo $! > {p}.child; echo $$ > {p}; wait", p = pidfile.display());
    let call = tokio::spawn(async move { client.exec(shell(&script)).await });
    eventually("the command to start", || read_pids(&pidfile).len() == 1).await;
    let child = agent.dir.path().join("pid.child");
    eventually("the background sleep to start", || read_pids(&child).len() == 1).await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    for pid in read_pids(&pidfile).into_iter().chain(read_pids(&child)) {
        eventually(&format!("pid {pid} to be killed after the client left"), || pid_reaped(pid)).await;
    }
}

type Input = futures::channel::mpsc::Sender<pb::ExecStreamInput>;

async fn open_stream(agent: &Agent, start: pb::ExecRequest) -> (Input, tonic::Streaming<pb::ExecEvent>) {
    let (mut tx, rx) = futures::channel::mpsc::channel(4);
    tx.send(pb::ExecStreamInput { input: Some(pb::exec_stream_input::Input::Start(start)) }).await.unwrap();
    let events = agent.client().await.exec_stream(rx).await.expect("exec_stream").into_inner();
    (tx, events)
}

/// Collects (stdout, stderr, chunk sizes, exit status) until `exited`.
async fn collect(
    events: &mut tonic::Streaming<pb::ExecEvent>,
) -> (Vec<u8>, Vec<u8>, Vec<usize>, pb::ExitStatus) {
    let (mut out, mut err, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(event) = events.message().await.expect("event") {
        match event.event.expect("event kind") {
            Event::Started(_) => panic!("a second `started`"),
            Event::Stdout(d) => {
                sizes.push(d.len());
                out.extend(d)
            }
            Event::Stderr(d) => {
                sizes.push(d.len());
                err.extend(d)
            }
            Event::Exited(status) => return (out, err, sizes, status),
        }
    }
    panic!("the stream ended without `exited`");
}

async fn started_pid(events: &mut tonic::Streaming<pb::ExecEvent>) -> u32 {
    match events.message().await.expect("event").expect("first event").event {
        Some(Event::Started(s)) => s.pid,
        other => panic!("first event should be `started`, got {other:?}"),
    }
}

#[tokio::test]
async fn exec_stream_forwards_stdin_and_streams_output_untruncated() {
    use pb::exec_stream_input::Input as In;
    let agent = Agent::start();
    let start = pb::ExecRequest { stdin: b"first ".to_vec().into(), ..shell("tr a-z A-Z; echo done >&2") };
    let (mut tx, mut events) = open_stream(&agent, start).await;
    let pid = started_pid(&mut events).await;
    assert!(pid > 1);
    for chunk in ["hello ", "world"] {
        tx.send(pb::ExecStreamInput { input: Some(In::Stdin(chunk.into())) }).await.unwrap();
    }
    // The input stays open: `stdin_eof` alone must close the command's stdin.
    tx.send(pb::ExecStreamInput { input: Some(In::StdinEof(true)) }).await.unwrap();
    let (out, err, _, status) = collect(&mut events).await;
    assert_eq!((out.as_slice(), err.as_slice()), (&b"FIRST HELLO WORLD"[..], &b"done\n"[..]));
    assert_eq!(status.kind, Some(Kind::Code(0)));
    drop(tx);

    let (_tx, mut events) = open_stream(&agent, shell("head -c 5000000 /dev/zero; exit 7")).await;
    started_pid(&mut events).await;
    let (out, _, sizes, status) = collect(&mut events).await;
    assert_eq!(out.len(), 5_000_000, "ExecStream does not truncate");
    assert!(sizes.iter().all(|n| *n <= 64 * 1024), "chunks are at most 64 KiB");
    assert_eq!(status.kind, Some(Kind::Code(7)));
}

#[tokio::test]
async fn a_slow_exec_stream_client_slows_the_command_not_the_agents_memory() {
    let agent = Agent::start();
    let total = 300_000_000;
    let (_tx, mut events) = open_stream(&agent, shell(&format!("head -c {total} /dev/zero"))).await;
    started_pid(&mut events).await;
    let Some(Event::Stdout(first)) = events.message().await.unwrap().unwrap().event else {
        panic!("stdout first")
    };
    // The client stops reading for a while; a command that was not held back would
    // have pushed all of its output into the agent by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let hwm = peak_rss_kib(agent.pid());
    assert!(hwm < 64 * 1024, "agent peak RSS {hwm} KiB while the client was not reading");
    let (out, _, _, status) = collect(&mut events).await;
    assert_eq!(status.kind, Some(Kind::Code(0)));
    assert_eq!(first.len() + out.len(), total, "the rest of the output still arrives");
}

#[tokio::test]
async fn exec_stream_times_out_like_exec() {
    let agent = Agent::start();
    let (_tx, mut events) =
        open_stream(&agent, pb::ExecRequest { timeout_ms: 300, ..shell("echo hi; sleep 1000") }).await;
    started_pid(&mut events).await;
    let (out, _, _, status) = collect(&mut events).await;
    assert_eq!(out, b"hi\n");
    assert!(status.timed_out);
}

#[tokio::test]
async fn dropping_an_exec_stream_kills_the_command() {
    let agent = Agent::start();
    let pidfile = agent.dir.path().join("pids");
    let script = format!("sleep 1000 & echo $! > {p}; yes", p = pidfile.display());
    let (tx, mut events) = open_stream(&agent, shell(&script)).await;
    let pid = started_pid(&mut events).await;
    // `yes` writes forever; the client reads a little, then goes away without reading on.
    for _ in 0..3 {
        assert!(matches!(events.message().await.unwrap().unwrap().event, Some(Event::Stdout(_))));
    }
    eventually("the background sleep to start", || read_pids(&pidfile).len() == 1).await;
    drop(events);
    drop(tx);
    for pid in [pid].into_iter().chain(read_pids(&pidfile)) {
        eventually(&format!("pid {pid} to be killed after the client left"), || pid_reaped(pid)).await;
    }
}

#[tokio::test]
async fn invalid_requests_are_refused_with_actionable_errors() {
    let agent = Agent::start();
    let both = with_command(shell("true"), |c| c.argv = vec!["true".into()]);
    let cases = [
        (both, Code::InvalidArgument, "exactly one"),
        (pb::ExecRequest::default(), Code::InvalidArgument, "`shell`"),
        (shell(""), Code::InvalidArgument, "`argv`"),
        (with_command(argv(&["pwd"]), |c| c.cwd = "tmp".into()), Code::InvalidArgument, "relative"),
        (with_command(argv(&["pwd"]), |c| c.cwd = "/no/such/dir".into()), Code::NotFound, "does not exist"),
        (
            with_command(argv(&["pwd"]), |c| c.cwd = "/etc/passwd".into()),
            Code::InvalidArgument,
            "not a directory",
        ),
        (pb::ExecRequest { timeout_ms: 600_001, ..shell("true") }, Code::InvalidArgument, "600000"),
        (argv(&["no-such-program-xyz"]), Code::NotFound, "no-such-program-xyz"),
        (argv(&["", "x"]), Code::InvalidArgument, "argv[0]"),
        (
            with_command(argv(&["env"]), |c| _ = c.env.insert("A=B".into(), "x".into())),
            Code::InvalidArgument,
            "A=B",
        ),
        (argv(&["/etc/passwd"]), Code::PermissionDenied, "permission denied"),
    ];
    for (req, code, needle) in cases {
        let what = format!("{:?}", req.command);
        let status = refused(&agent, req).await;
        assert_eq!(status.code(), code, "{what}: {}", status.message());
        assert!(status.message().contains(needle), "{what}: message {:?} lacks {needle:?}", status.message());
    }
    // A timeout at the cap is accepted.
    assert_eq!(
        kind(&run(&agent, pb::ExecRequest { timeout_ms: 600_000, ..shell("true") }).await),
        Kind::Code(0)
    );

    // ExecStream must open with `start`.
    let (mut tx, rx) = futures::channel::mpsc::channel(1);
    tx.send(pb::ExecStreamInput { input: Some(pb::exec_stream_input::Input::Stdin(b"x".to_vec().into())) })
        .await
        .unwrap();
    drop(tx);
    let status = agent.client().await.exec_stream(rx).await.expect_err("stdin before start");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("start"));

    // One stream runs one command: a second `start` ends it with an error.
    let (mut tx, mut events) = open_stream(&agent, shell("cat")).await;
    let pid = started_pid(&mut events).await;
    tx.send(pb::ExecStreamInput { input: Some(pb::exec_stream_input::Input::Start(shell("true"))) })
        .await
        .unwrap();
    let status = events.message().await.expect_err("a second start");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("second `start`"), "{}", status.message());
    eventually("the first command to be killed", || pid_reaped(pid)).await;
}

#[tokio::test]
async fn many_concurrent_commands_each_get_their_own_status() {
    let agent = Agent::start();
    let calls = (0..20).map(|i| {
        let agent = &agent;
        async move {
            let resp = run(agent, shell(&format!("echo {i}; exit {i}"))).await;
            assert_eq!((stdout(&resp), kind(&resp)), (format!("{i}\n"), Kind::Code(i)));
        }
    });
    futures::future::join_all(calls).await;
}
