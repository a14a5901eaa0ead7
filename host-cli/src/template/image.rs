//! `atoll template build --image REF`: an OCI or Docker image as a template's tree.
//!
//! `skopeo copy` fetches the image (a registry, an OCI layout directory or a `docker
//! save` tarball) into an OCI layout whose blobs live in one content-addressed cache,
//! `<data>/images/blobs/sha256/`, shared by every build (`--dest-shared-blob-dir`), so
//! a layer is downloaded once. skopeo picks linux/amd64 from a multi-platform index,
//! reads credentials as docker does (`~/.docker/config.json`, or `--authfile`), or
//! none at all for an anonymous pull ([`RegistryAuth::Anonymous`], what `atoll mcp`
//! does unless the operator grants `--registry-credentials`), and verifies what it
//! downloads; the manifest, the config and every layer are checked
//! against their digests again here before they are used. [`super::layer`] applies the
//! layers; the config's `Env`, `WorkingDir` and `User` become the template's
//! [`CommandDefaults`].

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::vmm::dirs;
use crate::vmm::template::CommandDefaults;

/// Why an image could not be fetched or read.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The data directory is unknown.
    #[error(transparent)]
    Dirs(#[from] dirs::DirsError),
    /// skopeo is not installed.
    #[error("`skopeo` is not installed; install the `skopeo` package (rootfs/setup.sh does)")]
    NoSkopeo,
    /// The reference is not usable.
    #[error(
        "`{0}` is not an image reference; use e.g. registry.example:5000/team/base:tag, NAME@sha256:..., oci:DIR[:TAG] or docker-archive:FILE"
    )]
    BadReference(String),
    /// A plain-HTTP registry without `--insecure-registry`.
    #[error(
        "the registry of `{0}` answers over plain HTTP, not HTTPS; pass --insecure-registry if you trust \
         it (its images then arrive unauthenticated)"
    )]
    PlainHttp(String),
    /// An anonymous pull was refused for want of credentials.
    #[error(
        "could not fetch `{reference}` anonymously: {stderr}\nthis server pulls images without registry \
         credentials: use a public image, or ask the operator to start `atoll mcp --registry-credentials`"
    )]
    AnonymousRefused {
        /// The reference.
        reference: String,
        /// skopeo's last stderr lines.
        stderr: String,
    },
    /// skopeo failed.
    #[error("could not fetch `{reference}`: {stderr}")]
    Fetch {
        /// The reference.
        reference: String,
        /// skopeo's last stderr lines.
        stderr: String,
    },
    /// A cache file could not be read or written.
    #[error("could not use the image cache at {}", path.display())]
    Cache {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A blob's content does not match its digest.
    #[error("blob {} does not match its digest {digest}; it was removed from the cache, fetch again", path.display())]
    DigestMismatch {
        /// The digest expected.
        digest: String,
        /// The blob.
        path: PathBuf,
    },
    /// The layout, manifest or config is not what the OCI image spec says.
    #[error("the image `{reference}` is malformed: {what}")]
    Malformed {
        /// The reference.
        reference: String,
        /// What is wrong.
        what: String,
    },
}

/// How to fetch.
#[derive(Debug, Clone, Default)]
pub struct FetchOptions {
    /// Allow a registry over plain HTTP or with an unverified certificate.
    pub insecure: bool,
    /// Which registry credentials the pull may use.
    pub auth: RegistryAuth,
}

/// Which registry credentials a pull may use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RegistryAuth {
    /// skopeo's own lookup (`$REGISTRY_AUTH_FILE`, `$XDG_RUNTIME_DIR/containers/auth.json`,
    /// `~/.docker/config.json`, and under sudo the invoking user's
    /// `~/.docker/config.json`): the user's own pulls.
    #[default]
    Lookup,
    /// This credentials file, in `~/.docker/config.json` form (`--registry-auth`).
    File(PathBuf),
    /// None: `--src-no-creds`, no file read, so only public images can be pulled. What
    /// an MCP client gets unless the operator grants `atoll mcp --registry-credentials`.
    Anonymous,
}

/// An image in the cache, ready to apply.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The reference it came from.
    pub reference: String,
    /// The manifest's digest.
    pub digest: String,
    /// The layer blobs, bottom first, each checked against its digest.
    pub layers: Vec<PathBuf>,
    /// `Env`, `WorkingDir` and `User` of its config.
    pub defaults: CommandDefaults,
    /// `Entrypoint`, `Cmd`, `Labels` and `ExposedPorts` of its config.
    pub config: super::dockerfile::ImageConfig,
}

/// `REF` as a skopeo transport reference: `oci:` and `docker-archive:` as they are,
/// `docker://REF` as it is, anything else as a registry reference.
pub fn transport_reference(reference: &str) -> Result<String, ImageError> {
    let bad = || ImageError::BadReference(reference.into());
    if reference.is_empty() || reference.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(bad());
    }
    for prefix in ["oci:", "docker-archive:", "oci-archive:", "docker://"] {
        if let Some(rest) = reference.strip_prefix(prefix) {
            return if rest.is_empty() { Err(bad()) } else { Ok(reference.into()) };
        }
    }
    if reference.starts_with('-') || reference.contains("://") {
        return Err(bad());
    }
    Ok(format!("docker://{reference}"))
}

/// Where the shared blobs are.
pub fn blob_dir() -> Result<PathBuf, ImageError> {
    Ok(dirs::data_dir()?.join("images/blobs"))
}

/// Fetches `reference` into the cache (blobs already there are not fetched again) and
/// reads its manifest and config.
pub fn fetch(reference: &str, opts: &FetchOptions) -> Result<Fetched, ImageError> {
    let source = transport_reference(reference)?;
    if !tool_exists("skopeo") {
        return Err(ImageError::NoSkopeo);
    }
    let blobs = blob_dir()?;
    let cache_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ImageError::Cache { path, source }
    };
    std::fs::create_dir_all(&blobs).map_err(cache_err(&blobs))?;
    let tmp = blobs.parent().expect("blobs has a parent").join("tmp");
    std::fs::create_dir_all(&tmp).map_err(cache_err(&tmp))?;
    super::leftovers::sweep(&tmp);
    let prefix = format!("layout-{}-", std::process::id());
    let layout = tempfile::Builder::new().prefix(&prefix).tempdir_in(&tmp).map_err(cache_err(&tmp))?;

    let mut cmd = Command::new("skopeo");
    cmd.args(["--override-arch", "amd64", "--override-os", "linux", "copy", "--quiet"]);
    if opts.insecure && source.starts_with("docker://") {
        cmd.arg("--src-tls-verify=false");
    }
    match &opts.auth {
        RegistryAuth::Anonymous => {
            cmd.arg("--src-no-creds");
        }
        RegistryAuth::File(file) => {
            cmd.arg("--src-authfile").arg(file);
        }
        RegistryAuth::Lookup => {
            if let Some(file) = sudo_user_docker_config() {
                cmd.arg("--src-authfile").arg(file);
            }
        }
    }
    cmd.arg("--dest-shared-blob-dir").arg(&blobs);
    cmd.arg(&source);
    let mut dest = std::ffi::OsString::from("oci:");
    dest.push(layout.path());
    dest.push(":image");
    cmd.arg(dest);
    let out = super::tools::output(cmd.stdin(std::process::Stdio::null()))
        .map_err(|e| ImageError::Fetch { reference: reference.into(), stderr: e.to_string() })?;
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr);
        if text.contains("server gave HTTP response to HTTPS client") {
            return Err(ImageError::PlainHttp(reference.into()));
        }
        let lines: Vec<String> = text.lines().map(skopeo_message).collect();
        let tail = escape_controls(&lines[lines.len().saturating_sub(4)..].join("\n"));
        if opts.auth == RegistryAuth::Anonymous && wants_credentials(&tail) {
            return Err(ImageError::AnonymousRefused { reference: reference.into(), stderr: tail });
        }
        return Err(ImageError::Fetch { reference: reference.into(), stderr: tail });
    }
    let fetched = read_layout(reference, layout.path(), &blobs)?;
    remember(&fetched);
    Ok(fetched)
}

/// One image in the cache, as `atoll image ls` shows it.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
pub struct CachedImage {
    /// The reference it was fetched as.
    pub reference: String,
    /// Its manifest's digest.
    pub digest: String,
    /// Its layers' digests, bottom first.
    pub layers: Vec<String>,
    /// When it was last fetched (Unix seconds).
    pub fetched_unix: u64,
    /// Bytes its layers take in the cache (shared layers counted in each image).
    #[serde(default)]
    pub bytes: u64,
}

/// What the cache holds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CacheListing {
    /// The images fetched, by reference.
    pub images: Vec<CachedImage>,
    /// Bytes of every blob in the cache.
    pub total_bytes: u64,
}

fn refs_dir() -> Result<PathBuf, ImageError> {
    Ok(dirs::data_dir()?.join("images/refs"))
}

/// Notes what was fetched as `reference` (best effort: the listing only).
fn remember(f: &Fetched) {
    let Ok(dir) = refs_dir() else { return };
    let record = CachedImage {
        reference: f.reference.clone(),
        digest: f.digest.clone(),
        layers: f
            .layers
            .iter()
            .filter_map(|p| p.file_name().map(|n| format!("sha256:{}", n.to_string_lossy())))
            .collect(),
        fetched_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        bytes: 0,
    };
    let key: String = Sha256::digest(f.reference.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(
        dir.join(format!("{key}.json")),
        serde_json::to_vec_pretty(&record).unwrap_or_default(),
    );
}

/// The images in the cache and its size.
pub fn cached() -> Result<CacheListing, ImageError> {
    let blobs = blob_dir()?.join("sha256");
    let size = |hex: &str| std::fs::metadata(blobs.join(hex)).map_or(0, |m| m.len());
    let mut images: Vec<CachedImage> = std::fs::read_dir(refs_dir()?)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| serde_json::from_slice::<CachedImage>(&std::fs::read(e.path()).ok()?).ok())
        .map(|mut i| {
            i.bytes = i.layers.iter().filter_map(|d| d.strip_prefix("sha256:")).map(size).sum();
            i
        })
        .collect();
    images.sort_by(|a, b| a.reference.cmp(&b.reference));
    let total_bytes = std::fs::read_dir(&blobs)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    Ok(CacheListing { images, total_bytes })
}

/// Empties the cache, the Dockerfile step cache with it (templates never need them:
/// their image holds the files); returns the bytes freed. Do not run it while a build is fetching.
pub fn prune() -> Result<u64, ImageError> {
    let root = dirs::data_dir()?.join("images");
    // With the Dockerfile step cache (`images/steps`, see `dockerfile::cache`).
    let steps: u64 = walkdir::WalkDir::new(root.join("steps"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
        .sum();
    let freed = cached()?.total_bytes + steps;
    for sub in ["blobs", "refs", "tmp", "steps"] {
        let path = root.join(sub);
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(ImageError::Cache { path, source }),
        }
    }
    Ok(freed)
}

#[derive(Deserialize)]
struct Index {
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
}

#[derive(Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(Deserialize, Default)]
struct ImageConfig {
    #[serde(default)]
    config: Option<RunConfig>,
}

#[derive(Deserialize, Default)]
struct RunConfig {
    #[serde(rename = "Env", default)]
    env: Option<Vec<String>>,
    #[serde(rename = "WorkingDir", default)]
    working_dir: Option<String>,
    #[serde(rename = "User", default)]
    user: Option<String>,
    #[serde(rename = "Entrypoint", default)]
    entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd", default)]
    cmd: Option<Vec<String>>,
    #[serde(rename = "Labels", default)]
    labels: Option<std::collections::BTreeMap<String, String>>,
    #[serde(rename = "ExposedPorts", default)]
    exposed_ports: Option<std::collections::BTreeMap<String, serde_json::Value>>,
}

/// Reads the layout skopeo wrote: its one manifest, the config, the layers.
fn read_layout(reference: &str, layout: &Path, blobs: &Path) -> Result<Fetched, ImageError> {
    let malformed = |what: String| ImageError::Malformed { reference: reference.into(), what };
    let index_path = layout.join("index.json");
    let index: Index = serde_json::from_slice(&read_small(&index_path)?)
        .map_err(|e| malformed(format!("index.json: {e}")))?;
    let [manifest_desc] = index.manifests.as_slice() else {
        return Err(malformed(format!("index.json lists {} manifests, not one", index.manifests.len())));
    };
    let manifest_path = verified_blob(blobs, &manifest_desc.digest, reference)?;
    let manifest: Manifest = serde_json::from_slice(&read_small(&manifest_path)?)
        .map_err(|e| malformed(format!("manifest {}: {e}", manifest_desc.digest)))?;
    let config_path = verified_blob(blobs, &manifest.config.digest, reference)?;
    let config: ImageConfig = serde_json::from_slice(&read_small(&config_path)?)
        .map_err(|e| malformed(format!("config {}: {e}", manifest.config.digest)))?;
    let mut layers = Vec::with_capacity(manifest.layers.len());
    for layer in &manifest.layers {
        if layer.media_type.contains("nondistributable") || layer.media_type.contains("foreign") {
            return Err(malformed(format!(
                "layer {} is a foreign layer ({})",
                layer.digest, layer.media_type
            )));
        }
        layers.push(verified_blob(blobs, &layer.digest, reference)?);
    }
    let run = config.config.unwrap_or_default();
    let image = super::dockerfile::ImageConfig {
        entrypoint: run.entrypoint.clone().filter(|v| !v.is_empty()),
        cmd: run.cmd.clone().filter(|v| !v.is_empty()),
        labels: run.labels.clone().unwrap_or_default(),
        exposed_ports: run.exposed_ports.as_ref().map(|p| p.keys().cloned().collect()).unwrap_or_default(),
        start: None,
        ready_cmd: None,
    };
    let defaults = CommandDefaults {
        env: run
            .env
            .unwrap_or_default()
            .into_iter()
            .filter_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                (!k.is_empty()).then(|| (k.to_owned(), v.to_owned()))
            })
            .collect(),
        cwd: run.working_dir.filter(|w| w.starts_with('/')),
        // `user:group` keeps the user (the agent runs a command as a user with that
        // user's groups); a name or uid is passed as it is.
        user: run.user.and_then(|u| u.split(':').next().map(str::to_owned)).filter(|u| {
            !u.is_empty() && u.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }),
    };
    Ok(Fetched {
        reference: reference.into(),
        digest: manifest_desc.digest.clone(),
        layers,
        defaults,
        config: image,
    })
}

/// The cached blob of `digest`, after checking its content hashes to it; a blob that
/// does not is removed so the next fetch downloads it again.
fn verified_blob(blobs: &Path, digest: &str, reference: &str) -> Result<PathBuf, ImageError> {
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .ok_or_else(|| ImageError::Malformed {
            reference: reference.into(),
            what: format!("digest `{}` is not sha256:<64 hex digits>", escape_controls(digest)),
        })?;
    let path = blobs.join("sha256").join(hex);
    let cache_err = |source| ImageError::Cache { path: path.clone(), source };
    let mut file = std::fs::File::open(&path).map_err(cache_err)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(cache_err)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let got: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    if got != hex {
        let _ = std::fs::remove_file(&path);
        return Err(ImageError::DigestMismatch { digest: digest.into(), path });
    }
    Ok(path)
}

/// Reads a JSON document of at most 4 MiB.
fn read_small(path: &Path) -> Result<Vec<u8>, ImageError> {
    const LIMIT: u64 = 4 << 20;
    let cache_err = |source| ImageError::Cache { path: path.into(), source };
    let file = std::fs::File::open(path).map_err(cache_err)?;
    let mut bytes = Vec::new();
    file.take(LIMIT + 1).read_to_end(&mut bytes).map_err(cache_err)?;
    if bytes.len() as u64 > LIMIT {
        return Err(cache_err(std::io::Error::other("over the 4 MiB limit for a manifest or config")));
    }
    Ok(bytes)
}

/// Under sudo, skopeo's lookup sees root's home; the invoking user's
/// `~/.docker/config.json` (from `$SUDO_USER` and /etc/passwd, both the operator's) is
/// what they logged in with.
fn sudo_user_docker_config() -> Option<PathBuf> {
    let user = std::env::var("SUDO_USER").ok().filter(|u| !u.is_empty() && u != "root")?;
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    let home = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 6 && fields[0] == user).then(|| PathBuf::from(fields[5]))
    })?;
    Some(home.join(".docker/config.json")).filter(|p| p.is_file())
}

/// Whether skopeo's message says the registry wants credentials (a 401's
/// "unauthorized" or "authentication required", or the "denied" some registries answer
/// an anonymous pull of a private repository with).
fn wants_credentials(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    ["unauthorized", "authentication required", "denied"].iter().any(|w| m.contains(w))
}

/// The `msg="..."` of a skopeo log line (`time=... level=fatal msg="..."`), else the line.
fn skopeo_message(line: &str) -> String {
    match line.split_once("msg=\"") {
        Some((_, rest)) => rest.strip_suffix('"').unwrap_or(rest).replace("\\\"", "\""),
        None => line.to_owned(),
    }
}

fn tool_exists(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}

/// `s` with control characters (but newlines) escaped, for a terminal.
pub fn escape_controls(s: &str) -> String {
    s.chars()
        .flat_map(
            |c| if c.is_control() && c != '\n' { c.escape_default().collect::<Vec<_>>() } else { vec![c] },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_that_does_not_match_its_digest_is_refused_and_dropped() {
        let d = tempfile::tempdir().unwrap();
        let hex: String = Sha256::digest(b"good").iter().map(|b| format!("{b:02x}")).collect();
        std::fs::create_dir_all(d.path().join("sha256")).unwrap();
        let path = d.path().join("sha256").join(&hex);
        std::fs::write(&path, b"good").unwrap();
        assert_eq!(verified_blob(d.path(), &format!("sha256:{hex}"), "r").unwrap(), path);
        std::fs::write(&path, b"evil").unwrap();
        let err = verified_blob(d.path(), &format!("sha256:{hex}"), "r").unwrap_err();
        assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err}");
        assert!(!path.exists(), "the bad blob leaves the cache");
        let err = verified_blob(d.path(), "sha256:../../etc/passwd", "r").unwrap_err();
        assert!(matches!(err, ImageError::Malformed { .. }), "{err}");
    }

    #[test]
    fn skopeo_log_lines_keep_their_message() {
        let line = r#"time="x" level=fatal msg="pinging: Get \"http://h/v2/\": refused""#;
        assert_eq!(skopeo_message(line), r#"pinging: Get "http://h/v2/": refused"#);
        assert_eq!(skopeo_message("plain"), "plain");
    }

    #[test]
    fn references_become_skopeo_transports() {
        assert_eq!(transport_reference("python:3.12-slim").unwrap(), "docker://python:3.12-slim");
        assert_eq!(
            transport_reference("registry.example:5000/team/base@sha256:ab").unwrap(),
            "docker://registry.example:5000/team/base@sha256:ab"
        );
        assert_eq!(transport_reference("oci:/tmp/l:1").unwrap(), "oci:/tmp/l:1");
        assert_eq!(transport_reference("docker-archive:/tmp/a.tar").unwrap(), "docker-archive:/tmp/a.tar");
        for bad in ["", "-x", "a b", "oci:", "http://x/y", "x\ny"] {
            assert!(matches!(transport_reference(bad), Err(ImageError::BadReference(_))), "{bad:?}");
        }
    }
}
