//! Templates: `sandbox_template_list` and `sandbox_template_create` (a sandbox's disk
//! saved as a template), each one call into [`crate::template`] or
//! [`crate::sandbox::save_template`].

use rmcp::handler::server::wrapper::Parameters;
use rmcp::service::RequestContext;
use rmcp::{Json, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::mcp::error::ToolError;
use crate::mcp::progress::run_with_progress;
use crate::mcp::server::AtollMcp;
use crate::sandbox::save_template::{SaveOptions, save_template};

/// Arguments of `sandbox_template_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTemplatesArgs {}

/// A template as a model sees it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(inline)]
pub struct TemplateView {
    /// Pass it as template to sandbox_create.
    pub name: String,
    /// "disk" (an ext4 disk: sandboxes of it can be saved as templates) or "initramfs"
    /// (files in memory).
    pub kind: String,
    /// Bytes its files occupy on the host.
    pub size_bytes: u64,
    /// The sandbox it was saved from, if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_sandbox: Option<String>,
    /// What is wrong with it, if it cannot be used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Result of `sandbox_template_list`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TemplateList {
    /// Every installed template, by name.
    pub templates: Vec<TemplateView>,
}

/// Arguments of `sandbox_template_create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTemplateArgs {
    /// The sandbox whose disk becomes the template, by id or name.
    pub from_sandbox: String,
    /// The new template's name: letters, digits, "-", "_" and ".".
    pub name: String,
    /// Replace a template of that name that this client saved (refused while a sandbox
    /// uses it; built-in templates and others' are never replaced). Default: false.
    #[serde(default)]
    pub replace: bool,
}

/// Result of `sandbox_template_create`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CreatedTemplate {
    /// The template's name; pass it as template to sandbox_create.
    pub name: String,
    /// The sandbox it was saved from.
    pub from_sandbox: String,
    /// The template that sandbox had booted from.
    pub from_template: String,
    /// Bytes its disk image occupies on the host.
    pub size_bytes: u64,
    /// Whether a template of that name was replaced.
    pub replaced: bool,
}

#[tool_router(router = templates_router, vis = "pub(crate)")]
impl AtollMcp {
    /// Lists the templates.
    #[tool(
        name = "sandbox_template_list",
        description = "List the templates (base images) sandbox_create can boot, with their kind \
            (disk or initramfs) and size, and the sandbox each saved one came from.",
        annotations(
            title = "List templates",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_template_list(
        &self,
        Parameters(_args): Parameters<ListTemplatesArgs>,
    ) -> Result<Json<TemplateList>, ToolError> {
        let templates = crate::template::list()?
            .into_iter()
            .filter(|t| self.may_use_template(t.saved_by.as_deref()))
            .map(|t| TemplateView {
                name: t.name,
                kind: if t.disk { "disk" } else { "initramfs" }.to_owned(),
                size_bytes: t.disk_usage_bytes,
                from_sandbox: t.from_sandbox,
                problem: t.problem,
            })
            .collect();
        Ok(Json(TemplateList { templates }))
    }

    /// Saves a sandbox's disk as a template.
    #[tool(
        name = "sandbox_template_create",
        description = "Save a sandbox's current disk (installed packages, files) as a new template, \
            then boot copies of it with sandbox_create {template}. The sandbox's files are flushed \
            and its VM frozen for the copy (seconds), then it runs on. Only sandboxes of disk \
            templates (kind \"disk\" in sandbox_template_list, e.g. debian) can be saved. An existing \
            name is refused unless replace is true.",
        annotations(
            title = "Save a sandbox as a template",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn sandbox_template_create(
        &self,
        Parameters(args): Parameters<CreateTemplateArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<CreatedTemplate>, ToolError> {
        let opts = SaveOptions { name: args.name, replace: args.replace, by: Some(self.identity()) };
        let saved =
            run_with_progress(&context, None, "saving", save_template(&args.from_sandbox, &opts)).await??;
        Ok(Json(CreatedTemplate {
            name: saved.name,
            from_sandbox: saved.from_sandbox,
            from_template: saved.from_template,
            size_bytes: saved.disk_usage_bytes,
            replaced: saved.replaced,
        }))
    }
}
