//! Whether a template holds a program, read from its image without booting it: a disk
//! template's ext4 image through `debugfs` (e2fsprogs, which templates are made with),
//! an initramfs template's uncompressed `newc` cpio archive by walking its headers.
//!
//! `sandbox_run_code` asks this only when an interpreter is missing from a sandbox, to
//! name the templates that have it; nothing is cached, so a template rebuilt or saved
//! since is seen as it is now.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::vmm::template::{self, Template};

/// Directories a program is looked for in, as the guest's `PATH` would find it.
const BIN_DIRS: [&str; 4] = ["usr/local/bin", "usr/bin", "bin", "usr/sbin"];

/// The installed templates (by name) whose image has `program` in one of the usual
/// bin directories. Templates that cannot be read are left out.
pub fn templates_with(program: &str) -> Vec<String> {
    let Ok(root) = crate::vmm::dirs::templates_dir() else { return Vec::new() };
    template::installed(&root)
        .into_iter()
        .filter(|name| template::load(&root, name).is_ok_and(|t| has_program(&t, program) == Some(true)))
        .collect()
}

/// Whether template `t` has `program`; `None` when its image cannot be read.
pub fn has_program(t: &Template, program: &str) -> Option<bool> {
    if program.contains('/') {
        return Some(false);
    }
    match (&t.rootfs, &t.initrd) {
        (Some(disk), _) => ext4_has(disk, program),
        (None, Some(initrd)) => {
            let names = cpio_names(&std::fs::read(initrd).ok()?)?;
            Some(BIN_DIRS.iter().any(|d| names.iter().any(|n| n == &format!("{d}/{program}"))))
        }
        (None, None) => None,
    }
}

/// Looks the program up in an ext4 image with `debugfs -c -R "stat PATH"` (read-only;
/// intermediate symlinks such as Debian's `/bin -> usr/bin` are followed by debugfs).
/// `-c` leaves the allocation bitmaps unread: an image saved from a running sandbox
/// holds a journal that its first mount replays, and until then the bitmaps' checksums
/// do not match, which makes a plain debugfs refuse the image.
fn ext4_has(image: &Path, program: &str) -> Option<bool> {
    let mut any_answer = false;
    for dir in BIN_DIRS {
        let out = Command::new("debugfs")
            .args(["-c", "-R"])
            .arg(format!("stat /{dir}/{program}"))
            .arg(image)
            .stdin(Stdio::null())
            .output()
            .ok()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.stdout.starts_with(b"Inode:") {
            return Some(true);
        }
        any_answer |= stderr.contains("not found");
    }
    any_answer.then_some(false)
}

/// The member names of an uncompressed `newc` (or `crc`) cpio archive, without a leading
/// `./` or `/`; `None` when it is not one (a compressed initramfs, say).
fn cpio_names(bytes: &[u8]) -> Option<Vec<String>> {
    const HEADER: usize = 110;
    let hex = |b: &[u8]| usize::from_str_radix(std::str::from_utf8(b).ok()?, 16).ok();
    let pad4 = |n: usize| n.div_ceil(4) * 4;
    if !bytes.starts_with(b"07070") {
        return None;
    }
    let mut names = Vec::new();
    let mut at = 0;
    // Concatenated archives (an initramfs may be several) follow one another, each
    // ended by `TRAILER!!!`, with zero padding between.
    while at + HEADER <= bytes.len() {
        if bytes[at] == 0 {
            at += 1;
            continue;
        }
        let h = &bytes[at..at + HEADER];
        if &h[..6] != b"070701" && &h[..6] != b"070702" {
            return if names.is_empty() { None } else { Some(names) };
        }
        let file_size = hex(&h[54..62])?;
        let name_size = hex(&h[94..102])?;
        let name_end = at + HEADER + name_size;
        let raw = bytes.get(at + HEADER..name_end.checked_sub(1)?)?;
        let name = String::from_utf8_lossy(raw).into_owned();
        at = pad4(name_end) + pad4(file_size);
        if name != "TRAILER!!!" {
            names.push(name.trim_start_matches("./").trim_start_matches('/').to_owned());
        }
    }
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, data: &[u8]) -> Vec<u8> {
        let mut out = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            1,
            0o100755,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        )
        .into_bytes();
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out.extend_from_slice(data);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out
    }

    #[test]
    fn reads_the_names_of_concatenated_newc_archives() {
        let mut a = member("./bin/busybox", b"elf");
        a.extend(member("bin/sh", b""));
        a.extend(member("TRAILER!!!", b""));
        a.extend([0; 512]);
        a.extend(member("usr/bin/python3", b"#!"));
        a.extend(member("TRAILER!!!", b""));
        assert_eq!(cpio_names(&a).unwrap(), vec!["bin/busybox", "bin/sh", "usr/bin/python3"]);
        assert_eq!(cpio_names(b"\x1f\x8b\x08 gzip"), None);
    }

    #[test]
    fn finds_programs_in_an_initramfs_template() {
        let d = tempfile::tempdir().unwrap();
        let mut a = member("bin/sh", b"");
        a.extend(member("TRAILER!!!", b""));
        std::fs::write(d.path().join("initrd.cpio"), a).unwrap();
        let t = Template {
            name: "t".into(),
            kernel: d.path().join("vmlinux"),
            initrd: Some(d.path().join("initrd.cpio")),
            rootfs: None,
            cmdline: String::new(),
            init: template::InitKind::Agent,
            display: None,
        };
        assert_eq!(has_program(&t, "sh"), Some(true));
        assert_eq!(has_program(&t, "python3"), Some(false));
        assert_eq!(has_program(&t, "../sh"), Some(false));
    }
}
