//! The template of an image, for `atoll create --image REF` and MCP `sandbox_create
//! {image}`: one template per manifest digest, named `image-<first 16 hex digits>`, built
//! on first use and reused after.
//!
//! The image is always fetched first, under the caller's credential rule (the CLI's
//! lookup or `--registry-auth`; over MCP anonymous unless the operator granted
//! `--registry-credentials`), even when its template exists: the fetch is what proves
//! the caller may read the image, and it resolves a tag to the digest the template is
//! keyed by. Blobs already in the cache are not downloaded again, so a reuse costs a
//! manifest request. A failed build leaves no template (the bake stages aside and
//! moves into place last) and nothing unverified in the cache.
//!
//! Only a template this module built is reused: it writes [`MARKER`] (the digest) into
//! the template's directory, which no other build writes, so a template someone made
//! under an `image-...` name (a Dockerfile `FROM` that image plus a `RUN`, say) is never
//! taken for the image itself.

use serde::Serialize;

use super::bake::{BakeError, BuildOptions, Source};
use super::image::{FetchOptions, Fetched, ImageError};
use super::{InitKind, TemplateStoreError};

/// Why the template of an image could not be had.
#[derive(Debug, thiserror::Error)]
pub enum FromImageError {
    /// The image could not be fetched or read.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The template could not be built.
    #[error(transparent)]
    Bake(#[from] BakeError),
    /// The templates could not be listed.
    #[error(transparent)]
    Store(#[from] TemplateStoreError),
    /// A template of the image's name exists but was not built from it by this module.
    #[error(
        "template `{0}` exists but was not made by `atoll create --image` from this image; remove it \
         (`atoll template rm {0}`) and try again"
    )]
    NameTaken(String),
    /// The image's Entrypoint/Cmd could not be recorded; the template was removed.
    #[error("could not record the image's config in template `{name}`: {why}; the template was not kept")]
    Config {
        /// The template.
        name: String,
        /// What failed.
        why: String,
    },
}

/// The template an image boots as.
#[derive(Debug, Clone, Serialize)]
pub struct ImageTemplate {
    /// The template's name, `image-<16 hex digits of the manifest digest>`.
    pub template: String,
    /// `REF@sha256:...`: the reference and the digest it resolved to.
    pub image: String,
    /// Whether it was built now (else an existing one was reused).
    pub built: bool,
}

/// The file in a template's directory saying which image digest it is exactly.
pub const MARKER: &str = "from-image";

/// The name of the template of the image whose manifest has `digest`.
pub fn template_name(digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    format!("image-{}", &hex[..hex.len().min(16)])
}

/// Fetches `reference` (what is cached is not downloaded again) and returns its
/// template, building it when no template of its digest exists. Blocking: call it from
/// `spawn_blocking`. `fetched` is told when the fetch is done (progress for a caller).
pub fn ensure(
    reference: &str,
    fetch: &FetchOptions,
    fetched: &dyn Fn(&Fetched),
) -> Result<ImageTemplate, FromImageError> {
    let image = super::image::fetch(reference, fetch)?;
    fetched(&image);
    let name = template_name(&image.digest);
    let pinned = format!("{}@{}", image.reference, image.digest);
    if let Some(existing) = usable(&name, &image.digest)? {
        return Ok(ImageTemplate { template: existing, image: pinned, built: false });
    }
    let config = image.config.clone();
    let digest = image.digest.clone();
    let opts = BuildOptions {
        name: name.clone(),
        source: Source::Image(Box::new(image)),
        init: InitKind::Agent,
        size: None,
        force: false,
    };
    let built = match super::build(&opts) {
        Ok(built) => built,
        // Another create of the same image won the race: its template is as good (once
        // its marker is written, a moment after the template appears).
        Err(BakeError::AlreadyExists(_)) => {
            for _ in 0..20 {
                if let Some(existing) = usable(&name, &digest)? {
                    return Ok(ImageTemplate { template: existing, image: pinned, built: false });
                }
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            return Err(FromImageError::NameTaken(name));
        }
        Err(e) => return Err(e.into()),
    };
    let recorded = super::dockerfile::write_image_config(&built.path, &config)
        .and_then(|()| std::fs::write(built.path.join(MARKER), &digest));
    if let Err(e) = recorded {
        let _ = super::remove(&name);
        return Err(FromImageError::Config { name, why: e.to_string() });
    }
    Ok(ImageTemplate { template: name, image: pinned, built: true })
}

/// `name` when it is an installed template this module built from the image of `digest`.
fn usable(name: &str, digest: &str) -> Result<Option<String>, TemplateStoreError> {
    let dir = crate::vmm::dirs::templates_dir()?.join(name);
    let marked = std::fs::read_to_string(dir.join(MARKER)).is_ok_and(|d| d == digest);
    Ok((marked && dir.join("template.json").is_file()).then(|| name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_comes_from_the_digest() {
        let d = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(template_name(&d), "image-abababababababab");
        assert!(super::super::check_name(&template_name(&d)).is_ok());
    }
}
