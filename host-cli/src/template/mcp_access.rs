//! Which templates an MCP client may boot, build FROM, or name (issue #31): the
//! operator's (built-ins, `atoll template save`: no `saved_by`) and its own, but never
//! the template of a registry image (`atoll create --image`, [`super::from_image`]: MCP
//! reaches it only through `sandbox_create {image}`, which fetches the image first and
//! so proves the client may read it) nor a build's temporary base. The CLI is the
//! operator and is not limited here.

/// The name prefixes of templates only atoll itself makes: an image's template
/// (`image-`) and a Dockerfile build's temporaries (`build-base-`, `build-step-`).
pub const RESERVED_PREFIXES: [&str; 3] = ["image-", "build-base-", "build-step-"];

/// Whether MCP client `by` may boot or build FROM template `name`, which `saved_by`
/// saved.
pub fn may_use(name: &str, saved_by: Option<&str>, by: &str) -> bool {
    saved_by.is_none_or(|s| s == by) && !is_image_template(name) && !name.starts_with("build-base-")
}

/// Whether template `name` is the template of a registry image (it holds
/// [`super::from_image::MARKER`]).
pub fn is_image_template(name: &str) -> bool {
    crate::vmm::dirs::templates_dir().is_ok_and(|dir| dir.join(name).join(super::from_image::MARKER).exists())
}

/// Whether `name` is one an MCP client may not give a template it makes.
pub fn is_reserved(name: &str) -> bool {
    RESERVED_PREFIXES.iter().any(|p| name.starts_with(p))
}
