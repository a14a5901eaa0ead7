//! Templates: `sandbox_template_list` and `sandbox_template_create` (a sandbox's disk
//! saved as a template, or a build from an image or a Dockerfile), each one call into
//! [`crate::template`] or [`crate::sandbox::save_template`].
//!
//! Over MCP a build reads nothing from the host: `image` must be a registry reference
//! (`oci:DIR` and `docker-archive:FILE` are refused), and `dockerfile` is the file's
//! text with an empty build context, so COPY and ADD have nothing to copy. Pulls are
//! anonymous unless the operator started the server with `--registry-credentials`
//! (`AtollMcp::registry_auth`): the operator's logins are not the client's.

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
    /// What is wrong with it, if it cannot be used, or why its build failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// "ready" (sandbox_create can boot it), "building" (a background build runs; list
    /// again later) or "failed" (the background build stopped; problem says why, and
    /// nothing was installed).
    pub status: String,
}

/// Result of `sandbox_template_list`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TemplateList {
    /// Every installed template, by name.
    pub templates: Vec<TemplateView>,
}

/// Arguments of `sandbox_template_create`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTemplateArgs {
    /// The sandbox whose disk becomes the template, by id or name. Give exactly one of
    /// from_sandbox, image and dockerfile.
    #[serde(default)]
    pub from_sandbox: Option<String>,
    /// An OCI/Docker image from a registry (e.g. "python:3.12-slim",
    /// "ghcr.io/org/img:tag"); linux/amd64 is used. Its Env, WorkingDir and User become
    /// the defaults of commands in the sandboxes. Pulled anonymously (public images)
    /// unless the server was started with --registry-credentials.
    #[serde(default)]
    pub image: Option<String>,
    /// A Dockerfile's text: FROM (an image as above, or a disk template), RUN (in a build
    /// VM), ENV, ARG, WORKDIR, USER, ENTRYPOINT, CMD, LABEL, EXPOSE. There is no build
    /// context, so COPY and ADD find nothing; write files in a RUN.
    #[serde(default)]
    pub dockerfile: Option<String>,
    /// Values for the Dockerfile's ARGs.
    #[serde(default)]
    pub build_args: std::collections::BTreeMap<String, String>,
    /// Start the image's ENTRYPOINT+CMD as a background job whenever the template boots.
    #[serde(default)]
    pub start: bool,
    /// A shell command run at boot until it exits 0 (at most 120 s) before a sandbox of
    /// the template is ready.
    #[serde(default)]
    pub ready_cmd: Option<String>,
    /// The new template's name: letters, digits, "-", "_" and ".".
    pub name: String,
    /// Replace a template of that name that this client saved (refused while a sandbox
    /// uses it; built-in templates and others' are never replaced). Default: false.
    #[serde(default)]
    pub replace: bool,
    /// For image and dockerfile: return at once with status "building" and build in the
    /// background; sandbox_template_list then shows "building", "ready" or "failed" with
    /// the reason. Use it when tool calls time out before a build (minutes) ends.
    /// Default: false (the call returns when the template is ready, reporting progress).
    #[serde(default)]
    pub background: bool,
    /// For dockerfile: run every RUN step again instead of reusing the steps an earlier
    /// build of the same base and instructions stored. Default: false.
    #[serde(default)]
    pub no_cache: bool,
}

/// Result of `sandbox_template_create`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CreatedTemplate {
    /// The template's name; pass it as template to sandbox_create.
    pub name: String,
    /// The sandbox it was saved from, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_sandbox: Option<String>,
    /// The template that sandbox (or the Dockerfile's FROM) booted from, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_template: Option<String>,
    /// The image it was built from (`REF@sha256:...`), if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_image: Option<String>,
    /// RUN steps run, for a Dockerfile build.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_steps: Option<usize>,
    /// Dockerfile steps (instructions) taken from the step cache, stored by an earlier
    /// build of the same base and instructions, instead of run again; 0 when none was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_steps: Option<usize>,
    /// Bytes its disk image occupies on the host.
    pub size_bytes: u64,
    /// Whether a template of that name was (or, building, will be) replaced.
    pub replaced: bool,
    /// "ready", or "building" for a background build (sandbox_template_list says when
    /// it is ready, or why it failed).
    pub status: String,
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
        use crate::template::building::{self, BuildState};
        let builds: Vec<_> = building::list()
            .map_err(crate::template::TemplateStoreError::from)?
            .into_iter()
            .filter(|b| self.may_use_template(b.by.as_deref()))
            .collect();
        let mut templates: Vec<TemplateView> = crate::template::list()?
            .into_iter()
            .filter(|t| {
                crate::template::mcp_access::may_use(&t.name, t.saved_by.as_deref(), &self.identity())
            })
            .map(|t| {
                let rebuilding = builds.iter().any(|b| b.name == t.name && b.state == BuildState::Building);
                TemplateView {
                    kind: if t.disk { "disk" } else { "initramfs" }.to_owned(),
                    size_bytes: t.disk_usage_bytes,
                    from_sandbox: t.from_sandbox,
                    status: if rebuilding { "building" } else { "ready" }.to_owned(),
                    problem: t.problem,
                    name: t.name,
                }
            })
            .collect();
        for b in builds {
            if templates.iter().any(|t| t.name == b.name) {
                continue;
            }
            templates.push(TemplateView {
                name: b.name,
                kind: "disk".to_owned(),
                size_bytes: 0,
                from_sandbox: None,
                problem: b.reason,
                status: match b.state {
                    BuildState::Building => "building",
                    BuildState::Failed => "failed",
                }
                .to_owned(),
            });
        }
        templates.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Json(TemplateList { templates }))
    }

    /// Saves a sandbox's disk as a template.
    #[tool(
        name = "sandbox_template_create",
        description = "Make a new template, then boot copies of it with sandbox_create {template}. \
            From a sandbox (from_sandbox): its current disk (installed packages, files) is saved; its \
            files are flushed and its VM frozen for the copy (seconds); only sandboxes of disk \
            templates (kind \"disk\" in sandbox_template_list, e.g. debian) can be saved. From a \
            registry image (image) or a Dockerfile's text (dockerfile, RUN steps run in a build VM): \
            takes minutes; progress is reported, or pass background: true to return at once and \
            watch sandbox_template_list (status building, ready or failed with the reason). start and ready_cmd make every boot start the \
            image's ENTRYPOINT+CMD and wait for the ready command. An existing name is refused \
            unless replace is true.",
        annotations(
            title = "Save a sandbox as a template",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn sandbox_template_create(
        &self,
        Parameters(args): Parameters<CreateTemplateArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<CreatedTemplate>, ToolError> {
        if crate::template::mcp_access::is_reserved(&args.name) {
            return Err(ToolError::BadBuild(format!(
                "template name `{}`: names beginning {} are atoll's own (an image's template, a build's \
                 temporaries); pick another name",
                args.name,
                crate::template::mcp_access::RESERVED_PREFIXES.map(|p| format!("`{p}`")).join(", ")
            )));
        }
        let dockerfile = match (&args.from_sandbox, &args.image, &args.dockerfile) {
            (Some(sandbox), None, None) => {
                if args.background {
                    return Err(ToolError::BadBuild("background goes with image or dockerfile".into()));
                }
                if args.start || args.ready_cmd.is_some() || !args.build_args.is_empty() {
                    return Err(ToolError::BadBuild(
                        "start, ready_cmd and build_args go with image or dockerfile, not from_sandbox"
                            .into(),
                    ));
                }
                let opts = SaveOptions { name: args.name, replace: args.replace, by: Some(self.identity()) };
                let saved =
                    run_with_progress(&context, None, "saving", save_template(sandbox, &opts)).await??;
                return Ok(Json(CreatedTemplate {
                    name: saved.name,
                    from_sandbox: Some(saved.from_sandbox),
                    from_template: Some(saved.from_template),
                    from_image: None,
                    run_steps: None,
                    cached_steps: None,
                    size_bytes: saved.disk_usage_bytes,
                    replaced: saved.replaced,
                    status: "ready".to_owned(),
                }));
            }
            (None, Some(image), None) => {
                if !args.build_args.is_empty() {
                    return Err(ToolError::BadBuild("build_args go with dockerfile".into()));
                }
                image_only(image)?
            }
            (None, None, Some(text)) => text.clone(),
            _ => {
                return Err(ToolError::BadBuild(
                    "give exactly one of from_sandbox (a sandbox to save), image (a registry image) and \
                     dockerfile (a Dockerfile's text)"
                        .into(),
                ));
            }
        };
        if let Some(image) = dockerfile_from(&dockerfile) {
            image_only(&image).map_err(|_| {
                ToolError::BadBuild(format!("FROM {image}: over MCP, FROM takes a registry image or an installed template, not host files"))
            })?;
        }
        let replaced = crate::template::list()?.iter().any(|t| t.name == args.name);
        let by = self.identity();
        let auth = self.registry_auth();
        if args.background {
            return self.build_in_background(args, dockerfile, replaced, auth);
        }
        let build = build_template(&args.name, &dockerfile, &args, by, auth);
        let built = run_with_progress(&context, None, "building", build).await??;
        crate::template::building::forget(&built.template.name);
        Ok(Json(CreatedTemplate {
            name: built.template.name.clone(),
            from_sandbox: None,
            from_template: built.template.from_template.clone(),
            from_image: built.template.from_image.clone(),
            run_steps: Some(built.run_steps),
            cached_steps: Some(built.cached_steps),
            size_bytes: crate::template::list()?
                .into_iter()
                .find(|t| t.name == built.template.name)
                .map_or(0, |t| t.disk_usage_bytes),
            replaced,
            status: "ready".to_owned(),
        }))
    }
}

impl AtollMcp {
    /// Starts building `args.name` from `dockerfile` in a task of its own and returns at
    /// once; [`crate::template::building`] records how it stands for
    /// `sandbox_template_list`. What can be refused now (the name, one that exists) is.
    fn build_in_background(
        &self,
        args: CreateTemplateArgs,
        dockerfile: String,
        replaced: bool,
        auth: crate::template::image::RegistryAuth,
    ) -> Result<Json<CreatedTemplate>, ToolError> {
        use crate::template::building;
        crate::template::check_name(&args.name)?;
        if replaced && !args.replace {
            return Err(ToolError::BadBuild(format!(
                "template `{}` already exists; pick another name, or pass replace: true",
                args.name
            )));
        }
        let by = self.identity();
        building::start(&args.name, Some(by.clone())).map_err(|e| ToolError::BadBuild(e.to_string()))?;
        let name = args.name.clone();
        tokio::spawn(async move {
            match build_template(&args.name, &dockerfile, &args, by, auth).await {
                Ok(_) => building::forget(&args.name),
                Err(e) => building::fail(&args.name, &e.to_string()),
            }
        });
        Ok(Json(CreatedTemplate {
            name,
            from_sandbox: None,
            from_template: None,
            from_image: None,
            run_steps: None,
            cached_steps: None,
            size_bytes: 0,
            replaced,
            status: "building".to_owned(),
        }))
    }

    /// The template of registry image `image` for `sandbox_create {image}`: fetched under
    /// this server's credential rule, built once per digest; the same call as `atoll
    /// create --image` ([`crate::template::from_image::ensure`]).
    pub(crate) async fn image_template(
        &self,
        image: &str,
        context: &RequestContext<RoleServer>,
        since: std::time::Instant,
    ) -> Result<String, ToolError> {
        image_only(image)?;
        let fetch = crate::template::image::FetchOptions { insecure: false, auth: self.registry_auth() };
        let reference = image.to_owned();
        let work = tokio::task::spawn_blocking(move || {
            crate::template::from_image::ensure(&reference, &fetch, &|_| {})
        });
        let phase = "fetching the image and building its template";
        let made = crate::mcp::progress::run_phase(context, None, phase, since, work)
            .await?
            .map_err(|e| ToolError::BadBuild(format!("the build stopped: {e}")))?
            .map_err(|e| ToolError::BadBuild(e.to_string()))?;
        Ok(made.template)
    }
}

/// RUN output is not streamed over MCP (the call reports progress by time).
fn no_progress(_: crate::template::dockerfile::Progress) {}

/// `image` if it is a registry reference: over MCP nothing is read from the host.
pub(crate) fn image_only(image: &str) -> Result<String, ToolError> {
    if ["oci:", "docker-archive:", "oci-archive:", "docker-daemon:"].iter().any(|p| image.starts_with(p)) {
        return Err(ToolError::BadBuild(format!(
            "`{image}` names files on the host; over MCP, image takes a registry reference such as python:3.12-slim"
        )));
    }
    crate::template::image::transport_reference(image).map_err(|e| ToolError::BadBuild(e.to_string()))?;
    Ok(format!("FROM {image}\n"))
}

/// The FROM of a Dockerfile's text, roughly (for the check above; the parser has the
/// last word, with ARGs substituted).
fn dockerfile_from(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|l| l.len() > 5 && l[..5].eq_ignore_ascii_case("from "))
        .and_then(|l| l[5..].split_whitespace().next().map(str::to_owned))
}

/// Builds template `name` from the Dockerfile `text` with an empty context, then
/// records start/ready_cmd; the same calls `atoll template build --dockerfile` makes.
async fn build_template(
    name: &str,
    text: &str,
    args: &CreateTemplateArgs,
    by: String,
    auth: crate::template::image::RegistryAuth,
) -> Result<crate::template::dockerfile::DockerfileBuilt, ToolError> {
    use crate::template::dockerfile::{self, DockerfileOptions};
    let work = tempfile::tempdir().map_err(|e| ToolError::BadBuild(format!("a temporary directory: {e}")))?;
    let file = work.path().join("Dockerfile");
    let context = work.path().join("context");
    std::fs::create_dir(&context)
        .and_then(|()| std::fs::write(&file, text))
        .map_err(|e| ToolError::BadBuild(format!("a temporary directory: {e}")))?;
    // Over MCP the registry must speak TLS with a trusted certificate.
    if let Some(image) = dockerfile_from(text) {
        image_only(&image)?;
    }
    let opts = DockerfileOptions {
        name: name.to_owned(),
        dockerfile: file,
        context,
        build_args: args.build_args.clone(),
        fetch: crate::template::image::FetchOptions { insecure: false, auth },
        force: args.replace,
        size: None,
        memory_mib: 1024,
        by: Some(by),
        no_cache: args.no_cache,
    };
    let mut built = dockerfile::build(&opts, &no_progress).await?;
    if args.start || args.ready_cmd.is_some() {
        match crate::template::start::record(name, args.start, args.ready_cmd.clone()) {
            Ok(image) => built.image = image,
            Err(why) => {
                let _ = crate::template::remove(name);
                return Err(ToolError::BadBuild(format!("{why}; the template was not kept")));
            }
        }
    }
    Ok(built)
}
