//! Reading a template: `<data>/templates/<name>/template.json`, written by
//! `rootfs/build-*.sh` and `atoll template build`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The default template.
pub const DEFAULT_TEMPLATE: &str = "minimal";

/// Why a template cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// A name with a slash, a dot-dot or other characters that are not a plain name.
    #[error("`{0}` is not a template name; use letters, digits, `-`, `_` and `.`")]
    BadName(String),
    /// No `template.json` for this name.
    #[error(
        "template `{name}` is not installed (no {}); build it with `rootfs/setup.sh`{}",
        path.display(),
        if available.is_empty() { String::new() } else { format!(", or pick one of: {}", available.join(", ")) }
    )]
    NotFound {
        /// The name asked for.
        name: String,
        /// The file looked for.
        path: PathBuf,
        /// Installed templates.
        available: Vec<String>,
    },
    /// `template.json` could not be read or parsed.
    #[error("template file {} is unreadable or malformed; rebuild the template", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file the template names is missing.
    #[error("template `{name}` names {} but it is missing; rebuild the template", path.display())]
    MissingFile {
        /// The template.
        name: String,
        /// The missing file.
        path: PathBuf,
    },
}

/// How the agent starts inside the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InitKind {
    /// The agent is PID 1.
    Agent,
    /// systemd is PID 1 and starts the agent as a unit.
    Systemd,
}

/// `template.json` as written on disk (paths relative to the template directory).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TemplateFile {
    /// The template's name.
    pub name: String,
    /// The kernel image (an ELF `vmlinux` or a bzImage).
    pub kernel: String,
    /// An initramfs, if the template boots from one.
    #[serde(default)]
    pub initrd: Option<String>,
    /// An ext4 root filesystem image, if the template boots from a disk.
    #[serde(default)]
    pub rootfs: Option<String>,
    /// Extra kernel command-line arguments.
    #[serde(default)]
    pub cmdline: String,
    /// What runs as PID 1.
    #[serde(default = "default_init")]
    pub init: InitKind,
    /// The version of the baked-in agent.
    #[serde(default)]
    pub agent_version: String,
    /// When the template was built (Unix seconds).
    #[serde(default)]
    pub created_unix: u64,
    /// The sandbox whose disk it was saved from (`atoll template save`), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_sandbox: Option<String>,
    /// The template that sandbox had booted from, if it was saved from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_template: Option<String>,
    /// The defaults of every command run in its sandboxes (an image's `Env`,
    /// `WorkingDir` and `User`), if it was built from an image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<CommandDefaults>,
    /// The image reference it was built from (`atoll template build --image`), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_image: Option<String>,
    /// The MCP identity that saved it, if one did (an MCP client may replace only these).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_by: Option<String>,
    /// A screen of this size (`1280x800`) for its sandboxes: QEMU's display, keyboard
    /// and tablet (see [`crate::desktop`]); none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
}

/// What a command run in a sandbox gets when its call does not say: the host adds
/// these to each exec, job and shell (the agent stays as it is).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandDefaults {
    /// Environment variables (a call's own win).
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Working directory (absolute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// User name or uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

fn default_init() -> InitKind {
    InitKind::Agent
}

/// A template whose files were checked, with absolute paths.
#[derive(Debug, Clone)]
pub struct Template {
    /// The template's name.
    pub name: String,
    /// Absolute path of the kernel.
    pub kernel: PathBuf,
    /// Absolute path of the initramfs.
    pub initrd: Option<PathBuf>,
    /// Absolute path of the root filesystem image.
    pub rootfs: Option<PathBuf>,
    /// Extra kernel command-line arguments.
    pub cmdline: String,
    /// What runs as PID 1.
    pub init: InitKind,
    /// The screen its sandboxes get by default, if they get one.
    pub display: Option<crate::desktop::Size>,
}

/// True for a plain file-name-like template or sandbox name.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Loads template `name` from `templates_dir` and checks that its files exist.
pub fn load(templates_dir: &Path, name: &str) -> Result<Template, TemplateError> {
    if !is_plain_name(name) {
        return Err(TemplateError::BadName(name.to_string()));
    }
    let dir = templates_dir.join(name);
    let path = dir.join("template.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(TemplateError::NotFound {
                name: name.into(),
                path,
                available: installed(templates_dir),
            });
        }
        Err(e) => return Err(TemplateError::Malformed { path, source: Box::new(e) }),
    };
    let file: TemplateFile = serde_json::from_str(&text)
        .map_err(|e| TemplateError::Malformed { path: path.clone(), source: Box::new(e) })?;
    let existing = |rel: &str| {
        let p = dir.join(rel);
        if p.is_file() { Ok(p) } else { Err(TemplateError::MissingFile { name: name.into(), path: p }) }
    };
    Ok(Template {
        name: name.to_string(),
        kernel: existing(&file.kernel)?,
        initrd: file.initrd.as_deref().map(existing).transpose()?,
        rootfs: file.rootfs.as_deref().map(existing).transpose()?,
        cmdline: file.cmdline,
        init: file.init,
        display: file
            .display
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|e| TemplateError::Malformed { path: path.clone(), source: Box::new(e) })?,
    })
}

/// Names of the installed templates, sorted.
pub fn installed(templates_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(templates_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("template.json").is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_relative_paths_and_reports_missing_files() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("t1");
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(t.join("vmlinux"), b"x").unwrap();
        std::fs::write(
            t.join("template.json"),
            r#"{"name":"t1","kernel":"vmlinux","initrd":null,"rootfs":"rootfs.ext4","cmdline":"quiet","init":"agent"}"#,
        )
        .unwrap();
        let err = load(d.path(), "t1").unwrap_err();
        assert!(matches!(err, TemplateError::MissingFile { .. }), "{err}");
        std::fs::write(t.join("rootfs.ext4"), b"x").unwrap();
        let tpl = load(d.path(), "t1").unwrap();
        assert_eq!(tpl.kernel, t.join("vmlinux"));
        assert_eq!(tpl.rootfs, Some(t.join("rootfs.ext4")));
        assert_eq!(tpl.initrd, None);
        let err = load(d.path(), "nope").unwrap_err().to_string();
        assert!(err.contains("rootfs/setup.sh") && err.contains("t1"), "{err}");
        assert!(matches!(load(d.path(), "../x"), Err(TemplateError::BadName(_))));
    }
}
