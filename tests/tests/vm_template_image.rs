//! `atoll template build --image`: a template from an OCI image in a real registry
//! (Debian's `docker-registry`, the CNCF distribution registry, started here on
//! loopback), pushed there with `skopeo` from an OCI layout this test writes: two
//! layers, the second deleting a file (a whiteout) and replacing a directory's contents
//! (an opaque directory), and a config with Env and WorkingDir. One VM boots from it.
//! Hostile layers (`../`, a write through a symlink) are refused with nothing left.

mod image_util;

use std::process::Command;

use atoll_tests::vm::{Atoll, text};
use image_util::{Entry, Registry, atoll, entries_of, layer, oci_layout, scratch_data_dir};

#[test]
fn vm_template_from_a_registry_image_applies_layers_and_config() {
    let data = scratch_data_dir();
    let work = tempfile::tempdir().unwrap();
    let busybox = std::fs::read("/bin/busybox").expect("busybox-static is installed (rootfs/setup.sh)");

    // The image: a busybox root, then a layer that deletes /etc/gone and makes /opq opaque.
    let mut base = vec![Entry::Dir("bin/"), Entry::File("bin/busybox", &busybox, 0o755)];
    let applets = ["sh", "cat", "ls", "pwd", "env", "test", "id"];
    for a in &applets {
        base.push(Entry::Link(Box::leak(format!("bin/{a}").into_boxed_str()), "busybox"));
    }
    base.extend([
        Entry::Dir("etc/"),
        Entry::File("etc/gone", b"lower\n", 0o644),
        Entry::File("etc/keep", b"kept\n", 0o644),
        Entry::File("etc/passwd", b"root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/app:/bin/sh\n", 0o644),
        Entry::File("etc/group", b"root:x:0:\napp:x:1000:\n", 0o644),
        Entry::Dir("opq/"),
        Entry::File("opq/lower", b"lower\n", 0o644),
        Entry::Dir("opq/sub/"),
        Entry::File("opq/sub/deep", b"lower\n", 0o644),
    ]);
    let upper = [
        Entry::File("etc/.wh.gone", b"", 0o644),
        Entry::Dir("opq/"),
        Entry::File("opq/upper", b"upper\n", 0o644),
        Entry::File("opq/.wh..wh..opq", b"", 0o644),
    ];
    let layout = work.path().join("layout");
    oci_layout(
        &layout,
        "1",
        &[layer(&base), layer(&upper)],
        &["PATH=/bin", "GREETING=hello from the image"],
        "/app/work",
        "app:app",
    );

    let registry = Registry::start();
    let image = format!("127.0.0.1:{}/test/img:1", registry.port);
    let push = Command::new("skopeo")
        .args(["copy", "--quiet", "--dest-tls-verify=false"])
        .arg(format!("oci:{}:1", layout.display()))
        .arg(format!("docker://{image}"))
        .output()
        .expect("skopeo is installed (rootfs/setup.sh)");
    assert!(push.status.success(), "skopeo push: {}", text(&push.stderr));

    // A plain-HTTP registry is refused unless the user says it is trusted.
    let out = atoll(data.path(), &["template", "build", "--image", &image, "--name", "t0", "--no-snapshot"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("plain HTTP") && err.contains("--insecure-registry"), "{err}");
    assert!(!data.path().join("templates/t0").exists());

    // Hostile layers: `../../x`, and a write through a symlink to a host directory.
    let target = work.path().join("outside");
    std::fs::create_dir(&target).unwrap();
    let through = format!("{}", target.display());
    let evils: [(&str, Vec<u8>); 2] = [
        ("dotdot", layer(&[Entry::Dir("etc/"), Entry::RawName(b"../../x")])),
        ("symlink", layer(&[Entry::Link("esc", &through), Entry::File("esc/pwned", b"x", 0o644)])),
    ];
    for (name, evil) in evils {
        let dir = work.path().join(name);
        oci_layout(&dir, "1", &[layer(&base[..2]), evil], &[], "/", "");
        let reference = format!("oci:{}:1", dir.display());
        let out = atoll(
            data.path(),
            &["template", "build", "--image", &reference, "--name", name, "--no-snapshot"],
        );
        assert!(!out.status.success(), "{name} was built");
        let err = text(&out.stderr);
        assert!(err.contains("hostile entry"), "{name}: {err}");
        assert!(
            entries_of(&data.path().join("templates")).is_empty(),
            "{name} left {:?}",
            entries_of(&data.path().join("templates"))
        );
        assert!(
            !data.path().join("x").exists()
                && !data.path().join("templates/x").exists()
                && !work.path().join("x").exists()
        );
        assert!(entries_of(&target).is_empty(), "{name} wrote through the symlink");
    }

    // The real build, from the registry.
    let out = atoll(
        data.path(),
        &[
            "--json",
            "template",
            "build",
            "--image",
            &image,
            "--insecure-registry",
            "--name",
            "t1",
            "--no-snapshot",
        ],
    );
    assert!(out.status.success(), "build: {}", text(&out.stderr));
    let built: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let defaults = &built["template"]["defaults"];
    assert_eq!(defaults["cwd"], "/app/work", "{built}");
    assert_eq!(defaults["env"]["GREETING"], "hello from the image", "{built}");
    assert_eq!(defaults["user"], "app", "`User: app:app` keeps the name: {built}");
    let from_image = built["template"]["from_image"].as_str().unwrap().to_owned();
    let digest = from_image.rsplit_once('@').unwrap().1.to_owned();
    assert!(digest.starts_with("sha256:"), "{from_image}");
    // The layers are in the content-addressed cache; a build by digest reuses them.
    let blobs = data.path().join("images/blobs/sha256");
    let cached = entries_of(&blobs);
    assert!(cached.len() >= 4, "manifest, config and two layers cached: {cached:?}");
    let by_digest = format!("127.0.0.1:{}/test/img@{digest}", registry.port);
    let out = atoll(
        data.path(),
        &["template", "build", "--image", &by_digest, "--insecure-registry", "--name", "t2", "--no-snapshot"],
    );
    assert!(out.status.success(), "build by digest: {}", text(&out.stderr));
    assert_eq!(entries_of(&blobs), cached, "nothing new was fetched");
    drop(registry);
    // A `docker save` tarball (skopeo writes one from the layout): its layers are plain tar.
    let archive = work.path().join("saved.tar");
    let save = Command::new("skopeo")
        .args(["copy", "--quiet"])
        .arg(format!("oci:{}:1", layout.display()))
        .arg(format!("docker-archive:{}:test/img:1", archive.display()))
        .output()
        .unwrap();
    assert!(save.status.success(), "skopeo save: {}", text(&save.stderr));
    let from_archive = format!("docker-archive:{}", archive.display());
    let out = atoll(
        data.path(),
        &["--json", "template", "build", "--image", &from_archive, "--name", "t3", "--no-snapshot"],
    );
    assert!(out.status.success(), "build from docker-archive: {}", text(&out.stderr));
    let built: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(built["template"]["defaults"]["cwd"], "/app/work", "{built}");
    let ls = atoll(data.path(), &["--json", "image", "ls"]);
    assert!(ls.status.success(), "{}", text(&ls.stderr));
    let ls: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    let refs: Vec<&str> =
        ls["images"].as_array().unwrap().iter().map(|i| i["reference"].as_str().unwrap()).collect();
    assert!(refs.contains(&image.as_str()) && refs.contains(&by_digest.as_str()), "{ls}");
    assert!(ls["total_bytes"].as_u64().unwrap() > busybox.len() as u64 / 3, "{ls}");
    let prune = atoll(data.path(), &["image", "prune"]);
    assert!(prune.status.success(), "{}", text(&prune.stderr));
    assert!(entries_of(&blobs).is_empty(), "prune empties the cache");

    // One boot: the layers' result and the config's defaults, through `atoll exec`.
    let a = Atoll::with_data_dir(data.path());
    a.create_with("img", &["--template", "t1"]);
    assert_eq!(a.sh("img", "test ! -e /etc/gone && cat /etc/keep"), "kept\n");
    assert_eq!(
        a.sh("img", "ls -a /opq"),
        ".\n..\nupper\n",
        "the opaque dir holds only the upper layer's files"
    );
    let etc = a.sh("img", "ls -a /etc");
    assert!(etc.contains("keep") && !etc.contains("gone") && !etc.contains(".wh."), "{etc}");
    assert_eq!(
        a.sh("img", "pwd; echo $GREETING; echo $PATH; id -u"),
        "/app/work\nhello from the image\n/bin\n1000\n"
    );
    // A call's own cwd and env win over the image's.
    let out = a.run(&[
        "-s",
        "img",
        "exec",
        "--cwd",
        "/etc",
        "-e",
        "GREETING=mine",
        "--",
        "sh",
        "-c",
        "pwd; echo $GREETING",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "/etc\nmine\n");
    let out = a.run(&["-s", "img", "run", "--", "sh", "-c", "pwd; echo $GREETING"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "/app/work\nhello from the image\n", "a job gets the image's defaults too");
}
