//! `atoll template build --dockerfile`: a template from a Dockerfile whose FROM is an
//! image pushed to a real registry (Debian's `docker-registry` on loopback) and whose
//! RUN steps run in a build VM. Every supported instruction is used once; the result
//! boots and is checked through `atoll exec`. Bad input: an unknown instruction and a
//! COPY leaving the context fail before anything boots; a failing RUN (FROM the
//! template just built) ends with its exit code, naming the step, leaving no template,
//! no base and no VM. The base image's second layer is zstd-compressed. Three boots and
//! a template snapshot in all: two build VMs, the snapshot (after the ready check) and
//! the check restoring it. The step cache is also driven over the snapshot quota.

mod image_util;

use std::path::Path;
use std::process::Command;

use atoll_tests::vm::{Atoll, text};
use image_util::{Entry, Registry, entries_of, layer, oci_layout, scratch_data_dir, zstd_layer};

const DOCKERFILE: &str = r#"# Every instruction atoll runs.
ARG BASE
FROM ${BASE} AS app
ARG GREETING=hi
ENV APP_HOME=/srv/app \
    PATH=/bin
WORKDIR $APP_HOME
COPY hello.txt ./
COPY tree /srv/app/tree/
ADD bundle.tar /opt/bundle/
RUN echo "building with $GREETING" && echo "$GREETING from RUN" > made && cat hello.txt >> made
RUN ["/bin/sh", "-c", "id -u > /srv/app/uid-root; mkdir -p /home/app && echo owned > /home/app/f && chown -R 1000:1000 /home/app"]
USER app
RUN id -u > /home/app/uid-app
LABEL org.example.name="demo app" version=1
EXPOSE 8080 53/udp
ENTRYPOINT ["/bin/sh", "-c"]
CMD ["echo serving > /tmp/served; sleep 2; echo up > /tmp/ready-flag; exec sleep 100000"]
"#;

fn build(a: &Atoll, args: &[&str]) -> std::process::Output {
    let mut all = vec!["--json", "template", "build"];
    all.extend_from_slice(args);
    a.run(&all)
}

/// Templates left, sandboxes left.
fn leftovers(data: &Path, a: &Atoll) -> (Vec<String>, Vec<std::path::PathBuf>) {
    (entries_of(&data.join("templates")), a.sandbox_dirs())
}

/// A busybox image with a zstd second layer, pushed to a registry on loopback.
fn busybox_image(work: &Path) -> (Registry, String) {
    let busybox = std::fs::read("/bin/busybox").expect("busybox-static is installed (rootfs/setup.sh)");
    let mut base = vec![Entry::Dir("bin/"), Entry::File("bin/busybox", &busybox, 0o755)];
    for a in ["sh", "cat", "ls", "pwd", "id", "mkdir", "chown", "stat", "echo", "sync", "sleep", "test"] {
        base.push(Entry::Link(Box::leak(format!("bin/{a}").into_boxed_str()), "busybox"));
    }
    base.extend([
        Entry::Dir("etc/"),
        Entry::File("etc/passwd", b"root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n", 0o644),
        Entry::File("etc/group", b"root:x:0:\napp:x:1000:\n", 0o644),
    ]);
    let layout = work.join("layout");
    // The second layer is zstd-compressed, as `tar+zstd` layers are.
    let zstd = zstd_layer(&[Entry::Dir("etc/"), Entry::File("etc/from-zstd", b"zstd layer\n", 0o644)]);
    oci_layout(&layout, "1", &[layer(&base), zstd], &["PATH=/bin", "FROM_IMAGE=yes"], "/", "");
    let registry = Registry::start();
    let image = format!("127.0.0.1:{}/test/base:1", registry.port);
    let push = Command::new("skopeo")
        .args(["copy", "--quiet", "--dest-tls-verify=false"])
        .arg(format!("oci:{}:1", layout.display()))
        .arg(format!("docker://{image}"))
        .output()
        .expect("skopeo is installed (rootfs/setup.sh)");
    assert!(push.status.success(), "skopeo push: {}", text(&push.stderr));
    (registry, image)
}

#[test]
fn vm_template_from_a_dockerfile_runs_every_step_in_a_build_vm() {
    let data = scratch_data_dir();
    let work = tempfile::tempdir().unwrap();
    let (registry, image) = busybox_image(work.path());

    // The context: files, a directory, a tar ADD unpacks, and a secret outside it.
    let ctx = work.path().join("ctx");
    std::fs::create_dir_all(ctx.join("tree/sub")).unwrap();
    std::fs::write(ctx.join("hello.txt"), "hello\n").unwrap();
    std::fs::write(ctx.join("tree/sub/run.sh"), "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(
        ctx.join("tree/sub/run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o750),
    )
    .unwrap();
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(8);
    h.set_mode(0o600);
    h.set_cksum();
    tar.append_data(&mut h, "inner/data.txt", &b"unpacked"[..]).unwrap();
    std::fs::write(ctx.join("bundle.tar"), tar.into_inner().unwrap()).unwrap();
    std::fs::write(work.path().join("secret"), "host secret\n").unwrap();
    std::fs::write(ctx.join("Dockerfile"), DOCKERFILE).unwrap();
    let dockerfile = ctx.join("Dockerfile");
    let df = dockerfile.to_str().unwrap();
    let a = Atoll::with_data_dir(data.path());

    // Bad input first; none of it boots anything.
    let bad = ctx.join("Bad.dockerfile");
    std::fs::write(&bad, "FROM scratch-ish\nRUN true\nFROBNICATE now\n").unwrap();
    let out = build(&a, &["--dockerfile", bad.to_str().unwrap(), "--name", "bad", "--no-snapshot"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("line 3") && err.contains("unknown instruction `FROBNICATE`"), "{err}");
    std::os::unix::fs::symlink("../secret", ctx.join("link-out")).unwrap();
    for (copy, shown) in [("COPY ../secret /x", "../secret"), ("COPY link-out /x", "link-out")] {
        std::fs::write(&bad, format!("FROM {image}\n{copy}\n")).unwrap();
        let out = build(&a, &["--dockerfile", bad.to_str().unwrap(), "--name", "bad", "--no-snapshot"]);
        assert!(!out.status.success(), "{copy} was built");
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("`{shown}` is outside the build context")) && err.contains("line 2"),
            "{err}"
        );
    }
    std::fs::remove_file(ctx.join("link-out")).unwrap();
    std::fs::remove_file(&bad).unwrap();
    assert_eq!(leftovers(data.path(), &a), (vec![], vec![]));

    // The build: RUN output streams to stderr, the result to stdout. The image's
    // ENTRYPOINT+CMD is started at boot and the snapshot taken once the ready check passes.
    let base_arg = format!("BASE={image}");
    let out = build(
        &a,
        &[
            "--dockerfile",
            df,
            ctx.to_str().unwrap(),
            "--name",
            "app",
            "--insecure-registry",
            "--build-arg",
            &base_arg,
            "--build-arg",
            "GREETING=hey",
            "--start",
            "--ready-cmd",
            "test -e /tmp/ready-flag",
        ],
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "build: {err}");
    assert!(err.contains("building with hey") && err.contains("step 9/16 (line 11)"), "{err}");
    let built: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &built["template"];
    assert_eq!(t["defaults"]["cwd"], "/srv/app", "{built}");
    assert_eq!(t["defaults"]["user"], "app", "{built}");
    assert_eq!(t["defaults"]["env"]["APP_HOME"], "/srv/app", "{built}");
    assert_eq!(t["defaults"]["env"]["FROM_IMAGE"], "yes", "the image's Env carries on: {built}");
    assert!(t["defaults"]["env"].get("GREETING").is_none(), "an ARG is not kept: {built}");
    assert!(t["from_image"].as_str().unwrap().starts_with(&format!("{image}@sha256:")), "{built}");
    let img = &built["image"];
    assert_eq!(img["entrypoint"], serde_json::json!(["/bin/sh", "-c"]), "{built}");
    assert_eq!(img["start"][0], "/bin/sh", "{built}");
    assert_eq!(built["snapshot"]["outcome"], "made", "{built}");
    assert_eq!(img["labels"]["org.example.name"], "demo app", "{built}");
    assert_eq!(img["exposed_ports"], serde_json::json!(["8080/tcp", "53/udp"]), "{built}");
    assert_eq!(built["run_steps"], 3);
    assert_eq!(leftovers(data.path(), &a), (vec!["app".to_owned()], vec![]), "no base, no VM left");
    drop(registry);

    // A failing RUN, FROM the template just built: its exit code, the step named, nothing left.
    let failing = ctx.join("Failing.dockerfile");
    std::fs::write(
        &failing,
        "FROM app\nUSER root\nRUN echo partial > /partial; test ! -e /tmp/served\nRUN echo about to fail; exit 7\n",
    )
        .unwrap();
    let out = build(&a, &["--dockerfile", failing.to_str().unwrap(), "--name", "broken", "--no-snapshot"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{err}");
    assert!(
        err.contains("about to fail")
            && err.contains(
                "step 4 (Dockerfile line 4) `RUN echo about to fail; exit 7` failed: it exited with code 7"
            ),
        "{err}"
    );
    assert_eq!(leftovers(data.path(), &a), (vec!["app".to_owned()], vec![]), "no template, no VM left");

    // The template restores from its snapshot with everything in place, the service up.
    let made = a.create_with("df", &["--template", "app"]);
    assert_ne!(made["started_from"], "boot", "{made}");
    assert_eq!(a.sh("df", "cat /tmp/served /tmp/ready-flag"), "serving\nup\n");
    let jobs = a.json(&["-s", "df", "jobs"]);
    assert!(jobs.to_string().contains("sleep 100000") && jobs.to_string().contains("running"), "{jobs}");
    assert_eq!(a.sh("df", "pwd; id -u; echo $APP_HOME"), "/srv/app\n1000\n/srv/app\n");
    assert_eq!(a.sh("df", "cat made"), "hey from RUN\nhello\n");
    assert_eq!(a.sh("df", "cat /etc/from-zstd"), "zstd layer\n");
    assert_eq!(a.sh("df", "cat uid-root /home/app/uid-app"), "0\n1000\n");
    assert_eq!(
        a.sh("df", "stat -c '%a %u' tree/sub/run.sh hello.txt /home/app/f"),
        "750 0\n644 0\n644 1000\n"
    );
    assert_eq!(a.sh("df", "stat -c '%a %u' /opt/bundle/inner/data.txt"), "600 0\n");
    assert!(
        a.sh("df", "cat /opt/bundle/inner/data.txt 2>&1 || true").contains("Permission denied"),
        "USER app"
    );
    let out = a.run(&["-s", "df", "exec", "--user", "root", "--", "cat", "/opt/bundle/inner/data.txt"]);
    assert_eq!(text(&out.stdout), "unpacked", "{}", text(&out.stderr));
    assert_eq!(a.sh("df", "test ! -e /partial && ls /srv/app"), "hello.txt\nmade\ntree\nuid-root\n");
}

/// Files in the ext4 image of template `name`, read on the host (no boot): a copy of
/// the image has its journal replayed (`e2fsck -E journal_only`, as a mount would), then
/// debugfs reads each path.
fn read_in(data: &Path, name: &str, paths: &[&str]) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("rootfs.ext4");
    let src = data.join("templates").join(name).join("rootfs.ext4");
    assert!(Command::new("cp").arg("--sparse=always").arg(&src).arg(&image).status().unwrap().success());
    let fsck = Command::new("e2fsck").args(["-E", "journal_only", "-y"]).arg(&image).output().unwrap();
    assert!(fsck.status.code().is_some_and(|c| c <= 1), "e2fsck: {}", text(&fsck.stderr));
    paths
        .iter()
        .map(|path| {
            let out =
                Command::new("debugfs").arg("-R").arg(format!("cat {path}")).arg(&image).output().unwrap();
            assert!(out.status.success(), "debugfs: {}", text(&out.stderr));
            let got = text(&out.stdout);
            assert!(!got.is_empty(), "{path} is empty or missing: {}", text(&out.stderr));
            got
        })
        .collect()
}

/// The `atoll: step N/T ...` lines of a build's stderr, and whether each was cached.
fn step_lines(stderr: &str) -> Vec<(String, bool)> {
    stderr
        .lines()
        .filter(|l| l.starts_with("atoll: step "))
        .map(|l| (l.to_owned(), l.ends_with(" (cached)")))
        .collect()
}

const CACHED: &str = "ARG BASE
FROM ${BASE}
WORKDIR /w
COPY data.txt ./
RUN cat /proc/sys/kernel/random/uuid > stamp1; cat data.txt > b
RUN cat /proc/sys/kernel/random/uuid > stamp2; echo middle-1 > c
RUN cat /proc/sys/kernel/random/uuid > stamp3; cat b c > d
ENV DONE=yes
";

/// The step cache: a cold build; an unchanged rebuild takes every step from the cache
/// and boots nothing; a changed RUN in the middle reruns it and what follows; a changed
/// COPY source reruns from the COPY; a corrupt entry is detected, removed and never
/// used; `--no-cache` runs everything; `atoll image prune` empties it. Files are read
/// from the templates' images on the host (debugfs), so only the build VMs boot.
#[test]
fn vm_dockerfile_steps_are_cached_by_content_and_inputs() {
    let data = scratch_data_dir();
    let work = tempfile::tempdir().unwrap();
    let (_registry, image) = busybox_image(work.path());
    let ctx = work.path().join("ctx");
    std::fs::create_dir_all(&ctx).unwrap();
    std::fs::write(ctx.join("data.txt"), "data v1\n").unwrap();
    let df = ctx.join("Dockerfile");
    std::fs::write(&df, CACHED).unwrap();
    let a = Atoll::with_data_dir(data.path());
    let base_arg = format!("BASE={image}");
    let go = |extra: &[&str]| {
        let mut args = vec![
            "--dockerfile",
            df.to_str().unwrap(),
            "--name",
            "c",
            "--force",
            "--no-snapshot",
            "--insecure-registry",
        ];
        args.extend_from_slice(&["--build-arg", &base_arg]);
        args.extend_from_slice(extra);
        let out = build(&a, &args);
        let err = text(&out.stderr);
        assert!(out.status.success(), "build: {err}");
        let built: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(leftovers(data.path(), &a), (vec!["c".to_owned()], vec![]), "no base, no VM left: {err}");
        (built, err)
    };
    // The three RUNs' stamps, and /w/d.
    let files = || {
        let mut f = read_in(data.path(), "c", &["/w/stamp1", "/w/stamp2", "/w/stamp3", "/w/d"]);
        let d = f.pop().unwrap();
        (f, d)
    };
    let cached_flags = |err: &str| step_lines(err).into_iter().map(|(_, c)| c).collect::<Vec<_>>();

    // Cold.
    let (built, err) = go(&[]);
    assert_eq!((built["run_steps"].as_u64(), built["cached_steps"].as_u64()), (Some(3), Some(0)), "{err}");
    assert_eq!(cached_flags(&err), [false; 8], "{err}");
    let (first, d) = files();
    assert_eq!(d, "data v1\nmiddle-1\n");
    let rootfs = data.path().join("templates/c/rootfs.ext4");
    let kept = work.path().join("first.ext4");
    assert!(Command::new("cp").arg("--sparse=always").arg(&rootfs).arg(&kept).status().unwrap().success());

    // Unchanged: every step cached, no VM booted, the same image byte for byte.
    let (built, err) = go(&[]);
    assert_eq!((built["run_steps"].as_u64(), built["cached_steps"].as_u64()), (Some(0), Some(8)), "{err}");
    assert_eq!(cached_flags(&err), [true; 8], "{err}");
    assert!(!err.contains("booting the build VM") && !err.contains("baking"), "{err}");
    assert_eq!(built["template"]["defaults"]["env"]["DONE"], "yes", "{built}");
    assert_eq!(built["template"]["defaults"]["cwd"], "/w", "{built}");
    let same = Command::new("cmp").arg(&kept).arg(&rootfs).output().unwrap();
    assert!(same.status.success(), "the rebuilt image differs: {}", text(&same.stdout));
    assert_eq!(files().0, first);

    // The middle RUN changed: it and the last one rerun, the rest comes from the cache.
    std::fs::write(&df, CACHED.replace("middle-1", "middle-2")).unwrap();
    let (built, err) = go(&[]);
    assert_eq!((built["run_steps"].as_u64(), built["cached_steps"].as_u64()), (Some(2), Some(5)), "{err}");
    assert_eq!(cached_flags(&err), [true, true, true, true, true, false, false, false], "{err}");
    let (second, d) = files();
    assert_eq!(second[0], first[0]);
    assert!(second[1] != first[1] && second[2] != first[2], "{second:?} {first:?}");
    assert_eq!(d, "data v1\nmiddle-2\n");

    // A COPY source's content changed: the COPY and everything after rerun.
    std::fs::write(ctx.join("data.txt"), "data v2\n").unwrap();
    let (built, err) = go(&[]);
    assert_eq!((built["run_steps"].as_u64(), built["cached_steps"].as_u64()), (Some(3), Some(3)), "{err}");
    assert_eq!(cached_flags(&err), [true, true, true, false, false, false, false, false], "{err}");
    let (third, d) = files();
    assert!(third.iter().zip(&second).all(|(t, s)| t != s), "{third:?} {second:?}");
    assert_eq!(d, "data v2\nmiddle-2\n");

    // The newest entry (the last RUN's) corrupted in a byte ext4 never reads: detected,
    // removed, the step runs again from the entry before it.
    let steps_dir = data.path().join("images/steps");
    let newest = std::fs::read_dir(&steps_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p.join("entry.json")).unwrap().modified().unwrap())
        .unwrap();
    let entries = entries_of(&steps_dir).len();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(newest.join("rootfs.ext4")).unwrap();
        f.write_all_at(b"corrupt", 100).unwrap();
    }
    let (built, err) = go(&[]);
    assert!(err.contains("is corrupt") && err.contains("step 7 (line 7)"), "{err}");
    assert_eq!((built["run_steps"].as_u64(), built["cached_steps"].as_u64()), (Some(1), Some(6)), "{err}");
    let (fourth, d) = files();
    assert_eq!(d, "data v2\nmiddle-2\n");
    assert_eq!(fourth[..2], third[..2]);
    assert_ne!(fourth[2], third[2], "the corrupt entry was not used");
    assert_eq!(entries_of(&steps_dir).len(), entries, "the entry was made again");

    // --no-cache: every step runs.
    let (built, err) = go(&["--no-cache"]);
    assert_eq!((built["run_steps"].as_u64(), built["cached_steps"].as_u64()), (Some(3), Some(0)), "{err}");
    assert_eq!(cached_flags(&err), [false; 8], "{err}");
    let (fifth, d) = files();
    assert_eq!(d, "data v2\nmiddle-2\n");
    assert!(fifth.iter().zip(&fourth).all(|(f, s)| f != s), "{fifth:?} {fourth:?}");

    // Pruned with the image cache.
    let pruned = a.run(&["image", "prune"]);
    assert!(pruned.status.success(), "{}", text(&pruned.stderr));
    assert!(!steps_dir.exists());
}

/// What `atoll info` counts in the snapshot quota now (it prints the quotas even with no
/// sandbox to ask).
fn snapshot_used(a: &Atoll) -> u64 {
    let out = a.run(&["--json", "info"]);
    let info: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", text(&out.stdout), text(&out.stderr)));
    let q = info["quotas"].as_array().unwrap().iter().find(|q| q["key"] == "max_snapshot_disk").unwrap();
    q["used"].as_u64().unwrap()
}

/// The step cache's snapshot-quota paths through real builds: a cold build fills the
/// cache; then with `--max-snapshot-disk` just above the use, installing the cached
/// result as a new template is refused at once with the actionable message, before
/// anything is copied; and with room for the cached base but not for one more step, the
/// changed step's result is not kept ("step N was not cached: Snapshot quota reached")
/// and the build is refused the same way. Neither leaves a template, a staged copy, a
/// base, a sandbox or a new cache entry; the cache is as it was.
#[test]
fn vm_dockerfile_step_cache_holds_to_the_snapshot_quota() {
    let data = scratch_data_dir();
    let work = tempfile::tempdir().unwrap();
    let (_registry, image) = busybox_image(work.path());
    let ctx = work.path().join("ctx");
    std::fs::create_dir_all(&ctx).unwrap();
    std::fs::write(ctx.join("data.txt"), "data v1\n").unwrap();
    let df = ctx.join("Dockerfile");
    std::fs::write(&df, CACHED).unwrap();
    let a = Atoll::with_data_dir(data.path());
    let base_arg = format!("BASE={image}");
    let go = |name: &str, quota: Option<u64>| {
        let quota = quota.map(|q| q.to_string());
        let mut args: Vec<&str> = match &quota {
            Some(q) => vec!["--max-snapshot-disk", q],
            None => vec![],
        };
        args.extend_from_slice(&["--json", "template", "build", "--dockerfile", df.to_str().unwrap()]);
        args.extend_from_slice(&["--name", name, "--no-snapshot", "--insecure-registry"]);
        args.extend_from_slice(&["--build-arg", &base_arg]);
        a.run(&args)
    };

    // Cold: the cache holds the three RUNs' results.
    let out = go("c", None);
    assert!(out.status.success(), "build: {}", text(&out.stderr));
    let steps_dir = data.path().join("images/steps");
    let entries = entries_of(&steps_dir);
    assert!(entries.len() >= 3, "the three RUNs' results are not all cached: {entries:?}");
    let last_disk = |e: &str| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(steps_dir.join(e).join("rootfs.ext4")).unwrap().blocks() * 512
    };
    let need = entries.iter().map(|e| last_disk(e)).max().unwrap();
    assert!(need > 1 << 20, "a step's disk stores only {need} bytes");
    let templates = || entries_of(&data.path().join("templates"));
    let before = templates();
    let nothing_left = |what: &str| {
        assert_eq!(templates(), before, "{what} left a template or staging");
        assert_eq!(entries_of(&steps_dir), entries, "{what} changed the step cache");
        assert!(a.sandbox_dirs().is_empty(), "{what} left a sandbox");
    };

    // Every step cached, but copying the result as a new template would pass the quota.
    let used = snapshot_used(&a);
    let started = std::time::Instant::now();
    let out = go("c2", Some(used + (need / 2)));
    let err = text(&out.stderr);
    assert!(!out.status.success(), "a cached install over the quota went through: {err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "refused after {:?}", started.elapsed());
    assert!(err.contains("Snapshot quota reached") && err.contains("this save may need up to"), "{err}");
    assert!(
        err.contains("atoll image prune")
            && err.contains("atoll template rm")
            && err.contains("--max-snapshot-disk"),
        "{err}"
    );
    assert!(!err.contains("booting the build VM"), "{err}");
    nothing_left("the refused cached install");

    // The last RUN changed: the base (the second RUN's entry) fits, one more step does not.
    std::fs::write(&df, CACHED.replace("cat b c > d", "cat c b > d")).unwrap();
    let used = snapshot_used(&a);
    let out = go("c3", Some(used + need + need / 2));
    let err = text(&out.stderr);
    assert!(!out.status.success(), "a build over the quota went through: {err}");
    assert!(err.contains("step 7 was not cached: Snapshot quota reached"), "{err}");
    assert!(err.contains("Snapshot quota reached") && err.contains("atoll image prune"), "{err}");
    nothing_left("the build over the quota");

    // The refusals were the quota's: the same build without it goes through.
    let out = go("c3", None);
    assert!(out.status.success(), "build: {}", text(&out.stderr));
}
