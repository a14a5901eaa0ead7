//! Key names and text as QEMU key codes (`QKeyCode`), for a US keyboard layout: xdotool's
//! names (`ctrl+l`, `Return`, `Page_Down`, `super`, `F5`; case-insensitive) and
//! printable ASCII. Anything else is refused before a single key is sent.

/// One key as QEMU names it, with Shift held around it or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stroke {
    /// QEMU's `QKeyCode` name.
    pub qcode: &'static str,
    /// Shift is held around it (an upper-case letter, `!`, `:`...).
    pub shift: bool,
}

/// Why a key or a text cannot be typed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A key name nobody knows.
    #[error(
        "unknown key `{0}`; use xdotool names joined with `+`, such as ctrl+l, Return, Escape, Tab, \
         BackSpace, Delete, Home, End, Page_Up, Page_Down, Left, Up, F1..F12, super, alt, shift, \
         or one character such as a or /"
    )]
    Unknown(String),
    /// A character the US layout has no key for.
    #[error(
        "the keyboard (US layout) cannot type {ch:?} (U+{code:04X}) at character {index} of the text; \
         type printable ASCII, newlines and tabs, or write other text into a guest file and open it"
    )]
    Untypable {
        /// The character.
        ch: char,
        /// Its code point.
        code: u32,
        /// Its position in the text (0-based, in characters).
        index: usize,
    },
    /// Nothing to type or press.
    #[error("{0} is empty; give at least one key")]
    Empty(&'static str),
}

/// Printable ASCII and whitespace on a US layout.
fn char_stroke(c: char) -> Option<Stroke> {
    let plain = |qcode| Some(Stroke { qcode, shift: false });
    let shifted = |qcode| Some(Stroke { qcode, shift: true });
    const LETTERS: [&str; 26] = [
        "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t",
        "u", "v", "w", "x", "y", "z",
    ];
    const DIGITS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    match c {
        'a'..='z' => plain(LETTERS[(c as u8 - b'a') as usize]),
        'A'..='Z' => shifted(LETTERS[(c as u8 - b'A') as usize]),
        '0'..='9' => plain(DIGITS[(c as u8 - b'0') as usize]),
        ' ' => plain("spc"),
        '\n' => plain("ret"),
        '\t' => plain("tab"),
        '-' => plain("minus"),
        '=' => plain("equal"),
        '[' => plain("bracket_left"),
        ']' => plain("bracket_right"),
        '\\' => plain("backslash"),
        ';' => plain("semicolon"),
        '\'' => plain("apostrophe"),
        '`' => plain("grave_accent"),
        ',' => plain("comma"),
        '.' => plain("dot"),
        '/' => plain("slash"),
        '!' => shifted("1"),
        '@' => shifted("2"),
        '#' => shifted("3"),
        '$' => shifted("4"),
        '%' => shifted("5"),
        '^' => shifted("6"),
        '&' => shifted("7"),
        '*' => shifted("8"),
        '(' => shifted("9"),
        ')' => shifted("0"),
        '_' => shifted("minus"),
        '+' => shifted("equal"),
        '{' => shifted("bracket_left"),
        '}' => shifted("bracket_right"),
        '|' => shifted("backslash"),
        ':' => shifted("semicolon"),
        '"' => shifted("apostrophe"),
        '~' => shifted("grave_accent"),
        '<' => shifted("comma"),
        '>' => shifted("dot"),
        '?' => shifted("slash"),
        _ => None,
    }
}

/// xdotool's (X keysym) names, lower-cased, and a few common aliases.
fn named(name: &str) -> Option<&'static str> {
    Some(match name {
        "return" | "enter" | "ret" => "ret",
        "kp_enter" => "kp_enter",
        "escape" | "esc" => "esc",
        "tab" | "iso_left_tab" => "tab",
        "backspace" => "backspace",
        "delete" | "del" => "delete",
        "insert" => "insert",
        "home" => "home",
        "end" => "end",
        "page_up" | "prior" | "pageup" => "pgup",
        "page_down" | "next" | "pagedown" => "pgdn",
        "left" => "left",
        "right" => "right",
        "up" => "up",
        "down" => "down",
        "space" => "spc",
        "ctrl" | "control" | "control_l" | "ctrl_l" => "ctrl",
        "control_r" | "ctrl_r" => "ctrl_r",
        "shift" | "shift_l" => "shift",
        "shift_r" => "shift_r",
        "alt" | "alt_l" | "option" => "alt",
        "alt_r" | "iso_level3_shift" => "alt_r",
        "super" | "super_l" | "meta" | "meta_l" | "win" | "cmd" | "command" => "meta_l",
        "super_r" | "meta_r" => "meta_r",
        "menu" => "menu",
        "caps_lock" => "caps_lock",
        "num_lock" => "num_lock",
        "scroll_lock" => "scroll_lock",
        "print" => "print",
        "pause" => "pause",
        "minus" => "minus",
        "equal" => "equal",
        "comma" => "comma",
        "period" => "dot",
        "slash" => "slash",
        "backslash" => "backslash",
        "semicolon" => "semicolon",
        "apostrophe" => "apostrophe",
        "grave" => "grave_accent",
        "bracketleft" => "bracket_left",
        "bracketright" => "bracket_right",
        "f1" => "f1",
        "f2" => "f2",
        "f3" => "f3",
        "f4" => "f4",
        "f5" => "f5",
        "f6" => "f6",
        "f7" => "f7",
        "f8" => "f8",
        "f9" => "f9",
        "f10" => "f10",
        "f11" => "f11",
        "f12" => "f12",
        _ => return None,
    })
}

/// One key of a combination: a name or a single character.
fn key(part: &str) -> Result<Stroke, KeyError> {
    let unknown = || KeyError::Unknown(part.chars().take(40).collect());
    if let Some(qcode) = named(&part.to_ascii_lowercase()) {
        return Ok(Stroke { qcode, shift: false });
    }
    if part == "plus" {
        return Ok(Stroke { qcode: "equal", shift: true });
    }
    let mut chars = part.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if !c.is_whitespace() => char_stroke(c).ok_or_else(unknown),
        _ => Err(unknown()),
    }
}

/// A combination such as `ctrl+shift+t`: its keys in the order they go down (they come
/// up in reverse). Shift taken by a character (`ctrl+A`) becomes a key of its own.
pub fn combo(text: &str) -> Result<Vec<&'static str>, KeyError> {
    if text.trim().is_empty() {
        return Err(KeyError::Empty("the key"));
    }
    // `ctrl++` means ctrl and plus.
    let text = text.trim();
    let parts: Vec<&str> = if let Some(head) = text.strip_suffix("++") {
        head.split('+').chain(["plus"]).collect()
    } else {
        text.split('+').collect()
    };
    let mut out: Vec<&'static str> = Vec::new();
    for part in parts {
        if part.is_empty() {
            return Err(KeyError::Unknown(text.chars().take(40).collect()));
        }
        let s = key(part)?;
        if s.shift && !out.contains(&"shift") {
            out.push("shift");
        }
        out.push(s.qcode);
    }
    Ok(out)
}

/// Combinations separated by spaces, as `xdotool key` takes them (`ctrl+a ctrl+c`).
pub fn combos(text: &str) -> Result<Vec<Vec<&'static str>>, KeyError> {
    if text.trim().is_empty() {
        return Err(KeyError::Empty("the key"));
    }
    text.split_whitespace().map(combo).collect()
}

/// Every character of `text` as a stroke; the first one the layout lacks is an error.
pub fn text(text: &str) -> Result<Vec<Stroke>, KeyError> {
    if text.is_empty() {
        return Err(KeyError::Empty("the text"));
    }
    let text = text.replace("\r\n", "\n");
    text.chars()
        .enumerate()
        .map(|(index, ch)| char_stroke(ch).ok_or(KeyError::Untypable { ch, code: ch as u32, index }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_combinations() {
        assert_eq!(combo("ctrl+l").unwrap(), ["ctrl", "l"]);
        assert_eq!(combo("Control_L+Shift+T").unwrap(), ["ctrl", "shift", "t"]);
        assert_eq!(combo("ctrl+A").unwrap(), ["ctrl", "shift", "a"]);
        assert_eq!(combo("ctrl++").unwrap(), ["ctrl", "shift", "equal"]);
        assert_eq!(combo("Return").unwrap(), ["ret"]);
        assert_eq!(combo("Page_Down").unwrap(), ["pgdn"]);
        assert_eq!(combo("super").unwrap(), ["meta_l"]);
        assert_eq!(combos("ctrl+a ctrl+c").unwrap(), [vec!["ctrl", "a"], vec!["ctrl", "c"]]);
        for bad in ["ctrl+nope", "ctrl+", "+", "Hyper_Q", "é", "ctrl+ab"] {
            let e = combo(bad).unwrap_err().to_string();
            assert!(e.starts_with("unknown key") && e.contains("ctrl+l"), "{bad}: {e}");
        }
        assert!(matches!(combos("  "), Err(KeyError::Empty(_))));
    }

    #[test]
    fn text_is_typed_on_a_us_layout_or_refused_with_the_character() {
        let s = text("Hi!\n").unwrap();
        assert_eq!(
            s,
            [
                Stroke { qcode: "h", shift: true },
                Stroke { qcode: "i", shift: false },
                Stroke { qcode: "1", shift: true },
                Stroke { qcode: "ret", shift: false }
            ]
        );
        // Every printable ASCII character has a key.
        for c in (0x20u8..0x7f).map(char::from) {
            assert!(char_stroke(c).is_some(), "{c:?}");
        }
        let e = text("naïve").unwrap_err();
        assert_eq!(e, KeyError::Untypable { ch: 'ï', code: 0xef, index: 2 });
        assert!(e.to_string().contains("U+00EF"), "{e}");
        assert!(text("").is_err());
    }
}
