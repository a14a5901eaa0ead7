//! Attacks on the qcow2 headers atoll hands to QEMU, through the `atoll` binary: a
//! snapshot's `disk.qcow2` and a parked sandbox's overlay, rewritten with `qemu-img` (or
//! by hand where `qemu-img` will not write such a header) to make QEMU open another
//! file. The files they name are FIFOs watched by [`OpenWatch`]: an open for reading,
//! by anyone, is seen.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use atoll_tests::processes_mentioning;
use atoll_tests::vm::{Atoll, text, wait_until};

pub(crate) mod as_user;
pub(crate) mod template_snap;

/// Runs `qemu-img ARGS`, asserting that it succeeds.
pub(crate) fn qemu_img(args: &[&str]) {
    let out = std::process::Command::new("qemu-img").args(args).output().expect("qemu-img");
    assert!(out.status.success(), "qemu-img {args:?}: {}", text(&out.stderr));
}

/// The backing file name in `disk`'s header.
pub(crate) fn backing_name(disk: &Path) -> String {
    let bytes = std::fs::read(disk).unwrap();
    let offset = usize::try_from(u64::from_be_bytes(bytes[8..16].try_into().unwrap())).unwrap();
    let len = u32::from_be_bytes(bytes[16..20].try_into().unwrap()) as usize;
    String::from_utf8(bytes[offset..offset + len].to_vec()).unwrap()
}

/// Makes a FIFO at `path` that anyone may open (QEMU's user too).
pub(crate) fn fifo(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    rustix::fs::mknodat(rustix::fs::CWD, path, rustix::fs::FileType::Fifo, 0o666.into(), 0).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).unwrap();
}

/// Writes at `image` a qcow2 image backed by `base` (raw) whose guest data lives in the
/// external data file `data`, and leaves a FIFO at `data`. qemu-img writes such an image
/// only as it creates one (it opens the data file then); the FIFO takes the data file's
/// place afterwards.
pub(crate) fn image_with_data_file(base: &Path, data: &Path, image: &Path) {
    qemu_img(&[
        "create",
        "-q",
        "-f",
        "qcow2",
        "-o",
        &format!("data_file={}", data.display()),
        "-F",
        "raw",
        "-b",
        &base.display().to_string(),
        &image.display().to_string(),
    ]);
    std::fs::remove_file(data).unwrap();
    fifo(data);
}

/// Starts an [`OpenWatch`] on `fifos` and shows it can fail: a reader of each is seen.
pub(crate) fn watch_proven(fifos: &[PathBuf]) -> OpenWatch {
    let watch = OpenWatch::start(fifos.to_vec());
    for f in fifos {
        let reader = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(f).unwrap();
        wait_until("the watch to see a reader", Duration::from_secs(10), || watch.take().contains(f));
        drop(reader);
    }
    std::thread::sleep(Duration::from_millis(20));
    watch.take();
    watch
}

/// Watches FIFOs for a reader: every 2 ms it opens each for writing without blocking,
/// which succeeds only while some process has it open (or is opening it) for reading.
pub(crate) struct OpenWatch {
    stop: Arc<AtomicBool>,
    opened: Arc<std::sync::Mutex<Vec<PathBuf>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OpenWatch {
    pub(crate) fn start(fifos: Vec<PathBuf>) -> OpenWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let opened = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (s, o) = (stop.clone(), opened.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                for f in &fifos {
                    let w = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(f);
                    if w.is_ok() {
                        o.lock().unwrap().push(f.clone());
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        OpenWatch { stop, opened, thread: Some(thread) }
    }

    /// The FIFOs seen opened so far (and forgets them).
    pub(crate) fn take(&self) -> Vec<PathBuf> {
        std::mem::take(&mut *self.opened.lock().unwrap())
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A relative path from directory `from` to absolute `to`.
fn relative(from: &Path, to: &Path) -> String {
    let ups = from.components().count() - 1;
    format!("{}{}", "../".repeat(ups), to.strip_prefix("/").unwrap().display())
}

/// Writes a u64 big-endian into `disk` at `at`.
fn poke_u64(disk: &Path, at: u64, value: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(disk).unwrap();
    f.write_all_at(&value.to_be_bytes(), at).unwrap();
}

/// Snapshot `snap` (a disk template's, forked before) altered every way below is
/// refused by `create --from` and by `snapshot restore` into `victim` (running, in
/// directory `victim_dir`), each saying the snapshot was altered and what to do, before
/// anything starts: no sandbox directory or process is left, the victim runs on
/// untouched, and no file the header named is opened. The FIFOs named lie in the
/// victim's `vm/`, which the QEMU of a restore into it sees and may open. Then the
/// unaltered snapshot forks again (the positive control).
pub(crate) fn altered_snapshot_disks_are_refused(atoll: &Atoll, snap: &str, victim: &str, victim_dir: &Path) {
    let disk = atoll.state_dir().join(".snapshots").join(snap).join("disk.qcow2");
    let template_image = PathBuf::from(backing_name(&disk));
    assert!(template_image.is_absolute() && template_image.is_file(), "{}", template_image.display());
    let lure = tempfile::tempdir().unwrap();
    let l = |n: &str| lure.path().join(n);
    let original = l("original.qcow2");
    std::fs::copy(&disk, &original).unwrap();
    let (backing_fifo, data_fifo) = (victim_dir.join("vm/backing.fifo"), victim_dir.join("vm/data.fifo"));
    fifo(&backing_fifo);
    let with_data_file = l("with-data-file.qcow2");
    let tpl = template_image.display().to_string();
    image_with_data_file(&template_image, &data_fifo, &with_data_file);
    let link = l("template-link.ext4");
    std::os::unix::fs::symlink(&template_image, &link).unwrap();

    let watch = watch_proven(&[backing_fifo.clone(), data_fifo.clone()]);

    let rebase = |backing: &str, format: &str| {
        let (d, b, f) = (disk.display().to_string(), backing.to_string(), format.to_string());
        move || qemu_img(&["rebase", "-u", "-F", &f, "-b", &b, &d])
    };
    let relative_tpl = relative(disk.parent().unwrap(), &template_image);
    let link_name = link.display().to_string();
    let fifo_name = backing_fifo.display().to_string();
    type Alter<'a> = (&'a str, Box<dyn Fn() + 'a>, String);
    let cases: Vec<Alter> = vec![
        ("/etc/shadow", Box::new(rebase("/etc/shadow", "raw")), "backed by `/etc/shadow`".into()),
        ("a FIFO", Box::new(rebase(&fifo_name, "raw")), format!("backed by `{fifo_name}`")),
        (
            "an external data file",
            Box::new(|| std::fs::copy(&with_data_file, &disk).map(drop).unwrap()),
            "external data file".into(),
        ),
        (
            "a link to the template's image",
            Box::new(rebase(&link_name, "raw")),
            format!("backed by `{link_name}`"),
        ),
        (
            "a relative path to it",
            Box::new(rebase(&relative_tpl, "raw")),
            format!("backed by `{relative_tpl}`"),
        ),
        ("the template's image read as qcow2", Box::new(rebase(&tpl, "qcow2")), "read as `qcow2`".into()),
        (
            "a backing name past the header",
            Box::new(|| poke_u64(&disk, 8, 1 << 20)),
            "backing file name out of range".into(),
        ),
        (
            "a truncated header",
            Box::new(|| std::fs::write(&disk, &std::fs::read(&original).unwrap()[..40]).unwrap()),
            "short header".into(),
        ),
    ];

    let victim_qemu = atoll.json(&["inspect", victim])["qemu_pid"].clone();
    let victim_disk = atoll.sh(victim, "cat /root/on-disk");
    let dirs = atoll.sandbox_dirs();
    let running = processes_mentioning(atoll.state_dir()).len();
    for (what, alter, said) in &cases {
        std::fs::copy(&original, &disk).unwrap();
        alter();
        let fork = atoll.fails(&["create", "--from", snap, "--name", "evil", "--timeout", "240s"]);
        let restore = atoll.fails(&["snapshot", "restore", victim, snap]);
        assert_eq!(watch.take(), Vec::<PathBuf>::new(), "{what}: the file the header named was opened");
        for err in [fork, restore] {
            assert!(
                err.contains(&format!("snapshot `{snap}` was altered"))
                    && err.contains(&format!("atoll snapshot rm {snap}"))
                    && err.contains(said.as_str()),
                "{what}: {err}"
            );
        }
        assert_eq!(atoll.sandbox_dirs(), dirs, "{what}: a refused fork left a sandbox directory");
        assert!(atoll.state_of("evil").is_none(), "{what}");
        assert_eq!(processes_mentioning(atoll.state_dir()).len(), running, "{what}: a process was left");
        assert_eq!(
            atoll.json(&["inspect", victim])["qemu_pid"],
            victim_qemu,
            "{what}: the victim was stopped"
        );
    }
    assert_eq!(atoll.sh(victim, "cat /root/on-disk"), victim_disk, "the victim's disk changed");

    // Unaltered, it forks.
    std::fs::copy(&original, &disk).unwrap();
    atoll.json(&["create", "--from", snap, "--name", "good", "--timeout", "240s"]);
    assert_eq!(atoll.sh("good", "cat /root/on-disk"), "before\n");
    atoll.json(&["kill", "good"]);
    assert_eq!(watch.take(), Vec::<PathBuf>::new());
    drop(watch);
    for f in [&backing_fifo, &data_fifo] {
        std::fs::remove_file(f).unwrap();
    }
}

/// A parked sandbox's overlay, rewritten while it is parked (as its taken-over QEMU could
/// have before), is refused by `resume` and by a command that would bring it back: it
/// stays parked with nothing started, and the FIFO named (in its own `vm/`) is not
/// opened. With its header put back, it resumes.
pub(crate) fn altered_parked_disk_is_refused(atoll: &Atoll, name: &str, dir: &Path) {
    let overlay = dir.join("vm/rootfs.qcow2");
    // In its own `vm/`: the QEMU that would resume it sees it there.
    let fifo_path = dir.join("vm/backing.fifo");
    fifo(&fifo_path);
    let watch = OpenWatch::start(vec![fifo_path.clone()]);
    let reader =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&fifo_path).unwrap();
    wait_until("the watch to see a reader", Duration::from_secs(10), || watch.take().contains(&fifo_path));
    drop(reader);
    std::thread::sleep(Duration::from_millis(20));
    watch.take();

    assert_eq!(atoll.json(&["pause", "--to-disk", name])["state"], "parked");
    let template_image = backing_name(&overlay);
    let o = overlay.display().to_string();
    qemu_img(&["rebase", "-u", "-F", "raw", "-b", &fifo_path.display().to_string(), &o]);
    let resume = atoll.fails(&["resume", name]);
    let exec = text(&atoll.run(&["-s", name, "exec", "--", "true"]).stderr);
    assert_eq!(watch.take(), Vec::<PathBuf>::new(), "the file the overlay named was opened");
    for err in [resume, exec] {
        assert!(
            err.contains(&format!("the disk of parked sandbox `{name}` was altered"))
                && err.contains("stays parked")
                && err.contains(&format!("atoll kill {name}"))
                && err.contains(&format!("backed by `{}`", fifo_path.display())),
            "{err}"
        );
    }
    assert_eq!(atoll.state_of(name).as_deref(), Some("parked"));
    assert!(processes_mentioning(dir).is_empty(), "{:?}", processes_mentioning(dir));

    qemu_img(&["rebase", "-u", "-F", "raw", "-b", &template_image, &o]);
    assert_eq!(atoll.json(&["resume", name])["sandbox"]["state"], "running");
    assert_eq!(watch.take(), Vec::<PathBuf>::new());
    drop(watch);
    std::fs::remove_file(&fifo_path).unwrap();
}

/// A running sandbox's overlay whose header its QEMU rewrote (done here from the host,
/// bytes in place, as `qemu-img` will not touch an image in use) is not saved as a
/// snapshot: the save is refused saying the sandbox's disk was altered, no snapshot (nor
/// its staging) is left, and the sandbox runs on.
pub(crate) fn altered_running_disk_is_not_saved(atoll: &Atoll, name: &str, dir: &Path) {
    use std::os::unix::fs::FileExt;
    let overlay = dir.join("vm/rootfs.qcow2");
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&overlay).unwrap();
    let mut header = vec![0u8; 4096];
    f.read_exact_at(&mut header, 0).unwrap();
    let offset = u64::from_be_bytes(header[8..16].try_into().unwrap());
    let evil = dir.join("vm/backing.fifo").display().to_string();
    f.write_all_at(evil.as_bytes(), offset).unwrap();
    f.write_all_at(&u32::try_from(evil.len()).unwrap().to_be_bytes(), 16).unwrap();
    let snaps = atoll.state_dir().join(".snapshots");
    let before: Vec<_> = std::fs::read_dir(&snaps).unwrap().flatten().map(|e| e.file_name()).collect();

    let err = atoll.fails(&["snapshot", "create", name, "--name", "from-altered"]);
    assert!(
        err.contains(&format!("the disk of sandbox `{name}` was altered"))
            && err.contains(&format!("backed by `{evil}`"))
            && err.contains("no snapshot was saved"),
        "{err}"
    );
    let after: Vec<_> = std::fs::read_dir(&snaps).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(after, before, "a refused save left something in .snapshots");
    assert_eq!(atoll.state_of(name).as_deref(), Some("running"));
    assert_eq!(atoll.sh(name, "echo up"), "up\n");
    f.write_all_at(&header, 0).unwrap();
}
