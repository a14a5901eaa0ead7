//! `atoll template ls` shows background builds (started by MCP's
//! `sandbox_template_create {background: true}`) that are not installed yet, as
//! `sandbox_template_list` does, in text and in `--json`: one still running as
//! `building`, one whose server died as `failed` with the reason (in `problem`, as MCP says it).

mod image_util;

use atoll_tests::vm::text;
use image_util::atoll;
use serde_json::Value;

#[test]
fn template_ls_shows_builds_in_text_and_json() {
    let data = tempfile::tempdir().unwrap();
    let builds = data.path().join("templates/.builds");
    std::fs::create_dir_all(&builds).unwrap();
    let record = |name: &str, pid: u32| {
        serde_json::json!({ "name": name, "state": "building", "pid": pid, "started_unix": 1 }).to_string()
    };
    // This test's process stands for a server still building; pid 99999999 never runs.
    std::fs::write(builds.join("web.json"), record("web", std::process::id())).unwrap();
    std::fs::write(builds.join("api.json"), record("api", 99_999_999)).unwrap();

    let out = atoll(data.path(), &["--json", "template", "ls"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let by_name = |n: &str| list.as_array().unwrap().iter().find(|t| t["name"] == n).cloned();
    let web = by_name("web").expect("a running build is listed");
    assert_eq!(web["status"], "building", "{web}");
    let api = by_name("api").expect("a build whose server died is listed");
    assert_eq!(api["status"], "failed", "{api}");
    assert!(api["problem"].as_str().unwrap().contains("build it again"), "{api}");

    let out = atoll(data.path(), &["template", "ls"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.lines().any(|l| l.starts_with("web ") && l.ends_with("building")), "{shown}");
    assert!(shown.lines().any(|l| l.starts_with("api ") && l.contains("failed: ")), "{shown}");
}
