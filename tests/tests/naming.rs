//! The product is called atoll. Its old name (three letters, spelt below only in pieces)
//! is also the name of Docker's sandbox CLI, so it must not come back anywhere a user
//! reads it: code, help texts, error messages, docs, scripts, test names.
//!
//! A line may name the old word only to say that Docker's command of that name is another
//! product (README does so once); lines of npm lock files that hold a package's integrity
//! hash are skipped (a base64 digest can spell anything).

use std::path::Path;
use std::process::Command;

fn old_name() -> String {
    ["s", "b", "x"].concat()
}

/// Whether a line that holds the old name is one of the allowed mentions.
fn allowed(line: &str) -> bool {
    line.contains("\"integrity\": \"sha") || line.contains("Docker")
}

#[test]
fn the_old_name_appears_nowhere_in_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .expect("run git ls-files (git is needed for this test)");
    assert!(out.status.success(), "git ls-files failed: {}", String::from_utf8_lossy(&out.stderr));
    let old = old_name();
    let mut found = Vec::new();
    let mut scanned = 0;
    for name in out.stdout.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).into_owned();
        if name.to_ascii_lowercase().contains(&old) {
            found.push(format!("{name}: the file's own name"));
        }
        let Ok(bytes) = std::fs::read(root.join(&name)) else { continue };
        scanned += 1;
        let text = String::from_utf8_lossy(&bytes);
        for (i, line) in text.lines().enumerate() {
            if line.to_ascii_lowercase().contains(&old) && !allowed(line) {
                found.push(format!("{name}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(scanned > 100, "only {scanned} files were read; is this a checkout?");
    assert!(
        found.is_empty(),
        "the old name is back in {} places (say atoll instead):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_check_would_see_the_old_name() {
    let old = old_name();
    assert!(!allowed(&format!("eprintln!(\"{old}: no sandboxes\")")));
    assert!(!allowed(&format!("export {}_STATE_DIR=/x", old.to_ascii_uppercase())));
    assert!(allowed(&format!("Docker's `{old}` is a different product")));
}
