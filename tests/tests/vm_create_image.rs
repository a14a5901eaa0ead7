//! `atoll create --image REF`: the image's template is built on first use and reused
//! (keyed by the manifest digest), from a real `docker-registry` on loopback. Bad input
//! first, each through the `atoll` binary: a wrong password (TLS + htpasswd registry),
//! an unknown tag, a registry that is down, a blob whose bytes in the registry's storage
//! no longer match its digest, a download cut short, a layer with `../`; each a clear
//! error, with no template, no sandbox, nothing unverified in the image cache.

mod image_util;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;

use atoll_tests::vm::{Atoll, text};
use image_util::{Entry, Registry, entries_of, layer, oci_layout, scratch_data_dir};
use sha2::{Digest, Sha256};

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// `skopeo copy` of the layout's tag `1` to `dest`, with extra skopeo args.
fn push(layout: &Path, dest: &str, extra: &[&str]) {
    let out = Command::new("skopeo")
        .args(["copy", "--quiet", "--dest-tls-verify=false"])
        .args(extra)
        .arg(format!("oci:{}:1", layout.display()))
        .arg(format!("docker://{dest}"))
        .output()
        .expect("skopeo is installed (rootfs/setup.sh)");
    assert!(out.status.success(), "skopeo push {dest}: {}", text(&out.stderr));
}

/// Nothing was left by a failed `create --image`: no template (not even a staging
/// directory), no sandbox, no temporary layout, and every cached blob matches its name.
fn assert_nothing_left(a: &Atoll, data: &Path, what: &str) {
    assert!(
        entries_of(&data.join("templates")).is_empty(),
        "{what} left templates: {:?}",
        entries_of(&data.join("templates"))
    );
    assert!(a.sandbox_dirs().is_empty(), "{what} left a sandbox: {:?}", a.sandbox_dirs());
    assert!(
        entries_of(&data.join("images/tmp")).is_empty(),
        "{what} left {:?}",
        entries_of(&data.join("images/tmp"))
    );
    let blobs = data.join("images/blobs/sha256");
    for name in entries_of(&blobs) {
        let bytes = std::fs::read(blobs.join(&name)).unwrap();
        assert_eq!(hex(&bytes), name, "{what} left a blob that does not match its digest");
    }
    for name in entries_of(&data.join("images/blobs")) {
        assert_eq!(name, "sha256", "{what} left {name} in the blob directory");
    }
}

/// A TCP proxy to `port` that passes at most `limit` bytes back on each connection and
/// then closes it: a download cut short.
fn cutting_proxy(port: u16, limit: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let me = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(upstream) = TcpStream::connect(("127.0.0.1", port)) else { continue };
            let (mut c_read, mut u_write) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c_read, &mut u_write);
            });
            std::thread::spawn(move || {
                let (mut client, mut upstream) = (client, upstream);
                let mut sent = 0;
                let mut buf = [0u8; 4096];
                while sent < limit {
                    let Ok(n) = upstream.read(&mut buf) else { break };
                    let n = n.min(limit - sent);
                    if n == 0 || client.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    sent += n;
                }
                let _ = client.shutdown(std::net::Shutdown::Both);
                let _ = upstream.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    me
}

#[test]
fn vm_create_from_an_image_builds_once_and_refuses_bad_input_leaving_nothing() {
    let data = scratch_data_dir();
    let work = tempfile::tempdir().unwrap();
    let a = Atoll::with_data_dir(data.path());
    let busybox = std::fs::read("/bin/busybox").expect("busybox-static is installed (rootfs/setup.sh)");
    let mut base = vec![Entry::Dir("bin/"), Entry::File("bin/busybox", &busybox, 0o755)];
    for applet in ["sh", "cat"] {
        base.push(Entry::Link(Box::leak(format!("bin/{applet}").into_boxed_str()), "busybox"));
    }
    base.extend([Entry::Dir("etc/"), Entry::File("etc/which", b"one\n", 0o644)]);
    let base_layer = layer(&base);
    let layout = work.path().join("layout");
    oci_layout(&layout, "1", std::slice::from_ref(&base_layer), &["PATH=/bin"], "/", "");

    let registry = Registry::start();
    let image = format!("127.0.0.1:{}/test/img:1", registry.port);
    push(&layout, &image, &[]);
    let create = |reference: &str, extra: &[&str]| {
        let mut args = vec!["create", "--timeout", "600s", "--image", reference];
        args.extend_from_slice(extra);
        a.run(&args)
    };

    // An unknown tag.
    let unknown = format!("127.0.0.1:{}/test/img:nope", registry.port);
    let out = create(&unknown, &["--insecure-registry"]);
    let err = text(&out.stderr);
    assert!(!out.status.success() && err.contains("could not fetch") && err.contains("nope"), "{err}");
    assert!(err.contains("manifest unknown") || err.contains("not found"), "names what is missing: {err}");
    assert_nothing_left(&a, data.path(), "an unknown tag");

    // A registry that is down.
    let free = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let down = format!("127.0.0.1:{free}/test/img:1");
    let out = create(&down, &["--insecure-registry"]);
    let err = text(&out.stderr);
    assert!(
        !out.status.success() && err.contains("could not fetch") && err.contains("connection refused"),
        "{err}"
    );
    assert_nothing_left(&a, data.path(), "a registry that is down");

    // A download cut short (after 16 KiB on each connection; the layer is bigger).
    assert!(base_layer.len() > 64 << 10, "the layer must be larger than the cut");
    let proxy = cutting_proxy(registry.port, 16 << 10);
    let cut = format!("127.0.0.1:{proxy}/test/img:1");
    let out = create(&cut, &["--insecure-registry"]);
    let err = text(&out.stderr);
    assert!(!out.status.success() && err.contains("could not fetch"), "{err}");
    assert_nothing_left(&a, data.path(), "a cut download");

    // A blob whose bytes in the registry's storage no longer match its digest (same
    // length, one byte changed in the middle).
    let tampered_layout = work.path().join("tampered");
    let other = layer(&[Entry::Dir("etc/"), Entry::File("etc/other", &busybox[..200_000], 0o644)]);
    oci_layout(&tampered_layout, "1", std::slice::from_ref(&other), &[], "/", "");
    let tampered = format!("127.0.0.1:{}/test/tampered:1", registry.port);
    push(&tampered_layout, &tampered, &[]);
    let stored = registry.blob_path(&hex(&other));
    let mut bytes = std::fs::read(&stored).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&stored, &bytes).unwrap();
    let out = create(&tampered, &["--insecure-registry"]);
    let err = text(&out.stderr);
    assert!(!out.status.success() && err.contains("could not fetch"), "{err}");
    assert!(err.to_ascii_lowercase().contains("digest"), "says the digest did not match: {err}");
    assert_nothing_left(&a, data.path(), "a tampered blob");
    assert!(!data.path().join("images/blobs/sha256").join(hex(&other)).exists());

    // A layer with `../` (an OCI layout on disk; the same bake as a registry image).
    let evil = work.path().join("evil");
    oci_layout(
        &evil,
        "1",
        &[layer(&base[..2]), layer(&[Entry::Dir("etc/"), Entry::RawName(b"../../x")])],
        &[],
        "/",
        "",
    );
    let out = create(&format!("oci:{}:1", evil.display()), &[]);
    let err = text(&out.stderr);
    assert!(!out.status.success() && err.contains("hostile entry"), "{err}");
    assert_nothing_left(&a, data.path(), "a `../` layer");
    assert!(!data.path().join("x").exists() && !work.path().join("x").exists());

    // A wrong password, against a TLS registry with an htpasswd file.
    let private = Registry::start_private("alice", "right-password");
    let private_image = format!("127.0.0.1:{}/team/img:1", private.port);
    push(&layout, &private_image, &["--dest-creds", "alice:right-password"]);
    let auth = work.path().join("config.json");
    let login = |password: &str| {
        let b64 = Command::new("sh")
            .args(["-c", "printf %s \"$1\" | base64 -w0", "sh"])
            .arg(format!("alice:{password}"))
            .output()
            .unwrap();
        let token = text(&b64.stdout);
        let doc =
            serde_json::json!({ "auths": { format!("127.0.0.1:{}", private.port): { "auth": token } } });
        std::fs::write(&auth, doc.to_string()).unwrap();
    };
    login("wrong-password");
    let auth_arg = auth.display().to_string();
    let out = create(&private_image, &["--insecure-registry", "--registry-auth", &auth_arg]);
    let err = text(&out.stderr);
    assert!(!out.status.success() && err.contains("could not fetch"), "{err}");
    assert!(
        err.to_ascii_lowercase().contains("unauthorized") || err.contains("authentication required"),
        "{err}"
    );
    assert_nothing_left(&a, data.path(), "a wrong password");
    drop(private);

    // The real one: built on first use, then reused (nothing fetched again).
    let out = create(&image, &["--insecure-registry", "--name", "first", "--json"]);
    assert!(out.status.success(), "create --image: {}", text(&out.stderr));
    let err = text(&out.stderr);
    let first: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let template = first["template"].as_str().unwrap().to_owned();
    assert!(template.starts_with("image-") && template.len() == 22, "{first}");
    assert!(err.contains(&format!("template `{template}` built")), "{err}");
    assert_eq!(a.sh("first", "cat /etc/which"), "one\n");
    let cached = entries_of(&data.path().join("images/blobs/sha256"));
    let out = create(&image, &["--insecure-registry", "--name", "second", "--json"]);
    assert!(out.status.success(), "create --image again: {}", text(&out.stderr));
    let second: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(second["template"], template.as_str(), "the same digest reuses its template");
    assert!(text(&out.stderr).contains(&format!("template `{template}` reused")), "{}", text(&out.stderr));
    assert_eq!(entries_of(&data.path().join("images/blobs/sha256")), cached, "nothing fetched again");
    assert_eq!(a.sh("second", "cat /etc/which"), "one\n");
    assert_eq!(entries_of(&data.path().join("templates")), vec![template.clone()]);

    // A template of that name not made from the image (a build under its name) is
    // never taken for it.
    let out = a.run(&["kill", "--force", "first", "second"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::remove_file(data.path().join("templates").join(&template).join("from-image")).unwrap();
    let out = create(&image, &["--insecure-registry", "--name", "third"]);
    let err = text(&out.stderr);
    assert!(!out.status.success() && err.contains("was not made by `atoll create --image`"), "{err}");
    assert!(a.sandbox_dirs().is_empty(), "no sandbox: {:?}", a.sandbox_dirs());
}

/// A tmpfs mounted over a directory for a test; unmounted on drop.
struct SmallDisk(std::path::PathBuf);

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn create_from_an_image_on_a_disk_that_fills_leaves_nothing() {
    if !rustix::process::geteuid().is_root() {
        // Making a small filesystem without root needs a loop device or FUSE; CI runs the
        // suite as root.
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let data = scratch_data_dir();
    let work = tempfile::tempdir().unwrap();
    let a = Atoll::with_data_dir(data.path());
    let busybox = std::fs::read("/bin/busybox").expect("busybox-static is installed (rootfs/setup.sh)");
    let layout = work.path().join("layout");
    let big: Vec<u8> = (0..6u32 << 20).map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()[1]).collect();
    let entries = [
        Entry::Dir("bin/"),
        Entry::File("bin/busybox", &busybox, 0o755),
        Entry::Dir("data/"),
        Entry::File("data/big", &big, 0o644),
    ];
    oci_layout(&layout, "1", &[layer(&entries)], &["PATH=/bin"], "/", "");
    // The templates directory (where the tree is staged and the disk image made) is a
    // 4 MiB tmpfs: the 6 MiB file does not fit.
    let templates = data.path().join("templates");
    std::fs::create_dir_all(&templates).unwrap();
    let mount = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
        .arg(&templates)
        .output()
        .unwrap();
    assert!(mount.status.success(), "mount: {}", text(&mount.stderr));
    let _disk = SmallDisk(templates.clone());
    let out = a.run(&["create", "--image", &format!("oci:{}:1", layout.display())]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "built on a full disk");
    eprintln!("atoll said: {err}");
    assert!(
        err.contains("No space left on device") || err.contains("no space"),
        "says the disk is full: {err}"
    );
    assert_nothing_left(&a, data.path(), "a full disk");
    let free = Command::new("df").args(["--output=used", "-B1"]).arg(&templates).output().unwrap();
    let used: u64 = text(&free.stdout).lines().nth(1).unwrap().trim().parse().unwrap();
    assert!(used < 64 << 10, "the tmpfs holds {used} bytes after the failed build");
}
