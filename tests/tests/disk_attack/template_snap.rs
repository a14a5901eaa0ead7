//! The template snapshot a disk template's first `atoll create` saved (the one later
//! creates of that shape restore instead of booting), altered on disk. By design a
//! template snapshot that cannot be used is removed and the create boots instead (it is
//! atoll's own cache: moving the data directory also makes its disk name another
//! image); an altered one is said without `-v`, and nothing is started from it.

use std::path::{Path, PathBuf};

use atoll_tests::processes_mentioning;
use atoll_tests::vm::{Atoll, BOOT_TIMEOUT, text};

use super::{backing_name, fifo, image_with_data_file, qemu_img, watch_proven};
use crate::cli_util::McpStdio;

/// The files of a snapshot other than its disk.
const KEPT: [&str; 3] = ["snapshot.json", "memory.bin", "ram.bin"];

/// A FIFO at `at`.
fn plant_fifo(at: &Path, _: &Path) {
    fifo(at);
}

/// A link at `at` to `to`.
fn plant_link(at: &Path, to: &Path) {
    std::os::unix::fs::symlink(to, at).unwrap();
}

/// The debian template snapshot of `atoll`'s state directory (saved by the first create
/// of `--template debian --net none`), altered each way below, is not used by a plain
/// `atoll create` of that shape: the create warns that it was altered and is not used,
/// removes it, and boots; neither FIFO its disk names is opened and no sandbox is left.
/// (Those boots are cut short by a 100 ms timeout: a full one per case would cost a boot
/// each.) `atoll template snapshot` replaces an altered one; MCP's `sandbox_create` on one
/// boots in full and saves a new one, which the next create restores.
pub(crate) fn altered_template_snapshots_are_not_used(atoll: &Atoll) {
    let root = atoll.state_dir().join(".template-snapshots");
    let dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("debian-512m-1c-none-"))
        .collect();
    assert_eq!(dirs.len(), 1, "the first debian create saved one: {dirs:?}");
    let dir = dirs[0].clone();
    // Beside the state directory (both in /tmp): the snapshot moves there and back.
    let lure = tempfile::tempdir_in(atoll.state_dir().parent().unwrap()).unwrap();
    let l = |n: &str| lure.path().join(n);
    let pristine = l("pristine");
    std::fs::rename(&dir, &pristine).unwrap();
    let template_image = PathBuf::from(backing_name(&pristine.join("disk.qcow2")));
    let (backing_fifo, data_fifo) = (l("backing.fifo"), l("data.fifo"));
    fifo(&backing_fifo);
    let with_data_file = l("with-data-file.qcow2");
    image_with_data_file(&template_image, &data_fifo, &with_data_file);
    let watch = watch_proven(&[backing_fifo.clone(), data_fifo.clone()]);

    // The pristine snapshot put back (its files linked, its disk copied), then `alter`ed.
    let put = |alter: &dyn Fn(&Path)| {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
        std::fs::create_dir(&dir).unwrap();
        for f in KEPT {
            std::fs::hard_link(pristine.join(f), dir.join(f)).unwrap();
        }
        std::fs::copy(pristine.join("disk.qcow2"), dir.join("disk.qcow2")).unwrap();
        alter(&dir);
    };
    let rebased_to_fifo = |d: &Path| {
        let disk = d.join("disk.qcow2").display().to_string();
        qemu_img(&["rebase", "-u", "-F", "raw", "-b", &backing_fifo.display().to_string(), &disk]);
    };
    let in_place = |file: &'static str, plant: fn(&Path, &Path)| {
        let pristine = pristine.clone();
        move |d: &Path| {
            std::fs::remove_file(d.join(file)).unwrap();
            plant(&d.join(file), &pristine.join(file));
        }
    };
    type Alter<'a> = (&'a str, Box<dyn Fn(&Path) + 'a>, String);
    let cases: Vec<Alter> = vec![
        (
            "its backing file renamed to a FIFO",
            Box::new(rebased_to_fifo),
            format!(
                "its disk was altered (or its template moved): the disk image {}/disk.qcow2 is backed by `{}`",
                dir.display(),
                backing_fifo.display()
            ),
        ),
        (
            "an external data file",
            Box::new(|d: &Path| std::fs::copy(&with_data_file, d.join("disk.qcow2")).map(drop).unwrap()),
            "it names an external data file".into(),
        ),
        (
            "a FIFO in the disk's place",
            Box::new(in_place("disk.qcow2", plant_fifo)),
            "its disk.qcow2 is a link, FIFO or device".into(),
        ),
        (
            "a link in the disk's place",
            Box::new(in_place("disk.qcow2", plant_link)),
            "its disk.qcow2 is a link, FIFO or device".into(),
        ),
        (
            "a link in guest RAM's place",
            Box::new(in_place("ram.bin", plant_link)),
            "its ram.bin is a link, FIFO or device".into(),
        ),
        (
            "a FIFO in the stream's place",
            Box::new(in_place("memory.bin", plant_fifo)),
            "its memory.bin is a link, FIFO or device".into(),
        ),
    ];

    let sandboxes = atoll.sandbox_dirs();
    let running = processes_mentioning(atoll.state_dir()).len();
    for (what, alter, said) in &cases {
        put(alter.as_ref());
        let out = atoll.run(&[
            "create",
            "--template",
            "debian",
            "--net",
            "none",
            "--name",
            "t",
            "--timeout",
            "100ms",
        ]);
        let err = text(&out.stderr);
        assert_eq!(watch.take(), Vec::<PathBuf>::new(), "{what}: a file its disk named was opened");
        assert!(
            err.contains("the snapshot of template `debian` was altered and is not used")
                && err.contains(said.as_str())
                && err.contains("nothing was started from it")
                && err.contains("this create boots"),
            "{what}: said without -v: {err}"
        );
        // It booted instead, which its 100 ms cut short (no boot answers that soon; a
        // restore that failed would say the sandbox did not come back from its snapshot).
        assert!(
            !out.status.success() && err.contains("the agent did not answer over its link"),
            "{what}: {err}"
        );
        assert!(!dir.exists(), "{what}: the altered snapshot was kept");
        assert_eq!(atoll.sandbox_dirs(), sandboxes, "{what}: a sandbox directory was left");
        assert_eq!(processes_mentioning(atoll.state_dir()).len(), running, "{what}: a process was left");
    }

    // `atoll template snapshot` replaces an altered one (it kept it while its check
    // looked at its files but not at its disk), saying why, and leaves no sandbox.
    put(&rebased_to_fifo);
    let replaced =
        atoll.json(&["template", "snapshot", "debian", "--net", "none", "--timeout", BOOT_TIMEOUT]);
    assert_eq!(replaced["outcome"], "replaced", "{replaced}");
    let why = replaced["replaced_because"].as_str().unwrap_or_default();
    assert!(
        why.contains("its disk was altered")
            && why.contains(&format!("backed by `{}`", backing_fifo.display())),
        "{replaced}"
    );
    assert_eq!(backing_name(&dir.join("disk.qcow2")), template_image.display().to_string());
    assert_eq!(atoll.sandbox_dirs(), sandboxes, "its sandbox is gone");
    assert_eq!(watch.take(), Vec::<PathBuf>::new(), "template snapshot: a file its disk named was opened");

    // MCP's sandbox_create on the same: it boots in full and saves a new template
    // snapshot, with a disk backed by the template's image.
    put(&rebased_to_fifo);
    let mut mcp = McpStdio::start(atoll.command(&["mcp"]));
    let reply = mcp.call_tool(
        2,
        "sandbox_create",
        serde_json::json!({"template": "debian", "network": "none", "name": "m", "boot_timeout_s": 240}),
    );
    drop(mcp);
    let result = &reply["result"];
    assert_ne!(result["isError"], true, "{reply}");
    assert_eq!(result["structuredContent"]["started_from"], "boot", "{reply}");
    assert_eq!(watch.take(), Vec::<PathBuf>::new(), "MCP: a file its disk named was opened");
    assert_eq!(backing_name(&dir.join("disk.qcow2")), template_image.display().to_string());
    // The next create restores that one: a guest of its own, nothing of the source's disk.
    let t = atoll.json(&[
        "create",
        "--template",
        "debian",
        "--net",
        "none",
        "--name",
        "t",
        "--timeout",
        BOOT_TIMEOUT,
    ]);
    assert_eq!(t["started_from"], "template snapshot", "{t}");
    assert_eq!(atoll.sh("t", "hostname; cat /root/on-disk 2>/dev/null || echo none"), "t\nnone\n");
    assert_eq!(watch.take(), Vec::<PathBuf>::new());
    atoll.json(&["kill", "m", "t"]);
}
