//! `atoll secret set|ls|rm|attach|detach` (docs/secrets.md).

use std::time::Duration;

use clap::{Args, Subcommand};

/// `atoll secret ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum SecretCommand {
    /// Store a secret for its hosts: the value from stdin, `--from-env VAR` or
    /// `--from-command CMD` (run on the host when needed, its output cached).
    #[command(after_help = "\
Examples:
  gh auth token | atoll secret set github --host api.github.com --host github.com
  atoll secret set openai --host api.openai.com --from-env OPENAI_API_KEY
  atoll secret set gh --host '*.github.com' --from-command 'gh auth token' --cache 10m

The value never enters a sandbox: a sandbox bound to the secret sees a placeholder, and
its network helper puts the value in place of it only in the headers of HTTPS requests
to these hosts. `set` again replaces the value (sandboxes use the new one from their
next request).")]
    Set(SecretSetArgs),
    /// List the secrets: names, hosts, where the values come from (never a value).
    Ls,
    /// Remove a secret (bound sandboxes send their placeholder unchanged from then on).
    Rm(SecretNameArg),
    /// Bind a secret to a sandbox: its commands see VAR set to a placeholder.
    #[command(after_help = "Example:\n  atoll secret attach dev github --env GITHUB_TOKEN")]
    Attach(SecretAttachArgs),
    /// Unbind a secret (by secret name or variable) from a sandbox.
    Detach(SecretDetachArgs),
}

/// `atoll secret set`.
#[derive(Debug, Clone, Args)]
pub struct SecretSetArgs {
    /// The secret's name: letters, digits, `_`, `-`.
    pub name: String,
    /// A host the value may go to (repeatable): `api.example.com` or `*.example.com`.
    #[arg(long = "host", value_name = "HOST", required = true)]
    pub hosts: Vec<String>,
    /// Read the value from this host environment variable now (instead of stdin).
    #[arg(long, value_name = "VAR", conflicts_with = "from_command")]
    pub from_env: Option<String>,
    /// Get the value by running this command on the host (`sh -c`) when a sandbox needs
    /// it; its output is used for --cache.
    #[arg(long, value_name = "CMD")]
    pub from_command: Option<String>,
    /// How long one output of --from-command is used.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration, requires = "from_command")]
    pub cache: Duration,
}

/// A secret's name.
#[derive(Debug, Clone, Args)]
pub struct SecretNameArg {
    /// The secret's name.
    pub name: String,
}

/// `atoll secret attach`.
#[derive(Debug, Clone, Args)]
pub struct SecretAttachArgs {
    /// The sandbox (name or id).
    pub sandbox: String,
    /// The secret.
    pub secret: String,
    /// The variable the guest sees (default: the secret's name in upper case).
    #[arg(long, value_name = "VAR")]
    pub env: Option<String>,
}

/// `atoll secret detach`.
#[derive(Debug, Clone, Args)]
pub struct SecretDetachArgs {
    /// The sandbox (name or id).
    pub sandbox: String,
    /// The secret's name or the variable it is bound to.
    pub secret: String,
}
