//! The arguments of the file tools: what each takes, and its input schema.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::mcp::sandbox_arg::SandboxArg;

/// How file content travels in a tool call: "utf8" (the text as is) or "base64" (standard
/// base64 of the raw bytes).
// Inlined, and with no per-variant docs, so its schema is a plain string enum rather than
// a `$ref` to a `oneOf`, which clients that validate results (the Python SDK) check slowly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum Encoding {
    Utf8,
    Base64,
}

/// Arguments of `sandbox_files_read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// Absolute path of the file inside the sandbox.
    pub path: String,
    /// First byte to read. Default: 0.
    #[serde(default)]
    pub offset: Option<u64>,
    /// Bytes to read, at most 1048576. Default (or 0): to the end of the file, which is
    /// refused for files over 1 MiB.
    #[serde(default)]
    #[schemars(range(max = 1_048_576))]
    pub length: Option<u64>,
}

/// Arguments of `sandbox_files_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// Absolute path of the file inside the sandbox; missing parent directories are
    /// created.
    pub path: String,
    /// The content: text, or base64 when encoding is "base64". At most 8 MiB.
    pub content: String,
    /// How content is encoded. Default: "utf8".
    #[serde(default)]
    pub encoding: Option<Encoding>,
    /// Octal permission mode such as "644" or "755". Default: keep an existing file's
    /// mode, or 644 for a new file.
    #[serde(default)]
    pub mode: Option<String>,
    /// Add content to the end of the file instead of replacing it. Default: false.
    #[serde(default)]
    pub append: Option<bool>,
}

/// Arguments of `sandbox_files_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// Absolute path of the directory inside the sandbox.
    pub path: String,
    /// List subdirectories' contents too. Default: false, or true when max_depth is given.
    #[serde(default)]
    pub recursive: Option<bool>,
    /// With recursive: how many levels to descend (1 = only the directory's own
    /// entries). Default: no limit.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_depth: Option<u32>,
    /// Only the paths, grouped by type (files, dirs, symlinks, other) instead of entries
    /// with size, mode and mtime: no stat per entry, so a large directory lists faster.
    /// Default: false.
    #[serde(default)]
    pub names_only: Option<bool>,
}

/// Arguments of `sandbox_files_remove`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// Absolute path of the file or directory inside the sandbox.
    pub path: String,
    /// Required to remove a directory and everything in it. Default: false.
    #[serde(default)]
    pub recursive: Option<bool>,
}

/// Arguments of `sandbox_files_move`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// Absolute path to move.
    pub from: String,
    /// Absolute path to move it to.
    pub to: String,
    /// Replace `to` if it exists. Default: false (an existing `to` is refused).
    #[serde(default)]
    pub overwrite: Option<bool>,
}

/// Arguments of `sandbox_files_mkdir`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MkdirArgs {
    /// The sandbox to act on.
    #[serde(flatten)]
    pub sandbox: SandboxArg,
    /// Absolute path of the directory; missing parents are created, and an existing
    /// directory is fine.
    pub path: String,
    /// Octal permission mode such as "755". Default: 755.
    #[serde(default)]
    pub mode: Option<String>,
}
