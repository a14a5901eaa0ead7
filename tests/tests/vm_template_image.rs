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

/// A tar+gzip layer whose entries carry owners, a setuid bit, a hard link and a
/// character device, as the rootless build must keep them.
fn owned_layer() -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    /// Path, type, owner (uid = gid), mode, content, hard-link target.
    type Owned<'a> = (&'a str, tar::EntryType, u64, u32, &'a [u8], Option<&'a str>);
    let entries: [Owned<'_>; 7] = [
        ("home/", tar::EntryType::Directory, 0, 0o755, b"", None),
        ("home/app/", tar::EntryType::Directory, 1000, 0o700, b"", None),
        ("home/app/f", tar::EntryType::Regular, 1000, 0o640, b"mine\n", None),
        ("home/app/hard", tar::EntryType::Link, 0, 0o644, b"", Some("home/app/f")),
        ("opt/", tar::EntryType::Directory, 0, 0o755, b"", None),
        ("opt/su", tar::EntryType::Regular, 0, 0o4755, b"x", None),
        ("opt/null", tar::EntryType::Char, 0, 0o666, b"", None),
    ];
    for (path, kind, uid, mode, data, link) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_uid(uid);
        h.set_gid(uid);
        h.set_mode(mode);
        h.set_mtime(1_700_000_000);
        h.set_size(data.len() as u64);
        if kind == tar::EntryType::Char {
            h.set_device_major(1).unwrap();
            h.set_device_minor(3).unwrap();
        }
        match link {
            Some(target) => tar.append_link(&mut h, path, target).unwrap(),
            None => tar.append_data(&mut h, path, data).unwrap(),
        }
    }
    tar.into_inner().unwrap().finish().unwrap()
}

/// Hard-links `from` to `to`, or copies it (another filesystem).
fn link_or_copy(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap();
    }
}

#[test]
fn vm_template_from_an_image_builds_without_root_keeping_owners() {
    // A data directory an ordinary user (nobody) owns, with the kernel and the agent.
    let data = tempfile::Builder::new().prefix("atoll-rootless-").tempdir_in("/tmp").unwrap();
    let kernel = atoll_tests::data_dir().join("kernel/current");
    for f in ["vmlinux", "initrd.cpio"] {
        link_or_copy(&kernel.join(f), &data.path().join("kernel/current").join(f));
    }
    let agent = std::env::var_os("ATOLL_AGENT_BIN")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_file())
        .unwrap_or_else(|| atoll_tests::data_dir().join("bin/atoll-agent"));
    std::fs::create_dir_all(data.path().join("bin")).unwrap();
    std::fs::copy(&agent, data.path().join("bin/atoll-agent")).expect("an atoll-agent to bake");
    let busybox = std::fs::read("/bin/busybox").expect("busybox-static is installed (rootfs/setup.sh)");
    let mut base = vec![Entry::Dir("bin/"), Entry::File("bin/busybox", &busybox, 0o755)];
    for a in ["sh", "stat", "cat", "id", "sync"] {
        base.push(Entry::Link(Box::leak(format!("bin/{a}").into_boxed_str()), "busybox"));
    }
    let layout = data.path().join("layout");
    oci_layout(&layout, "1", &[layer(&base), owned_layer()], &["PATH=/bin"], "/", "");
    let tree = data.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    let chown = Command::new("chown").args(["-R", "65534:65534"]).arg(data.path()).status().unwrap();
    assert!(chown.success());
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(atoll_tests::workspace_bin("atoll"))
            .args(args)
            .env("HOME", data.path())
            .env("ATOLL_DATA_DIR", data.path())
            .env("ATOLL_STATE_DIR", data.path().join("state"))
            .env("ATOLL_AGENT_BIN", data.path().join("bin/atoll-agent"))
            .env_remove("XDG_RUNTIME_DIR")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let out =
        as_nobody(&["template", "build", "--from", tree.to_str().unwrap(), "--name", "dir", "--no-snapshot"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--image and --dockerfile builds need no root"),
        "{}",
        text(&out.stderr)
    );
    let reference = format!("oci:{}:1", layout.display());
    let out = as_nobody(&["template", "build", "--image", &reference, "--name", "rl", "--no-snapshot"]);
    assert!(out.status.success(), "rootless build: {}", text(&out.stderr));
    // A Dockerfile build as nobody too: FROM the template just built, RUN in a build VM.
    let dockerfile = data.path().join("Dockerfile");
    std::fs::write(&dockerfile, "FROM rl\nRUN id -u > /opt/run-as\n").unwrap();
    let _ = Command::new("chown").args(["65534:65534"]).arg(&dockerfile).status();
    let out = as_nobody(&[
        "template",
        "build",
        "--dockerfile",
        dockerfile.to_str().unwrap(),
        "--name",
        "rl2",
        "--no-snapshot",
    ]);
    assert!(out.status.success(), "rootless Dockerfile build: {}", text(&out.stderr));
    let image = data.path().join("templates/rl/rootfs.ext4");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&image).unwrap().uid(), 65534, "built by nobody");

    let a = Atoll::with_data_dir(data.path());
    a.create_with("rl", &["--template", "rl2"]);
    assert_eq!(a.sh("rl", "cat /opt/run-as"), "0\n", "RUN runs as the guest's root");
    assert_eq!(
        a.sh("rl", "stat -c '%n %u %g %a' / /bin/busybox /sbin/atoll-agent /home/app /home/app/f /home/app/hard /opt/su"),
        "/ 0 0 755\n/bin/busybox 0 0 755\n/sbin/atoll-agent 0 0 755\n/home/app 1000 1000 700\n\
         /home/app/f 1000 1000 640\n/home/app/hard 1000 1000 640\n/opt/su 0 0 4755\n"
            .replace("\n         ", "\n")
    );
    assert_eq!(a.sh("rl", "stat -c %h /home/app/f; cat /home/app/hard"), "2\nmine\n", "one inode");
    assert_eq!(a.sh("rl", "stat -c '%F %t %T %a' /opt/null"), "character special file 1 3 666\n");
}
