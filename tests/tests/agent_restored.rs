//! Restored through a real `atoll-agent`: one call makes a guest restored from a snapshot
//! a machine of its own (clock, hostname, host randomness). As root the agent runs in a
//! UTS namespace of its own, so its hostname changes and this machine's does not;
//! without root only what an unprivileged agent answers is checked. A restored VM's
//! hostname is checked through `atoll` in vm_snapshot.rs.

use std::time::{SystemTime, UNIX_EPOCH};

use atoll_proto::agent::v1 as pb;
use atoll_tests::Agent;
use tonic::Code;

fn now_ms() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

fn this_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string()
}

fn request(unix_ms: i64, hostname: &str, entropy: &[u8]) -> pb::RestoredRequest {
    pb::RestoredRequest { unix_ms, hostname: hostname.into(), entropy: entropy.to_vec().into() }
}

async fn hostname_of(agent: &Agent) -> String {
    agent.client().await.info(pb::InfoRequest {}).await.unwrap().into_inner().hostname
}

#[tokio::test]
async fn restored_sets_the_clock_and_the_hostname_in_one_call() {
    let ours = this_hostname();
    let Some(agent) = Agent::start_with_own_hostname() else {
        // Not root: the clock, the first step, is refused, and nothing else changes.
        let agent = Agent::start();
        let status = agent.client().await.restored(request(now_ms(), "fork-1", b"")).await.unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied);
        assert!(status.message().contains("root"), "{}", status.message());
        assert_eq!(hostname_of(&agent).await, ours);
        return;
    };
    let mut c = agent.client().await;
    let sent = now_ms();
    let answer = c.restored(request(sent, "fork-1", &[7u8; 64])).await.unwrap().into_inner();
    assert_eq!(answer.agent_version, env!("CARGO_PKG_VERSION"), "the version comes with the answer");
    assert!(
        answer.adjusted_by_ms <= 0,
        "set to a moment already past, the clock moved by {}",
        answer.adjusted_by_ms
    );
    assert!(answer.adjusted_by_ms > -600_000, "the clock moved back by {} ms", -answer.adjusted_by_ms);
    assert_eq!(hostname_of(&agent).await, "fork-1");
    assert_eq!(this_hostname(), ours, "the agent's own UTS namespace kept the change to itself");

    // Any atoll sandbox name is a hostname: `_` too; no randomness is fine.
    c.restored(request(now_ms(), "my_box.2", b"")).await.unwrap();
    assert_eq!(hostname_of(&agent).await, "my_box.2");
}

#[tokio::test]
async fn restored_refuses_bad_input_before_changing_anything() {
    let agent = Agent::start_with_own_hostname().unwrap_or_else(Agent::start);
    let before = hostname_of(&agent).await;
    let mut c = agent.client().await;
    let long = "a".repeat(65);
    let flood = vec![0u8; 4097];
    for (req, says) in [
        (request(now_ms(), "a/b", b""), "`a/b` cannot be a hostname"),
        (request(now_ms(), "", b""), "1 to 64 ASCII letters"),
        (request(now_ms(), &long, b""), "cannot be a hostname"),
        (request(now_ms(), "two words", b""), "cannot be a hostname"),
        (request(now_ms(), "fine", &flood), "4097 bytes of entropy is over the limit of 4096"),
        (request(-5, "fine", b""), "1970"),
    ] {
        let status = c.restored(req).await.expect_err(says);
        assert_eq!(status.code(), Code::InvalidArgument, "{}", status.message());
        assert!(status.message().contains(says), "{} (wanted {says:?})", status.message());
    }
    assert_eq!(hostname_of(&agent).await, before, "a refused call changes nothing");
}
