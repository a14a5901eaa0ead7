//! `atoll mcp`: the agent's abilities as Model Context Protocol tools, over stdio or
//! Streamable HTTP. The MCP
//! face: a thin adapter over the use-cases ([`crate::sandbox`]) and the typed client
//! ([`crate::client`]); it never imports the CLI face ([`crate::cmd`], [`crate::cli`]) or
//! [`crate::vmm`].
//!
//! - [`server`]: the rmcp [`ServerHandler`](rmcp::ServerHandler), the stdio loop, and
//!   how a tool call finds its agent.
//! - [`http`]: `--http`: rmcp's Streamable HTTP service behind the bearer token, the
//!   Host/Origin checks and cancel-on-disconnect.
//! - [`tools`]: one file per group of tools (commands, jobs, files, archives, system).
//!   Each tool parses its arguments, makes one call through [`crate::sandbox`] or
//!   [`crate::client`], and shapes the answer for a model.
//! - [`shape`]: the shaping helpers shared by the tools (lossy text, base64, octal modes,
//!   timestamps).
//! - [`output_schema`]: output schemas every validating client checks cheaply (typed
//!   always-present fields; every field described in one string).
//! - [`listing`]: the one-line-per-entry text of a directory listing.
//! - [`access`]: which sandboxes a client may act on (its own, those handed over, or
//!   the one a pinned server is for).
//! - [`error`]: [`ToolError`], the short actionable text a failed tool call returns with
//!   `isError: true`.
//! - [`sandbox_arg`]: [`SandboxArg`](sandbox_arg::SandboxArg), the `sandbox_id` argument
//!   every guest tool flattens into its own.
//! - [`roots`]: the client's declared roots, which bound the folders it may mount.
//! - [`progress`]: progress notifications while a call runs, and cancellation.
//!
//! On stdio, stdout carries only the protocol; logs go to stderr.

pub mod access;
pub mod error;
pub mod http;
pub mod listing;
pub mod output_schema;
pub mod progress;
pub mod roots;
pub mod sandbox_arg;
pub mod server;
pub mod shape;
pub mod tools;

pub use error::ToolError;
pub use server::{AtollMcp, serve_stdio};
