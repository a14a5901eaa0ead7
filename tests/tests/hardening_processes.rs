//! Every descendant of a command dies when the command is killed or finishes, even
//! those that left its process group with `setsid` or double-forked into daemons; the
//! agent (a child subreaper) reaps them, so no zombie accumulates; a background job's
//! escaped daemons are left alone until the job itself is killed.

mod hardening_util;

use atoll_proto::agent::v1 as pb;
use atoll_tests::Agent;
use futures::SinkExt;
use hardening_util::{alive, children_of, eventually, gone, read_pids, shell, stat};

/// A shell snippet that starts, in the background, a `sleep 1000` in a new session
/// which first appends its pid to `file`.
fn escapee(file: &std::path::Path) -> String {
    format!("setsid sh -c 'echo $$ >> {}; exec sleep 1000' &", file.display())
}

fn no_zombie_children(agent: &Agent) -> bool {
    children_of(agent.pid()).iter().all(|(_, state)| state != "Z")
}

#[tokio::test]
async fn a_setsid_escapee_dies_when_its_exec_finishes() {
    let agent = Agent::start();
    let pids = agent.dir.path().join("pids");
    // Wait for the escapee to record itself, so the check below is about a live process.
    let script = format!(
        "{} while [ ! -s {p} ]; do sleep 0.01; done; echo started",
        escapee(&pids),
        p = pids.display()
    );
    let resp = agent.client().await.exec(shell(&script)).await.unwrap().into_inner();
    assert_eq!(resp.stdout.unwrap().data, &b"started\n"[..]);
    let pid = read_pids(&pids)[0];
    eventually(&format!("the setsid sleep {pid} to be killed"), || gone(pid)).await;
    eventually("no zombie under the agent", || no_zombie_children(&agent)).await;
}

#[tokio::test]
async fn a_daemon_that_forks_and_exits_dies_on_timeout() {
    let agent = Agent::start();
    let pids = agent.dir.path().join("pids");
    // The middle shell exits at once, so the sleeper is orphaned and reparented to the
    // agent; the command itself ignores SIGTERM and outlives its timeout.
    let script = format!(
        "trap '' TERM; sh -c \"{}\"; while [ ! -s {p} ]; do sleep 0.01; done; sleep 1000",
        escapee(&pids),
        p = pids.display()
    );
    let mut client = agent.client().await;
    let resp =
        client.exec(pb::ExecRequest { timeout_ms: 1_000, ..shell(&script) }).await.unwrap().into_inner();
    assert!(resp.status.unwrap().timed_out, "the command should have timed out");
    let pid = read_pids(&pids)[0];
    eventually(&format!("the orphaned daemon {pid} to be killed"), || gone(pid)).await;
    eventually("no zombie under the agent", || no_zombie_children(&agent)).await;
}

#[tokio::test]
async fn escapees_die_when_an_exec_stream_client_goes_away() {
    let agent = Agent::start();
    let pids = agent.dir.path().join("pids");
    let script = format!("{} {} sleep 1000", escapee(&pids), escapee(&pids));
    let (mut tx, rx) = futures::channel::mpsc::channel(4);
    let start = pb::ExecRequest { timeout_ms: 600_000, ..shell(&script) };
    tx.send(pb::ExecStreamInput { input: Some(pb::exec_stream_input::Input::Start(start)) }).await.unwrap();
    let mut events = agent.client().await.exec_stream(rx).await.unwrap().into_inner();
    let first = events.message().await.unwrap().unwrap();
    assert!(matches!(first.event, Some(pb::exec_event::Event::Started(_))));
    eventually("both escapees to start", || read_pids(&pids).len() == 2).await;
    let escaped = read_pids(&pids);
    for &pid in &escaped {
        let (_, _, _, sid) = stat(pid).expect("escapee alive");
        assert_eq!(sid, pid, "the escapee should lead its own session");
    }
    drop(events);
    drop(tx);
    for pid in escaped {
        eventually(&format!("escapee {pid} to be killed after the client left"), || gone(pid)).await;
    }
    eventually("no zombie under the agent", || no_zombie_children(&agent)).await;
}

#[tokio::test]
async fn a_jobs_daemon_survives_other_commands_and_dies_with_the_job() {
    let agent = Agent::start();
    let pids = agent.dir.path().join("pids");
    let mut client = agent.client().await;
    let job = client
        .start_job(pb::StartJobRequest {
            command: Some(pb::Command {
                shell: format!("sh -c \"{}\"; sleep 1000", escapee(&pids)),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    eventually("the job's daemon to start", || read_pids(&pids).len() == 1).await;
    let daemon = read_pids(&pids)[0];
    // Other commands finishing (each sweeps its own leftovers) must not touch the job's.
    for _ in 0..3 {
        client.exec(shell("sleep 0.01 & true")).await.unwrap();
    }
    assert!(alive(daemon), "another command's clean-up killed the job's daemon {daemon}");
    client.signal_job(pb::SignalJobRequest { id: job.id, signal: 9 }).await.unwrap();
    eventually(&format!("the job's daemon {daemon} to die with the job"), || gone(daemon)).await;
}

#[tokio::test]
async fn many_orphans_leave_no_zombies() {
    let agent = Agent::start();
    let mut client = agent.client().await;
    for _ in 0..20 {
        // Each command double-forks a short-lived grandchild that the agent must reap.
        client.exec(shell("sh -c 'sleep 0.05 &' ; true")).await.unwrap();
    }
    eventually("no zombie under the agent", || no_zombie_children(&agent)).await;
    eventually("no child left under the agent", || children_of(agent.pid()).is_empty()).await;
}
