//! The image test world shared by vm_template_image.rs and vm_template_dockerfile.rs:
//! test layers and OCI layouts written here, a real `docker-registry` on loopback, a
//! scratch data directory sharing the real kernel.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use atoll_tests::vm::wait_until;
use atoll_tests::{data_dir, workspace_bin};
use sha2::{Digest, Sha256};

/// One entry of a test layer.
pub(crate) enum Entry<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8], u32),
    Link(&'a str, &'a str),
    /// A file whose name is written into the header as it is (no checks), as a
    /// hostile image would.
    RawName(&'a [u8]),
}

/// A gzip'd tar layer of `entries`.
pub(crate) fn layer(entries: &[Entry<'_>]) -> Vec<u8> {
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
pub(crate) fn blob(dir: &Path, media_type: &str, bytes: &[u8]) -> serde_json::Value {
    let hex: String = Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::write(blobs.join(&hex), bytes).unwrap();
    serde_json::json!({ "mediaType": media_type, "digest": format!("sha256:{hex}"), "size": bytes.len() })
}

/// An OCI layout at `dir` holding one image tagged `tag`: `layers` bottom first, with
/// `env` and `workdir` in its config. A layer may be gzip or zstd.
pub(crate) fn oci_layout(dir: &Path, tag: &str, layers: &[Vec<u8>], env: &[&str], workdir: &str, user: &str) {
    const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
    let mut descs = Vec::new();
    let mut diff_ids = Vec::new();
    for l in layers {
        // gzip, or zstd (`application/vnd.oci.image.layer.v1.tar+zstd`).
        let zstd = l.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]);
        let plain = if zstd {
            zstd::stream::decode_all(&l[..]).unwrap()
        } else {
            let mut plain = Vec::new();
            std::io::copy(&mut flate2::read::GzDecoder::new(&l[..]), &mut plain).unwrap();
            plain
        };
        let hex: String = Sha256::digest(&plain).iter().map(|b| format!("{b:02x}")).collect();
        diff_ids.push(format!("sha256:{hex}"));
        descs.push(blob(dir, if zstd { "application/vnd.oci.image.layer.v1.tar+zstd" } else { LAYER }, l));
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
pub(crate) struct Registry {
    child: Child,
    /// Its port on 127.0.0.1.
    pub(crate) port: u16,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// Starts one.
    pub(crate) fn start() -> Registry {
        Registry::start_with(None)
    }

    /// Starts one over TLS (a self-signed certificate made by openssl) that wants
    /// `user`/`password` (an htpasswd file made by htpasswd).
    pub(crate) fn start_private(user: &str, password: &str) -> Registry {
        Registry::start_with(Some((user, password)))
    }

    fn start_with(login: Option<(&str, &str)>) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = dir.path().join("config.yml");
        let storage = dir.path().join("storage");
        let mut yaml = format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
             http:\n  addr: 127.0.0.1:{port}\n",
            storage.display()
        );
        if let Some((user, password)) = login {
            let (cert, key, htpasswd) =
                (dir.path().join("cert.pem"), dir.path().join("key.pem"), dir.path().join("htpasswd"));
            let out = Command::new("openssl")
                .args([
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-days",
                    "1",
                    "-subj",
                    "/CN=127.0.0.1",
                ])
                .args(["-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
                .arg(&key)
                .arg("-out")
                .arg(&cert)
                .output()
                .expect("openssl is installed");
            assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
            let out = Command::new("htpasswd")
                .args(["-Bbn", user, password])
                .output()
                .expect("htpasswd (apache2-utils)");
            assert!(out.status.success(), "htpasswd: {}", String::from_utf8_lossy(&out.stderr));
            std::fs::write(&htpasswd, &out.stdout).unwrap();
            yaml.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\nauth:\n  htpasswd:\n    realm: test\n    path: {}\n",
                cert.display(),
                key.display(),
                htpasswd.display()
            ));
        }
        std::fs::write(&config, yaml).unwrap();
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

    /// Where it keeps blobs: `<storage>/docker/registry/v2/blobs/sha256/<2 hex>/<hex>/data`.
    pub(crate) fn blob_path(&self, digest: &str) -> std::path::PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        self._dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A data dir of its own sharing the real kernel.
pub(crate) fn scratch_data_dir() -> tempfile::TempDir {
    let kernel = data_dir().join("kernel/current");
    assert!(kernel.join("vmlinux").is_file(), "no kernel at {}; run rootfs/setup.sh", kernel.display());
    let data = tempfile::Builder::new().prefix("atoll-img-").tempdir_in("/tmp").unwrap();
    std::fs::create_dir_all(data.path().join("kernel")).unwrap();
    std::os::unix::fs::symlink(kernel.canonicalize().unwrap(), data.path().join("kernel/current")).unwrap();
    data
}

pub(crate) fn atoll(data: &Path, args: &[&str]) -> std::process::Output {
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

pub(crate) fn entries_of(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// `entries` as a zstd-compressed tar layer.
pub(crate) fn zstd_layer(entries: &[Entry<'_>]) -> Vec<u8> {
    let gz = layer(entries);
    let mut plain = Vec::new();
    std::io::copy(&mut flate2::read::GzDecoder::new(&gz[..]), &mut plain).unwrap();
    zstd::stream::encode_all(&plain[..], 3).unwrap()
}
