//! Background jobs through the real agent over its Unix socket: start, status with the
//! tail of each stream, wait (with and without a timeout), signals to the whole group,
//! listing, unknown ids, timeouts, and complete logs on disk.

use std::time::{Duration, Instant};

use atoll_proto::agent::v1 as pb;
use atoll_proto::agent::v1::exit_status::Kind;
use atoll_proto::limits::JOB_TAIL_BYTES;
use atoll_tests::{Agent, pid_reaped};
use tonic::Code;
use tonic::transport::Channel;

type Client = pb::agent_client::AgentClient<Channel>;

fn shell(cmd: &str) -> pb::StartJobRequest {
    pb::StartJobRequest {
        command: Some(pb::Command { shell: cmd.into(), ..Default::default() }),
        timeout_ms: 0,
    }
}

async fn start(client: &mut Client, req: pb::StartJobRequest) -> pb::Job {
    client.start_job(req).await.expect("start_job").into_inner()
}

async fn wait(client: &mut Client, id: &str, timeout_ms: u32) -> pb::Job {
    client.wait_job(pb::WaitJobRequest { id: id.into(), timeout_ms }).await.expect("wait_job").into_inner()
}

async fn get(client: &mut Client, id: &str) -> pb::Job {
    client.get_job(pb::JobRef { id: id.into() }).await.expect("get_job").into_inner()
}

fn state(job: &pb::Job) -> pb::JobState {
    pb::JobState::try_from(job.state).expect("a known state")
}

fn kind(job: &pb::Job) -> Kind {
    job.status.as_ref().expect("an exited job has a status").kind.unwrap()
}

/// Polls until `cond` holds; panics with `what` after a generous deadline.
async fn eventually(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond().await {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn job_runs_detached_and_its_logs_are_complete() {
    let agent = Agent::start();
    let mut client = agent.client().await;
    let job = start(&mut client, shell("seq 1 100000; echo oops >&2; exit 4")).await;
    assert_eq!(job.id, "job-1");
    assert!(job.pid > 1);
    assert_eq!(job.command, "seq 1 100000; echo oops >&2; exit 4");
    assert!(job.started_at_unix_ms > 1_600_000_000_000);

    let done = wait(&mut client, &job.id, 0).await;
    assert_eq!(state(&done), pb::JobState::Exited);
    assert_eq!(kind(&done), Kind::Code(4));
    assert!(!done.status.unwrap().timed_out);

    let expected: String = (1..=100_000).map(|i| format!("{i}\n")).collect();
    let out = done.stdout.unwrap();
    assert_eq!(out.total_bytes, expected.len() as u64);
    assert_eq!(out.tail, expected.as_bytes()[expected.len() - JOB_TAIL_BYTES..]);
    assert!(out.log_path.starts_with(&agent.dir.path().join("jobs").display().to_string()));
    assert_eq!(std::fs::read_to_string(&out.log_path).unwrap(), expected, "the log holds the whole stream");
    let err = done.stderr.unwrap();
    assert_eq!((err.total_bytes, err.tail.as_ref()), (5, &b"oops\n"[..]));
    assert_eq!(std::fs::read(&err.log_path).unwrap(), b"oops\n");

    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(agent.dir.path().join("jobs")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the job directory is private");
}

#[tokio::test]
async fn status_of_a_running_job_shows_its_tail() {
    let agent = Agent::start();
    let mut client = agent.client().await;
    let job = start(&mut client, shell("printf 'working...'; sleep 1000")).await;
    eventually("the job's first output", async || {
        get(&mut client, &job.id).await.stdout.unwrap().tail == b"working..."[..]
    })
    .await;
    let now = get(&mut client, &job.id).await;
    assert_eq!(state(&now), pb::JobState::Running);
    assert!(now.status.is_none());
    assert_eq!(now.stdout.unwrap().total_bytes, 10);
    client.signal_job(pb::SignalJobRequest { id: job.id.clone(), signal: 0 }).await.unwrap();
}

#[tokio::test]
async fn wait_with_timeout_returns_the_running_job_then_kill_ends_the_whole_group() {
    let agent = Agent::start();
    let mut client = agent.client().await;
    let pidfile = agent.dir.path().join("child.pid");
    let job = start(&mut client, shell(&format!("sleep 1000 & echo $! > {}; wait", pidfile.display()))).await;

    let still = wait(&mut client, &job.id, 200).await;
    assert_eq!(state(&still), pb::JobState::Running, "a wait that times out is an answer, not an error");
    assert!(still.status.is_none());

    eventually("the job's child to start", async || {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    })
    .await;
    let child: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    let signalled = client.signal_job(pb::SignalJobRequest { id: job.id.clone(), signal: 0 }).await.unwrap();
    assert_eq!(signalled.into_inner().id, job.id);
    let done = wait(&mut client, &job.id, 0).await;
    assert_eq!(kind(&done), Kind::Signal(9), "signal 0 means SIGKILL");
    for pid in [job.pid, child] {
        eventually(&format!("pid {pid} to be gone"), async || pid_reaped(pid)).await;
    }

    // A job that has exited cannot be signalled.
    let status =
        client.signal_job(pb::SignalJobRequest { id: job.id.clone(), signal: 15 }).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
}

#[tokio::test]
async fn sigterm_reaches_the_job() {
    let agent = Agent::start();
    let mut client = agent.client().await;
    let job = start(
        &mut client,
        shell("trap 'echo got-term; exit 42' TERM; echo ready; while :; do sleep 0.05; done"),
    )
    .await;
    eventually("the trap to be set", async || {
        get(&mut client, &job.id).await.stdout.unwrap().tail == b"ready\n"[..]
    })
    .await;
    client.signal_job(pb::SignalJobRequest { id: job.id.clone(), signal: 15 }).await.unwrap();
    let done = wait(&mut client, &job.id, 0).await;
    assert_eq!(kind(&done), Kind::Code(42));
    assert_eq!(done.stdout.unwrap().tail, &b"ready\ngot-term\n"[..]);
}

/// The agent signals a job's process group and then, one by one, the job's processes
/// that left it; the shell, still in its group, must get each SIGTERM once, not twice.
/// (A double delivery shows only when it lands after the shell handled the first, so
/// five signals are sent, one after the other's trap has run.)
#[tokio::test]
async fn a_signal_reaches_a_job_once() {
    const SIGNALS: usize = 5;
    let agent = Agent::start();
    let mut client = agent.client().await;
    let script = "trap 'echo got-term' TERM; echo ready; n=0; \
        while [ $n -lt 80 ]; do sleep 0.05; n=$((n+1)); done; exit 42";
    let job = start(&mut client, shell(script)).await;
    let terms = async |client: &mut _| {
        let tail = get(client, &job.id).await.stdout.unwrap().tail;
        String::from_utf8_lossy(&tail).matches("got-term").count()
    };
    eventually("the trap to be set", async || {
        get(&mut client, &job.id).await.stdout.unwrap().tail == b"ready\n"[..]
    })
    .await;
    for sent in 1..=SIGNALS {
        client.signal_job(pb::SignalJobRequest { id: job.id.clone(), signal: 15 }).await.unwrap();
        eventually("the trap to run", async || terms(&mut client).await >= sent).await;
    }
    let done = wait(&mut client, &job.id, 0).await;
    assert_eq!(kind(&done), Kind::Code(42));
    let want = format!("ready\n{}", "got-term\n".repeat(SIGNALS));
    assert_eq!(String::from_utf8_lossy(&done.stdout.unwrap().tail), want);
}

#[tokio::test]
async fn job_timeout_kills_it() {
    let agent = Agent::start();
    let mut client = agent.client().await;
    let job = start(&mut client, pb::StartJobRequest { timeout_ms: 300, ..shell("sleep 1000") }).await;
    let done = wait(&mut client, &job.id, 0).await;
    let status = done.status.unwrap();
    assert!(status.timed_out);
    assert_eq!(status.kind, Some(Kind::Signal(15)));
}

#[tokio::test]
async fn list_shows_every_job_oldest_first_with_unique_ids() {
    let agent = Agent::start();
    let mut client = agent.client().await;
    let argv = pb::StartJobRequest {
        command: Some(pb::Command { argv: vec!["echo".into(), "two words".into()], ..Default::default() }),
        timeout_ms: 0,
    };
    let a = start(&mut client, shell("true")).await;
    let b = start(&mut client, argv).await;
    let c = start(&mut client, shell("sleep 1000")).await;
    let jobs = client.list_jobs(pb::ListJobsRequest {}).await.unwrap().into_inner().jobs;
    let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, [a.id.as_str(), b.id.as_str(), c.id.as_str()]);
    assert_eq!(ids, ["job-1", "job-2", "job-3"]);
    assert_eq!(jobs[1].command, "echo 'two words'");
    client.signal_job(pb::SignalJobRequest { id: c.id, signal: 9 }).await.unwrap();
}

#[tokio::test]
async fn ids_skip_logs_left_by_an_earlier_agent() {
    let agent = Agent::start();
    let jobs = agent.dir.path().join("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    std::fs::write(jobs.join("job-1.stdout"), "old").unwrap();
    let mut client = agent.client().await;
    let job = start(&mut client, shell("echo new")).await;
    assert_eq!(job.id, "job-2");
    assert_eq!(std::fs::read_to_string(jobs.join("job-1.stdout")).unwrap(), "old", "old logs are kept");
}

#[tokio::test]
async fn unknown_ids_and_bad_requests_are_refused() {
    let agent = Agent::start();
    let mut client = agent.client().await;
    let missing = client.get_job(pb::JobRef { id: "job-999".into() }).await.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    assert!(
        missing.message().contains("job-999")
            && missing.metadata().get(atoll_proto::reason::REASON_KEY).is_some_and(|r| r == "unknown_job"),
        "{}",
        missing.message()
    );
    let wait = client.wait_job(pb::WaitJobRequest { id: "nope".into(), timeout_ms: 10 }).await.unwrap_err();
    assert_eq!(wait.code(), Code::NotFound);
    let signal = client.signal_job(pb::SignalJobRequest { id: "nope".into(), signal: 9 }).await.unwrap_err();
    assert_eq!(signal.code(), Code::NotFound);

    let job = start(&mut client, shell("sleep 1000")).await;
    let bad_signal =
        client.signal_job(pb::SignalJobRequest { id: job.id.clone(), signal: 999 }).await.unwrap_err();
    assert_eq!(bad_signal.code(), Code::InvalidArgument);
    let too_long =
        client.wait_job(pb::WaitJobRequest { id: job.id.clone(), timeout_ms: 600_001 }).await.unwrap_err();
    assert_eq!(too_long.code(), Code::InvalidArgument);
    client.signal_job(pb::SignalJobRequest { id: job.id, signal: 0 }).await.unwrap();

    let empty = client.start_job(shell("")).await.unwrap_err();
    assert_eq!(empty.code(), Code::InvalidArgument);
    let relative = pb::StartJobRequest {
        command: Some(pb::Command { shell: "pwd".into(), cwd: "tmp".into(), ..Default::default() }),
        timeout_ms: 0,
    };
    assert_eq!(client.start_job(relative).await.unwrap_err().code(), Code::InvalidArgument);
    let missing_program = pb::StartJobRequest {
        command: Some(pb::Command { argv: vec!["no-such-program-xyz".into()], ..Default::default() }),
        timeout_ms: 0,
    };
    assert_eq!(client.start_job(missing_program).await.unwrap_err().code(), Code::NotFound);
    let jobs = client.list_jobs(pb::ListJobsRequest {}).await.unwrap().into_inner().jobs;
    assert_eq!(jobs.len(), 1, "refused jobs leave no record");
}
