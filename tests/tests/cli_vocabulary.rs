//! Every error the `atoll` CLI shows names `atoll` commands, never an RPC of the agent's
//! proto nor an MCP tool: each failure a user can cause on a real agent is driven as a
//! subprocess and its stderr checked. A missing thing also says what to do next.

mod cli_util;

use atoll_tests::Agent;
use cli_util::{atoll, atoll_stdin, code, s, stderr};

/// The agent's RPC names, read from the proto the agent is built from.
fn rpc_names() -> Vec<String> {
    let proto = include_str!("../../proto/agent/v1/agent.proto");
    let names: Vec<String> = proto
        .lines()
        .filter_map(|line| line.trim().strip_prefix("rpc "))
        .filter_map(|rest| rest.split(|c: char| !c.is_alphanumeric()).next())
        .map(str::to_owned)
        .collect();
    assert!(names.len() > 10 && names.iter().any(|n| n == "ListDir"), "{names:?}");
    names
}

/// The words of `text` (runs of letters, digits and `_`).
fn words(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).collect()
}

#[test]
fn every_cli_error_names_only_atoll_commands() {
    let agent = Agent::start();
    let a = agent.address();
    let dir = agent.dir.path();
    let file = dir.join("plain.txt");
    std::fs::write(&file, b"x").unwrap();
    let under_file = file.join("child");
    let missing = dir.join("missing");
    let missing_deep = missing.join("a/b");
    let sub = dir.join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("f"), b"f").unwrap();
    let zip = dir.join("out.zip");
    let to = dir.join("to");
    let inner = sub.join("inner");

    // (argv, a missing thing: the message must say what to do next with `atoll`)
    let cases: Vec<(Vec<&str>, bool)> = vec![
        (vec!["cat", s(dir)], false),
        (vec!["cat", s(&missing)], true),
        (vec!["cat", "relative/path"], false),
        (vec!["cat", "--offset", "5", s(&file)], false),
        (vec!["ls", s(&file)], false),
        (vec!["ls", s(&missing)], true),
        (vec!["stat", s(&missing)], true),
        (vec!["rm", s(&missing)], true),
        (vec!["rm", s(&sub)], false),
        (vec!["rm", "-r", "/"], false),
        (vec!["mv", s(&missing), s(&to)], true),
        (vec!["mv", s(&file), s(&missing_deep)], true),
        (vec!["mv", s(&sub), s(&inner)], false),
        (vec!["mkdir", s(&missing_deep)], true),
        (vec!["mkdir", s(&sub)], false),
        (vec!["mkdir", s(&under_file)], false),
        (vec!["download", s(&file), "-o", s(&zip)], false),
        (vec!["download", s(&missing), "-o", s(&zip)], true),
        (vec!["exec", "--cwd", s(&missing), "--", "true"], true),
        (vec!["exec", "--cwd", s(&file), "--", "true"], false),
        (vec!["exec", "--", "/no/such/program"], true),
        (vec!["exec", "--timeout", "11m", "--", "true"], false),
        (vec!["job", "status", "job-999"], true),
        (vec!["job", "wait", "job-999"], true),
        (vec!["job", "kill", "job-999"], true),
        (vec!["job", "logs", "job-999"], true),
    ];
    let rpcs = rpc_names();
    let mut seen = Vec::new();
    for (argv, missing_thing) in &cases {
        let out = atoll(&a, argv);
        let text = stderr(&out);
        assert_ne!(code(&out), 0, "atoll {argv:?} should fail");
        assert!(text.starts_with("atoll: "), "atoll {argv:?}: {text}");
        for word in words(&text) {
            assert!(!rpcs.iter().any(|r| r == word), "atoll {argv:?} names the RPC {word}: {text}");
            assert!(!word.starts_with("sandbox_"), "atoll {argv:?} names the MCP tool {word}: {text}");
        }
        if *missing_thing {
            assert!(text.contains("`atoll "), "atoll {argv:?} does not say what to do next: {text}");
        }
        seen.push(text);
    }
    // Writing under a regular file, from stdin.
    let out = atoll_stdin(&a, &["write", s(&under_file)], b"data");
    let text = stderr(&out);
    assert!(text.contains("not a directory") && text.contains("`atoll "), "{text}");
    assert!(words(&text).iter().all(|w| !rpcs.iter().any(|r| r == w)), "{text}");
    seen.push(text);
    // The cases above are failures of different kinds, not one message repeated.
    seen.sort();
    seen.dedup();
    assert!(seen.len() > cases.len() / 2, "{seen:#?}");
}
