//! `atoll template build --image`: a template from an OCI image in a real registry
//! (Debian's `docker-registry`, the CNCF distribution registry, started here on
//! loopback), pushed there with `skopeo` from an OCI layout this test writes: two
//! layers, the second deleting a file (a whiteout) and replacing a directory's contents
//! (an opaque directory), and a config with Env and WorkingDir. One VM boots from it.
//! Hostile layers (`../`, a write through a symlink) are refused with nothing left.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use atoll_tests::vm::{Atoll, text, wait_until};
use atoll_tests::{data_dir, workspace_bin};
use sha2::{Digest, Sha256};

/// One entry of a test layer.
enum Entry<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8], u32),
    Link(&'a str, &'a str),
    /// A file whose name is written into the header as it is (no checks), as a
    /// hostile image would.
    RawName(&'a [u8]),
}

/// A gzip'd tar layer of `entries`.
fn layer(entries: &[Entry<'_>]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mtime(1_700_000_000);
        h.set_uid(0);
        h.set_gid(0);
        match e {
            Entry::Dir(p) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                tar.append_data(&mut h, p, std::io::empty()).unwrap();
            }
            Entry::File(p, data, mode) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(*mode);
                h.set_size(data.len() as u64);
                tar.append_data(&mut h, p, *data).unwrap();
            }
            Entry::Link(p, target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                tar.append_link(&mut h, p, target).unwrap();
            }
            Entry::RawName(name) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(0o644);
                h.set_size(6);
                h.as_old_mut().name[..name.len()].copy_from_slice(name);
                h.set_cksum();
                tar.append(&h, &b"pwned\n"[..]).unwrap();
            }
        }
    }
    tar.into_inner().unwrap().finish().unwrap()
}

/// Writes `bytes` as a blob of the OCI layout `dir`; returns its descriptor.
fn blob(dir: &Path, media_type: &str, bytes: &[u8]) -> serde_json::Value {
    let hex: String = Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::write(blobs.join(&hex), bytes).unwrap();
    serde_json::json!({ "mediaType": media_type, "digest": format!("sha256:{hex}"), "size": bytes.len() })
}

/// An OCI layout at `dir` holding one image tagged `tag`: `layers` bottom first, with
/// `env` and `workdir` in its config.
fn oci_layout(dir: &Path, tag: &str, layers: &[Vec<u8>], env: &[&str], workdir: &str, user: &str) {
    const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
    let mut descs = Vec::new();
    let mut diff_ids = Vec::new();
    for l in layers {
        let mut plain = Vec::new();
        std::io::copy(&mut flate2::read::GzDecoder::new(&l[..]), &mut plain).unwrap();
        let hex: String = Sha256::digest(&plain).iter().map(|b| format!("{b:02x}")).collect();
        diff_ids.push(format!("sha256:{hex}"));
        descs.push(blob(dir, LAYER, l));
    }
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": { "Env": env, "WorkingDir": workdir, "User": user },
        "rootfs": { "type": "layers", "diff_ids": diff_ids },
    });
    let config = blob(dir, "application/vnd.oci.image.config.v1+json", config.to_string().as_bytes());
    let manifest = serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config, "layers": descs,
    });
    let mut manifest =
        blob(dir, "application/vnd.oci.image.manifest.v1+json", manifest.to_string().as_bytes());
    manifest["annotations"] = serde_json::json!({ "org.opencontainers.image.ref.name": tag });
    let index = serde_json::json!({ "schemaVersion": 2, "manifests": [manifest] });
    std::fs::write(dir.join("index.json"), index.to_string()).unwrap();
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
}

/// `docker-registry` on 127.0.0.1, storing in a temp dir; killed on drop.
struct Registry {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Registry {
    fn start() -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = dir.path().join("config.yml");
        let storage = dir.path().join("storage");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: 127.0.0.1:{port}\n",
                storage.display()
            ),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry is installed (rootfs/setup.sh --with-test-tools)");
        wait_until("the registry to listen", Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Registry { child, port, _dir: dir }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A data dir of its own sharing the real kernel.
fn scratch_data_dir() -> tempfile::TempDir {
    let kernel = data_dir().join("kernel/current");
    assert!(kernel.join("vmlinux").is_file(), "no kernel at {}; run rootfs/setup.sh", kernel.display());
    let data = tempfile::Builder::new().prefix("atoll-img-").tempdir_in("/tmp").unwrap();
    std::fs::create_dir_all(data.path().join("kernel")).unwrap();
    std::os::unix::fs::symlink(kernel.canonicalize().unwrap(), data.path().join("kernel/current")).unwrap();
    data
}

fn atoll(data: &Path, args: &[&str]) -> std::process::Output {
    Command::new(workspace_bin("atoll"))
        .args(args)
        .env("ATOLL_DATA_DIR", data)
        .env("ATOLL_STATE_DIR", data.join("state"))
        .env_remove("ATOLL_AGENT")
        .env_remove("ATOLL_SANDBOX")
        .stdin(Stdio::null())
        .output()
        .expect("run atoll")
}

fn entries_of(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

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
