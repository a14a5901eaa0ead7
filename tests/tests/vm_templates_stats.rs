//! `atoll template save` and `atoll stats` through the `atoll` binary on real microVMs.
//!
//! Saving: a file installed in a `debian` sandbox is in sandboxes created from the
//! template saved from it; a name that exists is refused unless `--replace`; a template
//! in use is neither removed nor replaced (the error names the sandboxes); a `minimal`
//! (initramfs) sandbox is refused naming the disk templates. Templates are saved into a
//! scratch data directory whose `minimal`, `debian` and kernel are hard links to the
//! real ones, so the shared data directory is never written.
//!
//! Stats: the guest's CPU % moves when it burns CPU, its memory used when it fills
//! memory (a tmpfs file), by comparing two readings; no timing is asserted.

use std::path::{Path, PathBuf};

use atoll_tests::data_dir;
use atoll_tests::vm::{Atoll, text};
use serde_json::Value;

/// A scratch data directory sharing the real kernel and templates by hard links.
fn scratch_data() -> tempfile::TempDir {
    let scratch = tempfile::Builder::new().prefix("atoll-tpl-").tempdir_in("/tmp").unwrap();
    let real = data_dir();
    std::os::unix::fs::symlink(real.join("kernel"), scratch.path().join("kernel")).unwrap();
    for t in ["minimal", "debian"] {
        let from = real.join("templates").join(t);
        let to = scratch.path().join("templates").join(t);
        std::fs::create_dir_all(&to).unwrap();
        for f in std::fs::read_dir(&from)
            .unwrap_or_else(|_| panic!("template `{t}` is not built; run rootfs/setup.sh --with-debian"))
        {
            let f = f.unwrap().path();
            link(&f, &to.join(f.file_name().unwrap()));
        }
    }
    scratch
}

fn link(from: &Path, to: &Path) {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap();
    }
}

fn create(atoll: &Atoll, name: &str, template: &str) -> Value {
    atoll.create_with(name, &["--template", template, "--net", "none"])
}

#[test]
fn vm_template_save_then_create_has_the_installed_file_and_refusals_name_what_to_do() {
    let data = scratch_data();
    let atoll = Atoll::with_data_dir(data.path());
    create(&atoll, "src", "debian");
    let out = atoll.run(&[
        "-s",
        "src",
        "exec",
        "--sh",
        "echo installed-here > /usr/local/bin/marker && chmod 755 /usr/local/bin/marker",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let saved = atoll.json(&["template", "save", "src", "--name", "saved"]);
    assert_eq!(saved["name"], "saved");
    assert_eq!(saved["from_sandbox"], "src");
    assert_eq!(saved["from_template"], "debian");
    assert_eq!(saved["replaced"], false);
    let listed = atoll.json(&["template", "ls"]);
    let entry = listed.as_array().unwrap().iter().find(|t| t["name"] == "saved").expect("saved is listed");
    assert_eq!(entry["disk"], true);
    assert_eq!(entry["from_sandbox"], "src");

    // The source sandbox runs on after the save.
    let out = atoll.run(&["-s", "src", "exec", "--", "cat", "/usr/local/bin/marker"]);
    assert_eq!(text(&out.stdout), "installed-here\n", "{}", text(&out.stderr));

    let err = atoll.fails(&["template", "save", "src", "--name", "saved"]);
    assert!(err.contains("template `saved` already exists") && err.contains("--replace"), "{err}");
    let again = atoll.json(&["template", "save", "src", "--name", "saved", "--replace"]);
    assert_eq!(again["replaced"], true);

    let err = atoll.fails(&["template", "rm", "debian"]);
    assert!(
        err.contains("template `debian` is in use by sandbox src") && err.contains("atoll kill src"),
        "{err}"
    );

    create(&atoll, "dst", "saved");
    let out = atoll.run(&["-s", "dst", "exec", "--", "cat", "/usr/local/bin/marker"]);
    assert_eq!(text(&out.stdout), "installed-here\n", "{}", text(&out.stderr));
    assert_eq!(atoll.json(&["-s", "dst", "info"])["hostname"], "dst");

    let err = atoll.fails(&["template", "rm", "saved"]);
    assert!(err.contains("in use by sandbox dst"), "{err}");
    let err = atoll.fails(&["template", "save", "src", "--name", "saved", "--replace"]);
    assert!(err.contains("in use by sandbox dst"), "{err}");

    create(&atoll, "mini", "minimal");
    let err = atoll.fails(&["template", "save", "mini", "--name", "nope"]);
    assert!(err.contains("initramfs") && err.contains("installed: debian, saved"), "{err}");
    assert!(!data.path().join("templates/nope").exists(), "a refused save left a template behind");

    // A compromised QEMU writes its own disk: one that names a host file as its backing
    // file is refused before `qemu-img` reads anything into a template.
    let overlay =
        PathBuf::from(atoll.json(&["inspect", "src"])["dir"].as_str().unwrap()).join("vm/rootfs.qcow2");
    name_backing_file(&overlay, "/etc/hostname");
    let err = atoll.fails(&["template", "save", "src", "--name", "stolen"]);
    assert!(err.contains("is backed by `/etc/hostname`"), "{err}");
    assert!(!data.path().join("templates/stolen").exists(), "a refused save left a template behind");

    atoll.json(&["kill", "src", "dst", "mini"]);
    let removed = atoll.json(&["template", "rm", "saved"]);
    assert_eq!(removed["removed"][0], "saved");
    let leftovers: Vec<PathBuf> = std::fs::read_dir(data.path().join("templates"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "staging directories left: {leftovers:?}");
}

/// Rewrites the backing file name in the qcow2 header of `disk` (in place, where the
/// old, longer name was), as a QEMU writing its own disk could.
fn name_backing_file(disk: &Path, name: &str) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(disk).unwrap();
    let mut header = [0u8; 20];
    f.read_exact_at(&mut header, 0).unwrap();
    let offset = u64::from_be_bytes(header[8..16].try_into().unwrap());
    let size = u32::from_be_bytes(header[16..20].try_into().unwrap());
    assert!(offset > 0 && size as usize >= name.len(), "no backing name to replace: {offset} {size}");
    f.write_all_at(name.as_bytes(), offset).unwrap();
    f.write_all_at(&u32::try_from(name.len()).unwrap().to_be_bytes(), 16).unwrap();
}

fn reading(atoll: &Atoll, name: &str) -> Value {
    let all = atoll.json(&["stats", name]);
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    all[0].clone()
}

#[test]
fn vm_stats_move_when_the_guest_burns_cpu_and_fills_memory() {
    let atoll = Atoll::new();
    atoll.create("busy");
    let idle = reading(&atoll, "busy");
    assert_eq!(idle["state"], "running");
    assert_eq!(idle["memory_limit_bytes"], 512u64 << 20);
    assert!(idle["disk_total_bytes"].as_u64().unwrap() > 0, "{idle}");
    assert!(idle["net_rx_bytes"].is_u64() && idle["net_tx_bytes"].is_u64(), "it has a network: {idle}");
    assert!(idle["host_cpu_percent"].is_f64(), "{idle}");

    let out = atoll.run(&["-s", "busy", "run", "-d", "--", "sh", "-c", "while :; do :; done"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let burning = reading(&atoll, "busy");
    let (before, after) = (idle["cpu_percent"].as_f64().unwrap(), burning["cpu_percent"].as_f64().unwrap());
    assert!(after > 50.0 && after > before + 20.0, "guest CPU {before}% idle, {after}% burning");

    let out = atoll.run(&["-s", "busy", "exec", "--sh", "dd if=/dev/zero of=/tmp/fill bs=1M count=120 2>&1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let full = reading(&atoll, "busy");
    let (before, after) =
        (burning["memory_used_bytes"].as_u64().unwrap(), full["memory_used_bytes"].as_u64().unwrap());
    assert!(after >= before + (100 << 20), "memory used {before} before the 120 MiB file, {after} after");

    // The table has the same figures for people.
    let table = text(&atoll.run(&["stats"]).stdout);
    assert!(table.starts_with("NAME") && table.contains("CPU %") && table.contains("busy"), "{table}");

    // A paused sandbox is not resumed for a reading.
    atoll.json(&["pause", "busy"]);
    let paused = reading(&atoll, "busy");
    assert_eq!(paused["state"], "paused");
    assert!(paused.get("cpu_percent").is_none() && paused.get("memory_used_bytes").is_none(), "{paused}");
    assert_eq!(atoll.state_of("busy").as_deref(), Some("paused"));
    let err = atoll.fails(&["stats", "nope"]);
    assert!(err.contains("nope"), "{err}");
}
