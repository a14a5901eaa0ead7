//! COPY and ADD sources: local files of the build context, packed as zips the guest
//! agent extracts (`UploadDir`). A source is named relative to the context; one that
//! leaves it (`..`, or a symlink, at any depth, resolving outside it) is refused before
//! anything runs. Symlinks that stay inside the context are copied as what they point
//! to. `ADD` of a local tar (plain or gzip) unpacks it; its entries must be files or
//! directories (the agent refuses names with `..` or absolute names).

use std::fs::File;
use std::io::{self, Read, Seek};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use zip::ZipWriter;
use zip::write::SimpleFileOptions;

/// One zip to extract into a guest directory.
#[derive(Debug)]
pub struct Upload {
    /// The guest directory (absolute).
    pub dir: String,
    /// The zip, rewound.
    pub zip: File,
}

/// Why a COPY or ADD source cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The source leaves the context.
    #[error(
        "`{0}` is outside the build context (through `..` or a symlink); COPY and ADD take files of the context only"
    )]
    Escapes(String),
    /// The source does not exist.
    #[error("`{0}` does not exist in the build context")]
    Missing(String),
    /// A wildcard.
    #[error("`{0}` has a wildcard; name the files or directories (wildcards are not supported yet)")]
    Wildcard(String),
    /// Neither a file nor a directory (a socket, a device...).
    #[error("`{0}` is neither a file nor a directory")]
    Special(String),
    /// A tar entry atoll does not unpack.
    #[error(
        "the tar `{tar}` holds `{entry}`, a {kind}; ADD unpacks only files and directories (unpack it in a RUN instead)"
    )]
    TarEntry {
        /// The tar.
        tar: String,
        /// The entry.
        entry: String,
        /// What it is.
        kind: String,
    },
    /// Reading a file or writing the zip failed.
    #[error("could not pack `{path}`: {source}")]
    Io {
        /// The source.
        path: String,
        /// What failed.
        #[source]
        source: io::Error,
    },
}

fn io_err(path: &str) -> impl FnOnce(io::Error) -> SourceError + '_ {
    move |source| SourceError::Io { path: path.to_owned(), source }
}

fn zip_err(path: &str) -> impl FnOnce(zip::result::ZipError) -> SourceError + '_ {
    move |e| SourceError::Io { path: path.to_owned(), source: io::Error::other(e) }
}

/// The host path of context source `name` after checking it stays inside `context`
/// (already canonical): lexically, and once every symlink is resolved.
pub fn resolve(context: &Path, name: &str) -> Result<PathBuf, SourceError> {
    if name.contains(['*', '?', '[']) {
        return Err(SourceError::Wildcard(name.into()));
    }
    let mut rel = PathBuf::new();
    for c in Path::new(name).components() {
        match c {
            Component::Normal(p) => rel.push(p),
            Component::ParentDir => {
                if !rel.pop() {
                    return Err(SourceError::Escapes(name.into()));
                }
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    let joined = context.join(&rel);
    let real = match joined.canonicalize() {
        Ok(p) => p,
        // A dangling symlink: where does it point?
        Err(_) if std::fs::symlink_metadata(&joined).is_ok() => {
            return Err(SourceError::Escapes(name.into()));
        }
        Err(_) => return Err(SourceError::Missing(name.into())),
    };
    if !real.starts_with(context) {
        return Err(SourceError::Escapes(name.into()));
    }
    Ok(real)
}

/// Whether `path`'s name says it is a tar ADD unpacks.
fn is_tar(path: &Path) -> bool {
    let n = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    [".tar", ".tar.gz", ".tgz"].iter().any(|e| n.ends_with(e))
}

/// Checks every source of a COPY/ADD (before anything boots).
pub fn check(context: &Path, sources: &[String]) -> Result<(), SourceError> {
    for s in sources {
        let path = resolve(context, s)?;
        if path.is_dir() {
            walk(context, &path, s, &mut |_, _, _| Ok(()))?;
        }
    }
    Ok(())
}

/// The zips of `COPY sources dest` (`add`: ADD), `dest` relative to `workdir`.
pub fn pack(
    context: &Path,
    sources: &[String],
    dest: &str,
    workdir: &str,
    add: bool,
) -> Result<Vec<Upload>, SourceError> {
    let dest_abs = guest_path(workdir, dest);
    let into_dir = dest.ends_with('/') || sources.len() > 1;
    let mut uploads = Vec::new();
    for s in sources {
        let path = resolve(context, s)?;
        let meta = std::fs::metadata(&path).map_err(io_err(s))?;
        let mut zip = ZipWriter::new(tempfile::tempfile().map_err(io_err(s))?);
        let dir = if meta.is_dir() {
            walk(context, &path, s, &mut |rel, real, is_dir| add_entry(&mut zip, rel, real, is_dir, s))?;
            dest_abs.clone()
        } else if add && is_tar(&path) {
            tar_to_zip(&path, &mut zip, s)?;
            dest_abs.clone()
        } else if meta.is_file() {
            let (dir, base) = if into_dir {
                (
                    dest_abs.clone(),
                    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                )
            } else {
                let p = Path::new(&dest_abs);
                (
                    p.parent().map_or("/".into(), |d| d.to_string_lossy().into_owned()),
                    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                )
            };
            add_entry(&mut zip, Path::new(&base), &path, false, s)?;
            dir
        } else {
            return Err(SourceError::Special(s.clone()));
        };
        let mut file = zip.finish().map_err(zip_err(s))?;
        file.rewind().map_err(io_err(s))?;
        uploads.push(Upload { dir, zip: file });
    }
    Ok(uploads)
}

/// `dest` made absolute against `workdir`.
pub fn guest_path(workdir: &str, dest: &str) -> String {
    if dest.starts_with('/') {
        dest.to_owned()
    } else {
        format!("{}/{}", workdir.trim_end_matches('/'), dest.trim_start_matches("./"))
    }
}

/// Calls `f(relative name, real path, is_dir)` for everything under `dir`, following
/// symlinks that stay inside the context and refusing those that do not.
pub(super) fn walk(
    context: &Path,
    dir: &Path,
    name: &str,
    f: &mut dyn FnMut(&Path, &Path, bool) -> Result<(), SourceError>,
) -> Result<(), SourceError> {
    for entry in walkdir::WalkDir::new(dir).follow_links(false).sort_by_file_name().min_depth(1) {
        let entry = entry.map_err(|e| SourceError::Io { path: name.into(), source: e.into() })?;
        let rel = entry.path().strip_prefix(dir).unwrap_or(entry.path()).to_owned();
        let shown = format!("{}/{}", name.trim_end_matches('/'), rel.display());
        let real = if entry.path_is_symlink() {
            match entry.path().canonicalize() {
                Ok(r) if r.starts_with(context) => r,
                _ => return Err(SourceError::Escapes(shown)),
            }
        } else {
            entry.path().to_owned()
        };
        let meta = std::fs::metadata(&real).map_err(io_err(&shown))?;
        if meta.is_dir() && entry.path_is_symlink() {
            return Err(SourceError::Special(format!("{shown} (a symlink to a directory)")));
        }
        if !meta.is_dir() && !meta.is_file() {
            return Err(SourceError::Special(shown));
        }
        f(&rel, &real, meta.is_dir())?;
    }
    Ok(())
}

fn add_entry(
    zip: &mut ZipWriter<File>,
    rel: &Path,
    real: &Path,
    is_dir: bool,
    name: &str,
) -> Result<(), SourceError> {
    let meta = std::fs::metadata(real).map_err(io_err(name))?;
    let opts = SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .unix_permissions(meta.permissions().mode() & 0o7777)
        .large_file(meta.len() >= u64::from(u32::MAX));
    let rel = rel.to_string_lossy();
    if is_dir {
        zip.add_directory(format!("{rel}/"), opts).map_err(zip_err(name))?;
    } else {
        zip.start_file(rel.into_owned(), opts).map_err(zip_err(name))?;
        let mut f = File::open(real).map_err(io_err(name))?;
        io::copy(&mut f, zip).map_err(io_err(name))?;
    }
    Ok(())
}

/// The files and directories of the tar at `path` (plain or gzip) into `zip`.
fn tar_to_zip(path: &Path, zip: &mut ZipWriter<File>, name: &str) -> Result<(), SourceError> {
    let mut file = File::open(path).map_err(io_err(name))?;
    let mut magic = [0u8; 2];
    let gz = file.read_exact(&mut magic).is_ok() && magic == [0x1f, 0x8b];
    file.rewind().map_err(io_err(name))?;
    let reader: Box<dyn Read> =
        if gz { Box::new(flate2::read::GzDecoder::new(file)) } else { Box::new(io::BufReader::new(file)) };
    let mut archive = tar::Archive::new(reader);
    for entry in archive.entries().map_err(io_err(name))? {
        let mut entry = entry.map_err(io_err(name))?;
        let entry_name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let mode = entry.header().mode().map_err(io_err(name))? & 0o7777;
        let opts = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .unix_permissions(mode)
            .large_file(entry.size() >= u64::from(u32::MAX));
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            let n = entry_name.trim_end_matches('/');
            if n.is_empty() || n == "." {
                continue;
            }
            zip.add_directory(format!("{n}/"), opts).map_err(zip_err(name))?;
        } else if kind.is_file() {
            zip.start_file(entry_name.trim_start_matches("./"), opts).map_err(zip_err(name))?;
            io::copy(&mut entry, zip).map_err(io_err(name))?;
        } else if kind.is_pax_global_extensions() || kind.is_pax_local_extensions() {
            continue;
        } else {
            return Err(SourceError::TarEntry {
                tar: name.into(),
                entry: crate::template::image::escape_controls(&entry_name),
                kind: format!("{kind:?}").to_lowercase(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_stay_in_the_context() {
        let d = tempfile::tempdir().unwrap();
        let ctx = d.path().join("ctx");
        std::fs::create_dir_all(ctx.join("sub")).unwrap();
        std::fs::write(ctx.join("sub/f"), b"x").unwrap();
        std::fs::write(d.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink("../secret", ctx.join("out")).unwrap();
        std::os::unix::fs::symlink("../../secret", ctx.join("sub/deep")).unwrap();
        std::os::unix::fs::symlink("sub/f", ctx.join("in")).unwrap();
        let ctx = ctx.canonicalize().unwrap();
        assert!(resolve(&ctx, "sub/f").is_ok());
        assert!(resolve(&ctx, "in").is_ok(), "a link inside the context");
        assert!(matches!(resolve(&ctx, "../secret"), Err(SourceError::Escapes(_))));
        assert!(matches!(resolve(&ctx, "sub/../../secret"), Err(SourceError::Escapes(_))));
        assert!(matches!(resolve(&ctx, "out"), Err(SourceError::Escapes(_))));
        assert!(matches!(resolve(&ctx, "nope"), Err(SourceError::Missing(_))));
        assert!(matches!(resolve(&ctx, "*.txt"), Err(SourceError::Wildcard(_))));
        let e = check(&ctx, &["sub".into()]).unwrap_err();
        assert!(matches!(&e, SourceError::Escapes(n) if n == "sub/deep"), "{e}");
        assert_eq!(resolve(&ctx, "/sub/f").unwrap(), ctx.join("sub/f"), "absolute means in the context");
    }

    #[test]
    fn destinations() {
        assert_eq!(guest_path("/w", "a"), "/w/a");
        assert_eq!(guest_path("/", "./a"), "/a");
        assert_eq!(guest_path("/w", "/abs"), "/abs");
    }
}

#[cfg(test)]
mod tar_tests {
    use super::*;

    #[test]
    fn add_unpacks_a_tar_with_its_modes() {
        let d = tempfile::tempdir().unwrap();
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(8);
        h.set_mode(0o600);
        tar.append_data(&mut h, "inner/data.txt", &b"unpacked"[..]).unwrap();
        std::fs::write(d.path().join("b.tar"), tar.into_inner().unwrap()).unwrap();
        let ctx = d.path().canonicalize().unwrap();
        let mut uploads = pack(&ctx, &["b.tar".into()], "/opt/", "/", true).unwrap();
        let u = uploads.pop().unwrap();
        assert_eq!(u.dir, "/opt/");
        let mut zip = zip::ZipArchive::new(u.zip).unwrap();
        let mut f = zip.by_name("inner/data.txt").unwrap();
        assert_eq!(f.unix_mode().map(|m| m & 0o7777), Some(0o600));
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "unpacked");
    }
}
