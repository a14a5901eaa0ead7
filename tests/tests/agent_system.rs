//! Info and SetTime through a real `atoll-agent`, checked against what this machine
//! says about itself.

use std::time::{SystemTime, UNIX_EPOCH};

use atoll_proto::agent::v1 as pb;
use atoll_tests::Agent;
use tonic::Code;

fn now_ms() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

fn meminfo_kib(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = text.lines().find(|l| l.starts_with(&format!("{field}:"))).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn info_describes_this_machine() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let before = now_ms();
    let info = c.info(pb::InfoRequest {}).await.unwrap().into_inner();
    let after = now_ms();

    assert_eq!(info.agent_version, env!("CARGO_PKG_VERSION"), "agent and tests share the workspace version");
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(info.hostname, hostname.trim());
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(info.kernel, format!("Linux {}", release.trim()));
    assert_eq!(info.cpus as usize, std::thread::available_parallelism().unwrap().get());
    assert_eq!(info.memory_total_bytes, meminfo_kib("MemTotal") * 1024);
    assert!(info.memory_available_bytes > 0 && info.memory_available_bytes <= info.memory_total_bytes);
    assert!(info.disk_total_bytes > 0 && info.disk_free_bytes <= info.disk_total_bytes);
    assert!(!info.pid1, "the test agent is not PID 1");
    // Run as root, this file's and agent_restored's clock tests set this machine's wall
    // clock to a moment just past (back by their call's duration), and nextest runs them
    // beside this test: a step can fall on either side of the agent's read. The window
    // allows it and still catches a unit mix-up (seconds for milliseconds).
    let step_back = 5_000;
    assert!(
        (before - step_back..=after + step_back).contains(&info.time_unix_ms),
        "time_unix_ms {} is the agent's wall clock at the call, read between {before} and {after}",
        info.time_unix_ms
    );

    let later = c.info(pb::InfoRequest {}).await.unwrap().into_inner();
    assert!(later.uptime_ms >= info.uptime_ms, "uptime does not go backwards");
}

#[tokio::test]
async fn set_time_to_now_reports_how_far_the_clock_moved() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let bad = c.set_time(pb::SetTimeRequest { unix_ms: -5 }).await;
    let status = bad.expect_err("a time before 1970 is refused");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("1970"), "{}", status.message());

    // Setting the clock to the current time disturbs nothing: it moves back by at
    // most the time the call took.
    let sent = now_ms();
    let result = c.set_time(pb::SetTimeRequest { unix_ms: sent }).await;
    if euid() != 0 {
        let status = result.expect_err("only root may set the clock");
        assert_eq!(status.code(), Code::PermissionDenied);
        assert!(status.message().contains("root"), "{}", status.message());
        return;
    }
    let adjusted = result.expect("root sets the clock").into_inner().adjusted_by_ms;
    assert!(adjusted <= 0, "the clock moved forward by {adjusted} ms when set to a moment already past");
    // A unit mix-up (seconds for milliseconds) would move it by decades, not minutes.
    assert!(adjusted > -600_000, "the clock moved back by {} ms", -adjusted);
    let now = now_ms();
    assert!((sent..sent + 600_000).contains(&now), "the clock now reads {now}, set to {sent}");
}

/// The effective uid, from /proc (no extra dependency for one number).
fn euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}
