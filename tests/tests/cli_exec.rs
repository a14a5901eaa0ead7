//! `atoll exec`, `atoll run` and `atoll job ...` driven as a subprocess against a real agent:
//! exit codes passed through, output streamed intact, stdin forwarded, JSON results.

mod cli_util;

use atoll_tests::Agent;
use cli_util::{atoll, atoll_stdin, code, json, ok, sha256, stderr, stdout};

#[test]
fn exit_codes_are_passed_through() {
    let agent = Agent::start();
    let a = agent.address();
    assert_eq!(code(&atoll(&a, &["exec", "--", "sh", "-c", "exit 7"])), 7);
    assert_eq!(code(&atoll(&a, &["exec", "--", "true"])), 0);
    assert_eq!(code(&atoll(&a, &["exec", "--sh", "exit 42"])), 42);
    // Killed by SIGKILL: 128 + 9.
    assert_eq!(code(&atoll(&a, &["exec", "--", "sh", "-c", "kill -9 $$"])), 137);
}

#[test]
fn a_timeout_exits_124_and_says_so() {
    let agent = Agent::start();
    let out = atoll(&agent.address(), &["exec", "--timeout", "1s", "--", "sleep", "30"]);
    assert_eq!(code(&out), 124, "{}", stderr(&out));
    assert!(stderr(&out).contains("timeout"), "{}", stderr(&out));
}

#[test]
fn ten_megabytes_of_output_arrive_intact() {
    let agent = Agent::start();
    let data = atoll_tests::noise(10_000_000, 3);
    let file = agent.dir.path().join("big.bin");
    std::fs::write(&file, &data).unwrap();
    let out = atoll(&agent.address(), &["exec", "--", "cat", cli_util::s(&file)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(out.stdout.len(), data.len());
    assert_eq!(sha256(&out.stdout), sha256(&data));
}

#[test]
fn stdout_and_stderr_stay_apart() {
    let agent = Agent::start();
    let out = atoll(&agent.address(), &["exec", "--sh", "echo out; echo err >&2; exit 3"]);
    assert_eq!(code(&out), 3);
    assert_eq!(stdout(&out), "out\n");
    assert_eq!(stderr(&out), "err\n");
}

#[test]
fn stdin_is_forwarded() {
    let agent = Agent::start();
    let input = atoll_tests::noise(3_000_000, 9);
    let out = atoll_stdin(&agent.address(), &["exec", "--", "cat"], &input);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(sha256(&out.stdout), sha256(&input));
    let out = atoll_stdin(&agent.address(), &["exec", "--", "wc", "-c"], b"12345");
    assert_eq!(ok(&out).trim(), "5");
}

#[test]
fn cwd_env_and_argv_reach_the_command() {
    let agent = Agent::start();
    let dir = agent.dir.path();
    let out = atoll(
        &agent.address(),
        &[
            "exec",
            "--cwd",
            cli_util::s(dir),
            "-e",
            "GREETING=hi there",
            "--",
            "sh",
            "-c",
            "pwd; echo \"$GREETING\"; echo \"$1\"",
            "sh",
            "a b",
        ],
    );
    assert_eq!(ok(&out), format!("{}\nhi there\na b\n", dir.display()));
}

#[test]
fn capture_and_json_give_the_capped_result() {
    let agent = Agent::start();
    let out =
        atoll(&agent.address(), &["--json", "exec", "--", "sh", "-c", "echo hello; echo oops >&2; exit 5"]);
    assert_eq!(code(&out), 5);
    let doc = json(&out);
    assert_eq!(doc["status"]["code"], 5);
    assert_eq!(doc["status"]["timed_out"], false);
    assert_eq!(doc["stdout"]["data"], "hello\n");
    assert_eq!(doc["stderr"]["data"], "oops\n");
    assert_eq!(doc["stdout"]["truncated"], false);

    let out = atoll(
        &agent.address(),
        &[
            "exec",
            "--capture",
            "--output-limit",
            "1000",
            "--",
            "sh",
            "-c",
            "head -c 100000 /dev/zero | tr '\\0' x",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(out.stdout.len() < 100_000, "capture must cap: got {} bytes", out.stdout.len());
    assert!(stderr(&out).contains("100000"), "{}", stderr(&out));
}

#[test]
fn background_jobs_run_and_report() {
    let agent = Agent::start();
    let a = agent.address();
    let id = ok(&atoll(&a, &["run", "-d", "--", "sh", "-c", "echo started; sleep 0.2; echo done; exit 3"]))
        .trim()
        .to_string();
    assert!(!id.is_empty());
    let waited = atoll(&a, &["--json", "job", "wait", &id]);
    assert_eq!(code(&waited), 3, "{}", stderr(&waited));
    let doc = json(&waited);
    assert_eq!(doc["state"], "exited");
    assert_eq!(doc["status"]["code"], 3);
    assert_eq!(ok(&atoll(&a, &["job", "logs", &id])), "started\ndone\n");
    let jobs = json(&atoll(&a, &["--json", "jobs"]));
    assert!(jobs.as_array().unwrap().iter().any(|j| j["id"] == id.as_str()), "{jobs}");

    let id = ok(&atoll(&a, &["run", "-d", "--", "sleep", "300"])).trim().to_string();
    let killed = atoll(&a, &["job", "kill", "--signal", "TERM", &id]);
    assert_eq!(code(&killed), 0, "{}", stderr(&killed));
    let waited = atoll(&a, &["job", "wait", &id]);
    assert_eq!(code(&waited), 128 + 15, "{}", stdout(&waited));

    // Following a job prints its output as it comes and ends with its exit code.
    let id =
        ok(&atoll(&a, &["run", "-d", "--sh", "for i in 1 2 3; do echo line $i; sleep 0.3; done; exit 6"]))
            .trim()
            .to_string();
    let followed = atoll(&a, &["job", "logs", "-f", &id]);
    assert_eq!(code(&followed), 6, "{}", stderr(&followed));
    assert_eq!(stdout(&followed), "line 1\nline 2\nline 3\n");

    // Without -d, run waits and prints the output.
    let out = atoll(&a, &["run", "--", "sh", "-c", "echo attached; exit 4"]);
    assert_eq!(code(&out), 4);
    assert_eq!(stdout(&out), "attached\n");
}

#[test]
fn unknown_job_is_not_found() {
    let agent = Agent::start();
    let out = atoll(&agent.address(), &["--json", "job", "status", "nope"]);
    assert_eq!(code(&out), 1);
    assert_eq!(cli_util::json_error(&out)["kind"], "not_found");
}

#[test]
fn a_closed_pipe_ends_exec_quietly() {
    use std::io::Read;
    use std::process::Stdio;
    let agent = Agent::start();
    let mut child = cli_util::atoll_cmd(&agent.address(), &["exec", "--", "yes"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 4096];
    child.stdout.as_mut().unwrap().read_exact(&mut head).unwrap();
    assert!(head.starts_with(b"y\ny\n"));
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "a broken pipe is not an error to report");
}

#[test]
fn an_agent_that_dies_mid_command_is_reported_as_unreachable() {
    use std::io::Read;
    use std::process::Stdio;
    let agent = Agent::start();
    let mut child = cli_util::atoll_cmd(&agent.address(), &["exec", "--sh", "echo up; sleep 5"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut up = [0u8; 3];
    child.stdout.as_mut().unwrap().read_exact(&mut up).unwrap();
    assert_eq!(&up, b"up\n");
    let killed = std::process::Command::new("kill").arg("-9").arg(agent.pid().to_string()).status().unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(stderr(&out).contains("lost the connection to the agent"), "{}", stderr(&out));
}
