//! [`SandboxArg`]: the `sandbox_id` argument every guest tool takes, written once and
//! flattened into each tool's arguments (`#[serde(flatten)]`), so the input schemas stay
//! flat: `{"command": ..., "sandbox_id": ...}`.

use schemars::JsonSchema;
use serde::Deserialize;

/// The sandbox a guest tool acts on.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct SandboxArg {
    /// Sandbox to act on, by id or name (sandbox_list shows them). Default: the sandbox or
    /// agent this server was started with.
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

impl SandboxArg {
    /// The sandbox named, if any (see [`AtollMcp::client`](crate::mcp::AtollMcp)).
    pub fn id(&self) -> Option<&str> {
        self.sandbox_id.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use rmcp::handler::server::common::schema_for_type;
    use serde_json::json;

    use crate::mcp::tools::exec::ExecArgs;

    #[test]
    fn a_flattened_sandbox_id_keeps_the_schema_flat_and_unknown_arguments_refused() {
        let schema = schema_for_type::<ExecArgs>();
        let props = schema["properties"].as_object().unwrap();
        assert!(props.contains_key("sandbox_id") && props.contains_key("command"), "{schema:?}");
        assert!(
            props["sandbox_id"]["description"].as_str().is_some_and(|d| d.starts_with("Sandbox to act on"))
        );
        assert_eq!(schema["additionalProperties"], json!(false), "{schema:?}");
        assert!(!schema.contains_key("allOf") && !schema.contains_key("$ref"), "{schema:?}");

        let args: ExecArgs = serde_json::from_value(json!({"command": "true", "sandbox_id": "dev"})).unwrap();
        assert_eq!(args.sandbox.id(), Some("dev"));
        let err = serde_json::from_value::<ExecArgs>(json!({"command": "true", "workdir": "/"})).unwrap_err();
        assert!(err.to_string().contains("unknown field `workdir`"), "{err}");
    }
}
