//! A command the guest's out-of-memory killer ends is reported as such, not as a bare
//! "signal 9": on the CLI's stderr (with the sandbox's memory and how to give it more),
//! in `--capture --json`, and in a background job's status.
//!
//! Boots the `minimal` template from the atoll data directory (`ATOLL_DATA_DIR` or the
//! default); its agent must be built from this tree.

use atoll_tests::vm::{Atoll, text};

/// Fills a 512 MiB guest's memory: awk doubles a string until the guest has no room for
/// the next copy, and the kernel's OOM killer ends it. (The reproduction, a
/// 600 MB `tr` pipeline into a shell variable, took minutes under software emulation
/// and, on a loaded host, once left the guest thrashing for over five minutes before
/// the OOM killer ran.)
const HOG: [&str; 2] = ["awk", "BEGIN { s = \"x\"; while (1) s = s s }"];

/// Filling the guest's memory takes minutes under software emulation: more than the
/// default exec timeout of 60 s.
const SLOW: &str = "10m";

#[test]
fn vm_a_command_the_oom_killer_ended_says_so_with_the_memory_and_the_fix() {
    let atoll = Atoll::new();
    atoll.create_with("oom", &["--memory", "512"]);

    // Streamed: exit 137 (128 + SIGKILL, as a shell gives), and a sentence on stderr.
    let out = atoll.run(&[&["-s", "oom", "exec", "--timeout", SLOW, "--"][..], &HOG].concat());
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(137), "{err}");
    assert!(err.contains("killed by the guest's out-of-memory killer"), "{err}");
    assert!(err.contains("MiB of memory"), "the message gives the sandbox's memory: {err}");
    assert!(err.contains("atoll create --memory"), "the message says how to give it more: {err}");

    // Captured, as JSON: the status says so and gives the guest's memory.
    let out = atoll
        .run(&[&["--json", "-s", "oom", "exec", "--capture", "--timeout", SLOW, "--"][..], &HOG].concat());
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    let status = &json["status"];
    assert_eq!(status["signal"], 9, "{json}");
    assert_eq!(status["oom_killed"], true, "{json}");
    let memory = status["memory_total_bytes"].as_u64().expect("the guest's memory is given");
    assert!(memory > 256 << 20 && memory <= 512 << 20, "a 512 MiB guest reported {memory} bytes");

    // A background job's status says so too.
    let out = atoll.run(&[&["--json", "-s", "oom", "run", "--"][..], &HOG].concat());
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
    let job: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(job["status"]["oom_killed"], true, "{job}");

    // A command killed by hand with signal 9 is not called an OOM kill.
    let out = atoll.run(&["--json", "-s", "oom", "exec", "--capture", "--", "sh", "-c", "kill -9 $$"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(json["status"]["signal"], 9, "{json}");
    assert_eq!(json["status"]["oom_killed"], false, "{json}");

    let out = atoll.run(&["kill", "oom"]);
    assert!(out.status.success(), "atoll kill failed: {}", text(&out.stderr));
}
