//! The text content of a `sandbox_files_list` result: one line per entry, the way `ls`
//! prints it, instead of the structured content's JSON repeated as escaped text.
//!
//! Why not the JSON (which the MCP spec suggests a tool with structured content SHOULD
//! also return as text): the text block is what most clients put in the model's
//! context, and a listing's JSON repeats every key on every entry. 100 entries are about
//! 20 KB of escaped JSON and 5 KB of these lines, with the same facts; clients that want
//! fields read `structuredContent`. docs/mcp.md says so.

use std::fmt::Write as _;

/// One entry as the model reads it; the structured content carries the same fields.
pub struct Line<'a> {
    /// Path relative to the listed directory.
    pub path: &'a str,
    /// "file", "dir", "symlink" or "other".
    pub kind: &'a str,
    /// Size, mode and mtime, absent from a names-only listing.
    pub stat: Option<Stat<'a>>,
    /// Where a symlink points.
    pub symlink_target: Option<&'a str>,
}

/// The stat part of a [`Line`].
pub struct Stat<'a> {
    /// Bytes.
    pub size: u64,
    /// Octal permission bits such as "0644".
    pub mode: &'a str,
    /// RFC 3339 UTC.
    pub mtime: &'a str,
}

/// Renders a listing of `dir`: a header that names the columns, one line per entry,
/// then `notes`. `names_only` picks the columns (type and path, or with size, mode and
/// mtime too).
pub fn render<'a>(
    dir: &str,
    names_only: bool,
    entries: impl ExactSizeIterator<Item = Line<'a>>,
    notes: &[String],
) -> String {
    let count = entries.len();
    // About 50 bytes a line with the stat, 20 without.
    let mut text = String::with_capacity(64 + count * if names_only { 24 } else { 56 });
    let columns = if names_only { "type path" } else { "type size mode mtime path" };
    let noun = if count == 1 { "entry" } else { "entries" };
    let _ = writeln!(text, "{}: {count} {noun} ({columns})", quoted(dir));
    for line in entries {
        text.push_str(line.kind);
        text.push(' ');
        if let Some(stat) = &line.stat {
            let _ = write!(text, "{} {} {} ", stat.size, stat.mode, stat.mtime);
        }
        text.push_str(&quoted(line.path));
        if let Some(target) = line.symlink_target {
            text.push_str(" -> ");
            text.push_str(&quoted(target));
        }
        text.push('\n');
    }
    for note in notes {
        let _ = writeln!(text, "note: {note}");
    }
    text.truncate(text.trim_end().len());
    text
}

/// A name as is, or quoted with escapes when it holds a line break or another control
/// character that would break the one-entry-per-line shape.
fn quoted(name: &str) -> std::borrow::Cow<'_, str> {
    if name.chars().any(char::is_control) { format!("{name:?}").into() } else { name.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(path: &'a str, kind: &'a str, stat: Option<Stat<'a>>, target: Option<&'a str>) -> Line<'a> {
        Line { path, kind, stat, symlink_target: target }
    }

    #[test]
    fn full_listing_names_its_columns_and_shows_link_targets() {
        let stat = |size| Some(Stat { size, mode: "0644", mtime: "2026-11-22T08:00:00.000Z" });
        let entries = vec![
            line("a.txt", "file", stat(3), None),
            line("d", "dir", stat(4096), None),
            line("l", "symlink", stat(5), Some("a.txt")),
        ];
        let text = render("/work", false, entries.into_iter(), &[]);
        assert_eq!(
            text,
            "/work: 3 entries (type size mode mtime path)\n\
             file 3 0644 2026-11-22T08:00:00.000Z a.txt\n\
             dir 4096 0644 2026-11-22T08:00:00.000Z d\n\
             symlink 5 0644 2026-11-22T08:00:00.000Z l -> a.txt"
        );
    }

    #[test]
    fn names_only_is_type_and_path_and_notes_follow() {
        let entries = vec![line("one", "file", None, None)];
        let notes = ["the listing stopped at 1 entries".to_owned()];
        let text = render("/w", true, entries.into_iter(), &notes);
        assert_eq!(text, "/w: 1 entry (type path)\nfile one\nnote: the listing stopped at 1 entries");
        assert_eq!(render("/empty", true, Vec::new().into_iter(), &[]), "/empty: 0 entries (type path)");
    }

    #[test]
    fn control_characters_cannot_break_a_line() {
        let entries =
            vec![line("a\nfile other 1", "file", None, None), line("tab\there", "file", None, None)];
        let text = render("/w", true, entries.into_iter(), &[]);
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.contains(r#"file "a\nfile other 1""#), "{text}");
        assert!(text.contains(r#"file "tab\there""#), "{text}");
    }
}
