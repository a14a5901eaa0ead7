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

/// The `atoll ...` command a backticked mention names: its subcommand words (lowercase
/// words after `atoll`, global options and their values skipped, up to the first
/// placeholder, value or `--`) and the options given right after them.
fn named_command(mention: &str) -> (Vec<String>, Vec<String>) {
    let mut words = Vec::new();
    let mut options = Vec::new();
    let mut tokens = mention.split_whitespace().skip(1).peekable();
    while let Some(t) = tokens.next() {
        if matches!(t, "-s" | "--sandbox" | "--agent" | "--connect-timeout") {
            tokens.next();
            continue;
        }
        let is_word =
            !t.is_empty() && t.chars().all(|c| c.is_ascii_lowercase() || c == '-') && !t.starts_with('-');
        if !is_word {
            if t.starts_with('-') && t != "--" {
                options.push(t.to_owned());
            }
            break;
        }
        words.push(t.to_owned());
    }
    // Options given after the words (and their placeholders), e.g. `atoll download DIR -o FILE`.
    for t in tokens {
        if t == "--" || t.contains('|') {
            break;
        }
        if t.starts_with('-') {
            options.push(t.to_owned());
        }
    }
    let options = options
        .into_iter()
        .map(|o| o.split('=').next().unwrap_or_default().to_owned())
        .filter(|o| {
            o.len() > 1 && o.trim_start_matches('-').chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
        .collect();
    (words, options)
}

/// Every `` `atoll ...` `` that the command's own messages and help (host-cli/src) and
/// the docs (README.md, docs/) tell a user to run names a command that exists, with
/// options it has: a message that teaches a command atoll does not have (a quota error
/// said `atoll park`) sends the user nowhere.
#[test]
fn every_atoll_command_a_message_or_doc_names_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z", "README.md", "docs", "host-cli/src"])
        .current_dir(root)
        .output()
        .expect("run git ls-files (git is needed for this test)");
    assert!(out.status.success(), "git ls-files failed: {}", stderr(&out));
    let files: Vec<std::path::PathBuf> = out
        .stdout
        .split(|b| *b == 0)
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .filter(|n| n.ends_with(".rs") || n.ends_with(".md"))
        .map(|n| root.join(n))
        .collect();
    let mut mentions = std::collections::BTreeMap::<String, String>::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, line) in text.lines().enumerate() {
            for piece in line.split('`').skip(1).step_by(2) {
                if piece.starts_with("atoll ") {
                    let at = format!("{}:{}", file.strip_prefix(root).unwrap().display(), i + 1);
                    mentions.entry(piece.to_owned()).or_insert(at);
                }
            }
        }
    }
    assert!(mentions.len() > 100, "only {} mentions found; is this a checkout?", mentions.len());
    let mut helps = std::collections::HashMap::<Vec<String>, Result<String, String>>::new();
    let mut wrong = Vec::new();
    for (mention, at) in &mentions {
        let (words, options) = named_command(mention);
        let help = helps.entry(words.clone()).or_insert_with(|| {
            let out = cli_util::atoll_cmd(
                "",
                &[&words.iter().map(String::as_str).collect::<Vec<_>>()[..], &["--help"]].concat(),
            )
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run atoll");
            let err = stderr(&out);
            // An internal command (atoll starts it) answers with its own usage line.
            let own_usage = err.contains(&format!("usage: atoll {}", words.join(" ")));
            if out.status.success() {
                Ok(s_out(&out.stdout))
            } else if own_usage {
                Ok(err)
            } else {
                Err(err)
            }
        });
        match help {
            Err(e) => {
                wrong.push(format!("{at}: `{mention}`: no such command: {}", e.lines().next().unwrap_or("")))
            }
            Ok(text) => {
                for o in options.iter().filter(|o| !text.contains(o.as_str())) {
                    wrong.push(format!("{at}: `{mention}`: `atoll {}` has no option {o}", words.join(" ")));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} mentions name what atoll does not have:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn a_named_command_is_read_as_its_words_and_options() {
    let (w, o) = named_command("atoll -s web template snapshot TEMPLATE --rm");
    assert_eq!((w, o), (vec!["template".to_owned(), "snapshot".to_owned()], vec!["--rm".to_owned()]));
    let (w, o) = named_command("atoll download DIR -o out.zip");
    assert_eq!((w, o), (vec!["download".to_owned()], vec!["-o".to_owned()]));
    let (w, o) = named_command("atoll create --net=none --memory 2048");
    assert_eq!((w, o), (vec!["create".to_owned()], vec!["--net".to_owned(), "--memory".to_owned()]));
    let (w, _) = named_command("atoll park NAME");
    assert_eq!(w, vec!["park".to_owned()]);
}

fn s_out(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
