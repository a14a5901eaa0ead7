//! Rootless builds: file owners, modes and device nodes set in the finished ext4 image
//! with `debugfs -w`, which edits an image file the caller owns without mounting it.
//!
//! Without root, the staging tree's files belong to the caller (`chown` needs root),
//! so [`super::layer::apply_rootless`] records what each entry should be instead, and
//! `mkfs.ext4 -d` copies the tree as it is. Every inode of the image is then set here:
//! a recorded entry gets its image's owner and mode (and a device node is made in
//! place of the empty file standing in for it); anything else (what atoll added: the
//! agent, /proc, /dev...) becomes root's, keeping its mode. The image's metadata is
//! then what a root build makes, bit for bit in owners and modes.

use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use super::bake::BakeError;
use super::layer::Owners;

/// The file type bits of `st_mode`.
const S_IFMT: u32 = 0o170_000;

/// Sets owners, modes and device nodes in `image` (made by `mkfs.ext4 -d root`).
pub fn apply(image: &Path, root: &Path, owners: &Owners) -> Result<(), BakeError> {
    let mut script = String::from("sif / uid 0\nsif / gid 0\n");
    for entry in walkdir::WalkDir::new(root).follow_links(false).min_depth(1) {
        let entry = entry.map_err(|e| BakeError::Write { path: root.into(), source: e.into() })?;
        let rel = entry.path().strip_prefix(root).unwrap_or(entry.path());
        let name = rel.to_str().filter(|n| !n.contains('"') && !n.chars().any(char::is_control)).ok_or_else(|| {
            BakeError::ToolFailed {
                tool: "debugfs",
                stderr: format!("the image has a file named {rel:?}, which a rootless build cannot name to debugfs; build it as root"),
            }
        })?;
        let meta =
            entry.metadata().map_err(|e| BakeError::Write { path: entry.path().into(), source: e.into() })?;
        let path = format!("\"/{name}\"");
        let (uid, gid, perm, device) = match owners.get(rel) {
            Some(m) => (m.uid, m.gid, m.mode & 0o7777, m.device),
            None => (0, 0, meta.mode() & 0o7777, None),
        };
        let kind = match device {
            Some((c, major, minor)) => {
                // debugfs's mknod makes the name in its current directory.
                let parent = rel.parent().and_then(Path::to_str).unwrap_or("");
                let base = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
                let _ = writeln!(
                    script,
                    "rm {path}\ncd \"/{parent}\"\nmknod \"{base}\" {c} {major} {minor}\ncd /"
                );
                if c == 'c' { 0o020_000 } else { 0o060_000 }
            }
            None => meta.mode() & S_IFMT,
        };
        // A symlink's mode is always 0777; its owner is set all the same.
        let _ = writeln!(script, "sif {path} uid {uid}\nsif {path} gid {gid}");
        if kind != 0o120_000 {
            let _ = writeln!(script, "sif {path} mode 0{:o}", kind | perm);
        }
    }
    let file = image.with_extension("debugfs");
    std::fs::write(&file, script).map_err(|source| BakeError::Write { path: file.clone(), source })?;
    let debugfs = ["/usr/sbin/debugfs", "/sbin/debugfs"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .map_or_else(|| Path::new("debugfs").to_path_buf(), Path::to_path_buf);
    let out = Command::new(debugfs)
        .arg("-w")
        .arg("-f")
        .arg(&file)
        .arg(image)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|_| BakeError::ToolMissing { tool: "debugfs", package: "e2fsprogs" })?;
    let _ = std::fs::remove_file(&file);
    // debugfs exits 0 whatever its commands did; a failed one says so on stderr after
    // its version banner (and echoes each command as `debugfs: ...`).
    let errors: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.starts_with("debugfs ") && !l.trim().is_empty())
        .map(str::to_owned)
        .collect();
    if !out.status.success() || !errors.is_empty() {
        let tail = errors[errors.len().saturating_sub(4)..].join("\n");
        return Err(BakeError::ToolFailed { tool: "debugfs", stderr: tail });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(image: &Path, path: &str) -> String {
        let out = Command::new("/usr/sbin/debugfs")
            .arg("-R")
            .arg(format!("stat {path}"))
            .arg(image)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn a_rootless_tree_gets_the_images_owners_modes_and_devices() {
        let d = tempfile::tempdir().unwrap();
        let mut tar = tar::Builder::new(Vec::new());
        let mut add =
            |path: &str, kind: tar::EntryType, uid: u64, mode: u32, data: &[u8], link: Option<&str>| {
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(kind);
                h.set_uid(uid);
                h.set_gid(uid);
                h.set_mode(mode);
                h.set_mtime(0);
                h.set_size(data.len() as u64);
                if kind == tar::EntryType::Char {
                    h.set_device_major(1).unwrap();
                    h.set_device_minor(3).unwrap();
                }
                match link {
                    Some(target) => tar.append_link(&mut h, path, target).unwrap(),
                    None => tar.append_data(&mut h, path, data).unwrap(),
                }
            };
        add("home/", tar::EntryType::Directory, 0, 0o755, b"", None);
        add("home/app/", tar::EntryType::Directory, 1000, 0o700, b"", None);
        add("home/app/f", tar::EntryType::Regular, 1000, 0o400, b"mine", None);
        add("home/app/hard", tar::EntryType::Link, 0, 0o644, b"", Some("home/app/f"));
        add("su", tar::EntryType::Regular, 0, 0o4755, b"x", None);
        add("opt/", tar::EntryType::Directory, 0, 0o755, b"", None);
        add("opt/null", tar::EntryType::Char, 0, 0o666, b"", None);
        let layer = d.path().join("layer.tar");
        std::fs::write(&layer, tar.into_inner().unwrap()).unwrap();
        let root = d.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let mut owners = Owners::new();
        super::super::layer::apply_rootless(&root, &layer, &mut owners).unwrap();
        std::fs::create_dir(root.join("added")).unwrap();
        let image = d.path().join("img.ext4");
        let mkfs = Command::new("/usr/sbin/mkfs.ext4")
            .args(["-q", "-F", "-d"])
            .arg(&root)
            .arg(&image)
            .arg("8M")
            .status()
            .unwrap();
        assert!(mkfs.success());
        apply(&image, &root, &owners).unwrap();
        let f = stat(&image, "/home/app/f");
        assert!(
            f.contains("Mode:  0400")
                && f.contains("User:  1000")
                && f.contains("Group:  1000")
                && f.contains("Links: 2"),
            "{f}"
        );
        let app = stat(&image, "/home/app");
        assert!(
            app.contains("Type: directory") && app.contains("Mode:  0700") && app.contains("User:  1000"),
            "{app}"
        );
        let su = stat(&image, "/su");
        assert!(su.contains("Mode:  04755") && su.contains("User:     0"), "{su}");
        let null = stat(&image, "/opt/null");
        assert!(null.contains("Type: character special") && null.contains("Mode:  0666"), "{null}");
        assert!(
            null.contains("Device major/minor number: 01:03")
                || null.contains("Device major/minor number: 1:3"),
            "{null}"
        );
        let added = stat(&image, "/added");
        assert!(added.contains("User:     0") && added.contains("Group:     0"), "{added}");
    }
}
