//! `atoll template build --dockerfile`: a template from a Dockerfile whose FROM is an
//! image pushed to a real registry (Debian's `docker-registry` on loopback) and whose
//! RUN steps run in a build VM. Every supported instruction is used once; the result
//! boots and is checked through `atoll exec`. Bad input: an unknown instruction and a
//! COPY leaving the context fail before anything boots; a failing RUN (FROM the
//! template just built) ends with its exit code, naming the step, leaving no template,
//! no base and no VM. The base image's second layer is zstd-compressed. Three boots and
//! a template snapshot in all: two build VMs, the snapshot (after the ready check) and
//! the check restoring it.

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

#[test]
fn vm_template_from_a_dockerfile_runs_every_step_in_a_build_vm() {
    let data = scratch_data_dir();
    let work = tempfile::tempdir().unwrap();
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
    let layout = work.path().join("layout");
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
