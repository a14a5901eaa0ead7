//! Running a snippet of code with an interpreter in the sandbox (MCP
//! `sandbox_run_code`): one exec through the same capped path as `sandbox_exec`.
//!
//! The code travels as the command's stdin, never inside a command line, so no quoting
//! can break it: `python3 -` and `node -` read their whole program from stdin before
//! running it; `sh` would read its script line by line from stdin, so a command in it
//! that reads stdin would eat the rest of the script, and the code is therefore read
//! whole first (`$(cat)`), stdin closed, and the code `eval`ed: two processes, where a
//! temp file (mktemp, cat, rm) took five and tripled the call's time. Either way the
//! snippet's own stdin is empty.
//!
//! An interpreter missing from the sandbox is the agent's "program not found" refusal;
//! the templates whose images have it are then looked up ([`crate::template::probe`]).

use schemars::JsonSchema;
use serde::Deserialize;

use crate::client::{Client, ClientError, ExecResult, ExecSpec};
use atoll_proto::reason::Reason;

/// The languages a snippet can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// Python 3, as `python3`.
    Python,
    /// JavaScript, as `node`.
    Node,
    /// POSIX shell, as `/bin/sh`.
    Sh,
}

/// Reads the whole script from stdin, then runs it with stdin empty.
const SH_FROM_STDIN: &str = "atoll_code=$(cat) && exec </dev/null && eval \"$atoll_code\"";

impl Language {
    /// The interpreter's program name in the guest.
    pub fn interpreter(self) -> &'static str {
        match self {
            Language::Python => "python3",
            Language::Node => "node",
            Language::Sh => "sh",
        }
    }

    /// The command that runs code fed on stdin.
    pub fn spec(self, code: &str) -> ExecSpec {
        let mut spec = match self {
            Language::Python => ExecSpec::argv(["python3", "-"]),
            Language::Node => ExecSpec::argv(["node", "-"]),
            Language::Sh => ExecSpec::argv(["/bin/sh", "-c", SH_FROM_STDIN]),
        };
        spec.stdin = bytes::Bytes::copy_from_slice(code.as_bytes());
        spec
    }
}

/// Why a snippet did not run.
#[derive(Debug, thiserror::Error)]
pub enum RunCodeError {
    /// The sandbox has no such interpreter.
    #[error(
        "`{interpreter}` is not installed in this sandbox, so {language} code cannot run here; {}",
        if templates.is_empty() {
            "no installed template has it either: install it in a disk-template sandbox (e.g. debian: apt-get install) and save that with sandbox_template_create / `atoll template save`".to_owned()
        } else {
            format!("templates that have it: {} (sandbox_create with template)", templates.join(", "))
        }
    )]
    Missing {
        /// The language asked for.
        language: &'static str,
        /// Its interpreter.
        interpreter: &'static str,
        /// Installed templates whose image has it.
        templates: Vec<String>,
    },
    /// The agent refused or could not be reached.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Runs `spec` (from [`Language::spec`], with timeout and output limit set) through
/// `client`.
pub async fn run_code(
    client: &Client,
    language: Language,
    spec: &ExecSpec,
) -> Result<ExecResult, RunCodeError> {
    match client.exec(spec).await {
        Err(e) if e.reason() == Some(Reason::ProgramNotFound) => {
            let interpreter = language.interpreter();
            let templates =
                tokio::task::spawn_blocking(move || crate::template::probe::templates_with(interpreter))
                    .await
                    .unwrap_or_default();
            Err(RunCodeError::Missing { language: language.name(), interpreter, templates })
        }
        other => Ok(other?),
    }
}

impl Language {
    fn name(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Node => "node",
            Language::Sh => "sh",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The branch with no template having the interpreter is not reached end to end
    /// (`debian` has python3 and node, every template has sh), so its text is checked here.
    #[test]
    fn a_missing_interpreter_names_the_templates_that_have_it_or_how_to_get_one() {
        let missing = |templates: &[&str]| {
            RunCodeError::Missing {
                language: "node",
                interpreter: "node",
                templates: templates.iter().map(|t| (*t).to_owned()).collect(),
            }
            .to_string()
        };
        let named = missing(&["deb2", "debian"]);
        assert!(named.starts_with("`node` is not installed in this sandbox, so node code cannot run here; "));
        assert!(
            named.ends_with("templates that have it: deb2, debian (sandbox_create with template)"),
            "{named}"
        );
        let none = missing(&[]);
        assert!(
            none.contains("no installed template has it either") && none.contains("apt-get install"),
            "{none}"
        );
    }
}
