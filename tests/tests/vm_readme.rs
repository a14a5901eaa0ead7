//! README.md's shell examples, run as a new user would: every ```` ```sh ```` block of
//! README.md itself (read at test time, so the examples cannot drift from what runs), in
//! order, each with `bash -e -o pipefail`, must exit 0.
//!
//! Skipping a block: put this line right above its opening fence, with the reason:
//!
//! ```text
//! <!-- test: skip (needs the internet) -->
//! ```
//!
//! Use it only for what cannot run here (the internet, a terminal, a client program that
//! is not installed, an agent at an address this machine does not have) or what would
//! boot several VMs or take minutes; the reason is required. Output samples are
//! ```` ```text ````, not ```` ```sh ````.
//!
//! The blocks run in a private world: their own `ATOLL_STATE_DIR` and `HOME` (so `~/proj`
//! and `~/.config` are temp folders), this workspace's `atoll` first on `PATH`, the usual
//! templates (`ATOLL_DATA_DIR` if set). Each block runs in its own process group, which is
//! killed when the block ends (a block may start a server with `&`); every sandbox is
//! killed at the end, pass or fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use atoll_tests::vm::{Atoll, text};
use atoll_tests::workspace_bin;

/// The marker that skips the block below it.
const SKIP: &str = "<!-- test: skip (";

/// Longest a block may run (it may boot a few VMs under emulation on a busy machine).
const BLOCK_LIMIT: Duration = Duration::from_secs(900);

/// One ```sh block: its first line number in README.md, its text, why it is skipped.
struct Block {
    line: usize,
    code: String,
    skip: Option<String>,
}

/// The ```sh blocks of `readme`, in order.
fn sh_blocks(readme: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut previous = "";
    let mut lines = readme.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        if line.trim_end() == "```sh" {
            let skip = previous.trim().strip_prefix(SKIP).map(|rest| {
                let reason = rest.strip_suffix(") -->").unwrap_or_else(|| {
                    panic!("README.md:{n}: a skip marker is `{SKIP}REASON) -->`: {previous}")
                });
                assert!(!reason.trim().is_empty(), "README.md:{n}: a skip marker needs a reason");
                reason.to_string()
            });
            let code: Vec<&str> =
                lines.by_ref().map(|(_, l)| l).take_while(|l| l.trim_end() != "```").collect();
            blocks.push(Block { line: n + 2, code: code.join("\n") + "\n", skip });
        } else if line.trim_start().starts_with(SKIP) && !line.trim().is_empty() {
            // A marker must sit right above a ```sh fence, or it skips nothing.
            let next = readme.lines().nth(n + 1).unwrap_or_default();
            assert_eq!(
                next.trim_end(),
                "```sh",
                "README.md:{}: a skip marker not above a ```sh block",
                n + 1
            );
        }
        if !line.trim().is_empty() {
            previous = line;
        }
    }
    blocks
}

fn readme_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")
}

#[test]
fn readme_blocks_are_found_and_skips_give_reasons() {
    let readme = std::fs::read_to_string(readme_path()).unwrap();
    let blocks = sh_blocks(&readme);
    assert!(blocks.iter().filter(|b| b.skip.is_none()).count() >= 5, "too few README blocks run");
    assert!(blocks.iter().any(|b| b.code.contains("atoll create --name dev") && b.skip.is_none()));
    // The parser itself: a marker skips only the block right below it.
    let sample = "text\n<!-- test: skip (needs the internet) -->\n```sh\na\n```\n\n```sh\nb\nc\n```\n";
    let parsed = sh_blocks(sample);
    assert_eq!(parsed.len(), 2);
    assert_eq!((parsed[0].code.as_str(), parsed[0].skip.as_deref()), ("a\n", Some("needs the internet")));
    assert_eq!((parsed[1].code.as_str(), parsed[1].skip.as_deref(), parsed[1].line), ("b\nc\n", None, 8));
}

#[test]
fn vm_readme_sh_blocks_run_as_written() {
    let readme = std::fs::read_to_string(readme_path()).unwrap();
    let atoll = Atoll::new(); // kills every sandbox of its state directory when dropped
    let home = tempfile::tempdir().unwrap();
    // README's `--mount ~/proj:/work:rw`: as root, a read-write share must be an
    // ordinary user's (QEMU never runs as root); its `mkdir -p` then finds it.
    std::fs::create_dir(home.path().join("proj")).unwrap();
    atoll_tests::vm::own_as_ordinary_user(&home.path().join("proj"));
    let bin_dir = workspace_bin("atoll").parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut ran = 0;
    for block in sh_blocks(&readme) {
        if let Some(why) = &block.skip {
            eprintln!("README.md:{}: skipped ({why})", block.line);
            continue;
        }
        eprintln!("README.md:{}: running\n{}", block.line, block.code);
        let log = home.path().join(format!("block-{}.log", block.line));
        let out = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new("bash");
        cmd.args(["-e", "-o", "pipefail", "-c", &block.code])
            .env_remove("ATOLL_AGENT")
            .env_remove("ATOLL_SANDBOX")
            .env_remove("ATOLL_MCP_TOKEN")
            .env("ATOLL_STATE_DIR", atoll.state_dir())
            .env("ATOLL_DATA_DIR", atoll_tests::data_dir())
            .env("HOME", home.path())
            .env("PATH", &path)
            .current_dir(home.path())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().expect("spawn bash");
        let pgid = child.id().to_string();
        let deadline = std::time::Instant::now() + BLOCK_LIMIT;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if std::time::Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        // Whatever the block left running in the background (a server started with `&`).
        let _ =
            Command::new("kill").args(["-KILL", "--", &format!("-{pgid}")]).stderr(Stdio::null()).status();
        let output = text(&std::fs::read(&log).unwrap());
        eprintln!("{output}");
        let status = status.unwrap_or_else(|| {
            panic!("README.md:{}: the block ran over {} s:\n{output}", block.line, BLOCK_LIMIT.as_secs())
        });
        assert!(
            status.success(),
            "README.md:{}: the block failed ({status}):\n{}\n{output}",
            block.line,
            block.code
        );
        ran += 1;
    }
    assert!(ran >= 5, "only {ran} README blocks ran");
}
