//! `atoll cat`, `write`, `ls`, `stat`, `rm`, `mv`, `mkdir`, driven as a subprocess
//! against a real agent (whose "guest" paths are this machine's temp dir).

mod cli_util;

use std::io::Read;
use std::process::Stdio;

use atoll_tests::Agent;
use cli_util::{atoll, atoll_cmd, atoll_stdin, code, json, json_error, ok, s, sha256, stderr};

#[test]
fn write_then_cat_round_trips_binary_bytes() {
    let agent = Agent::start();
    let a = agent.address();
    let path = agent.dir.path().join("sub/dir/blob.bin");
    let data = atoll_tests::noise(5_000_000, 1);
    let out = atoll_stdin(&a, &["write", s(&path)], &data);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(std::fs::read(&path).unwrap(), data);
    let out = atoll(&a, &["cat", s(&path)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(sha256(&out.stdout), sha256(&data));

    let slice = atoll(&a, &["cat", "--offset", "10", "--length", "5", s(&path)]);
    assert_eq!(code(&slice), 0, "{}", stderr(&slice));
    assert_eq!(slice.stdout, &data[10..15]);

    let src = agent.dir.path().join("local.txt");
    std::fs::write(&src, b"from a file\n").unwrap();
    let dst = agent.dir.path().join("copy.txt");
    let out = atoll(&a, &["--json", "write", "--from", s(&src), "--mode", "600", s(&dst)]);
    assert_eq!(json(&out)["file_size"], 12);
    let out = atoll_stdin(&a, &["write", "--append", s(&dst)], b"more\n");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&dst).unwrap(), "from a file\nmore\n");
}

#[test]
fn small_operations_and_their_json() {
    let agent = Agent::start();
    let a = agent.address();
    let root = agent.dir.path().join("tree");
    let deep = root.join("a/b");
    assert_eq!(code(&atoll(&a, &["mkdir", s(&deep)])), 1, "mkdir without -p needs the parent");
    ok(&atoll(&a, &["mkdir", "-p", s(&deep)]));
    std::fs::write(deep.join("f.txt"), b"hello").unwrap();

    let listing = json(&atoll(&a, &["--json", "ls", "-R", s(&root)]));
    let paths: Vec<&str> =
        listing["entries"].as_array().unwrap().iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert!(paths.contains(&"a/b/f.txt"), "{paths:?}");
    let shallow = json(&atoll(&a, &["--json", "ls", "-R", "--depth", "1", s(&root)]));
    assert_eq!(shallow["entries"].as_array().unwrap().len(), 1, "{shallow}");
    let text = ok(&atoll(&a, &["ls", s(&deep)]));
    assert!(text.contains("f.txt") && text.starts_with("-rw"), "{text}");
    let names = ok(&atoll(&a, &["ls", "--names", "-R", s(&root)]));
    assert_eq!(names, "a/\na/b/\na/b/f.txt\n");
    let names = json(&atoll(&a, &["--json", "ls", "--names", s(&deep)]));
    assert_eq!(
        names,
        serde_json::json!({"entries": [{"path": "f.txt", "kind": "file"}], "truncated": false})
    );

    let st = json(&atoll(&a, &["--json", "stat", s(&deep.join("f.txt"))]));
    assert_eq!(st["kind"], "file");
    assert_eq!(st["size"], 5);

    let moved = root.join("g.txt");
    ok(&atoll(&a, &["mv", s(&deep.join("f.txt")), s(&moved)]));
    assert!(moved.exists() && !deep.join("f.txt").exists());
    std::fs::write(deep.join("f.txt"), b"again").unwrap();
    let clash = atoll(&a, &["--json", "mv", s(&deep.join("f.txt")), s(&moved)]);
    assert_eq!(json_error(&clash)["kind"], "already_exists");
    // The CLI names its own flag, never the MCP argument.
    let clash = atoll(&a, &["mv", s(&deep.join("f.txt")), s(&moved)]);
    let err = stderr(&clash);
    assert!(err.contains("`atoll mv -f` replaces it") && !err.contains("overwrite"), "{err}");
    ok(&atoll(&a, &["mv", "-f", s(&deep.join("f.txt")), s(&moved)]));
    assert_eq!(std::fs::read(&moved).unwrap(), b"again");

    assert_eq!(code(&atoll(&a, &["rm", s(&root)])), 1, "a directory needs -r");
    ok(&atoll(&a, &["rm", "-r", s(&root)]));
    assert!(!root.exists());
}

#[test]
fn a_failing_local_source_writes_nothing() {
    let agent = Agent::start();
    let dst = agent.dir.path().join("never.txt");
    // Opening a directory works; reading it fails half-way into the upload.
    let out = atoll(&agent.address(), &["write", "--from", s(agent.dir.path()), s(&dst)]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("nothing was written in the guest"), "{}", stderr(&out));
    assert!(!dst.exists());
}

#[test]
fn a_missing_file_says_so() {
    let agent = Agent::start();
    let missing = agent.dir.path().join("no/such/file");
    let out = atoll(&agent.address(), &["cat", s(&missing)]);
    assert_eq!(code(&out), 1);
    let err = stderr(&out);
    assert!(err.starts_with("atoll: ") && err.contains(s(&missing)), "{err}");
    assert!(out.stdout.is_empty());

    let out = atoll(&agent.address(), &["--json", "stat", s(&missing)]);
    assert_eq!(code(&out), 1);
    let e = json_error(&out);
    assert_eq!(e["kind"], "not_found");
    assert_eq!(e["exit_code"], 1);
    assert!(e["message"].as_str().unwrap().contains(s(&missing)), "{e}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_relative_path_is_refused_by_the_agent() {
    let agent = Agent::start();
    let out = atoll(&agent.address(), &["--json", "cat", "relative/path"]);
    assert_eq!(json_error(&out)["kind"], "invalid_argument");
}

#[test]
fn a_closed_pipe_ends_cat_quietly() {
    let agent = Agent::start();
    let path = agent.dir.path().join("big.bin");
    std::fs::write(&path, atoll_tests::noise(20_000_000, 5)).unwrap();
    let mut child = atoll_cmd(&agent.address(), &["cat", s(&path)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 1000];
    child.stdout.as_mut().unwrap().read_exact(&mut head).unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "a broken pipe is not an error to report");
}

#[test]
fn guest_file_names_with_escape_sequences_reach_the_terminal_escaped() {
    let agent = Agent::start();
    let a = agent.address();
    let dir = agent.dir.path().join("hostile");
    std::fs::create_dir(&dir).unwrap();
    // Clears the screen, sets the clipboard (OSC 52), and a C1 CSI.
    let name = "evil\x1b[2J\x1b]52;c;aGk=\x07\u{9b}31mname";
    std::fs::write(dir.join(name), b"x").unwrap();
    std::os::unix::fs::symlink("/tmp/\x1b[1mtarget", dir.join("link")).unwrap();
    for args in [&["ls", s(&dir)][..], &["ls", "--names", s(&dir)], &["stat", &format!("{}/{name}", s(&dir))]]
    {
        let out = atoll(&a, args);
        let text = ok(&out);
        assert!(
            !out.stdout.contains(&0x1b) && !text.contains('\u{9b}') && !text.contains('\x07'),
            "{args:?}: {text:?}"
        );
        assert!(text.contains("evil\\x1b[2J\\x1b]52;c;aGk=\\x07\\u{9b}31mname"), "{args:?}: {text:?}");
    }
    assert!(ok(&atoll(&a, &["ls", s(&dir)])).contains("-> /tmp/\\x1b[1mtarget"));
    // An error quoting the name is escaped too; --json keeps the name exact.
    let missing = atoll(&a, &["cat", &format!("{}/{name}.gone", s(&dir))]);
    assert!(!missing.stderr.contains(&0x1b) && stderr(&missing).contains("\\x1b[2J"), "{}", stderr(&missing));
    let listed = json(&atoll(&a, &["--json", "ls", s(&dir)]));
    let names: Vec<&str> =
        listed["entries"].as_array().unwrap().iter().filter_map(|e| e["path"].as_str()).collect();
    assert!(names.contains(&name), "{names:?}");
}
