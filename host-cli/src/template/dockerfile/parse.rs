//! A small, strict Dockerfile parser: the instructions `atoll template build
//! --dockerfile` runs, each with the line it starts on. Continuation lines (`\` at the
//! end), comments and blank lines are handled as docker does; an instruction atoll does
//! not run (HEALTHCHECK, ONBUILD, SHELL, VOLUME, multi-stage `COPY --from`...) is refused
//! naming its line, never ignored.

use std::collections::BTreeMap;

/// One instruction, after `ARG`/`ENV` substitution where docker does it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instruction {
    /// `FROM REF`: an image reference or an installed atoll template.
    From(String),
    /// `RUN`: a shell line (`/bin/sh -c`) or an exec-form argv.
    Run(Command),
    /// `COPY SRC... DEST` (`add`: `ADD`, which unpacks a local tar).
    Copy {
        /// Sources, relative to the context.
        sources: Vec<String>,
        /// Where in the guest (relative: to the WORKDIR).
        dest: String,
        /// `ADD`.
        add: bool,
    },
    /// `ENV K=V...`.
    Env(Vec<(String, String)>),
    /// `ARG NAME[=DEFAULT]`.
    Arg(String, Option<String>),
    /// `WORKDIR PATH`.
    Workdir(String),
    /// `USER NAME[:GROUP]`.
    User(String),
    /// `ENTRYPOINT`.
    Entrypoint(Command),
    /// `CMD`.
    Cmd(Command),
    /// `LABEL K=V...`.
    Label(Vec<(String, String)>),
    /// `EXPOSE PORT[/PROTO]...`.
    Expose(Vec<String>),
}

/// A command in shell form or exec form.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// `RUN make all`: run with `/bin/sh -c`.
    Shell(String),
    /// `RUN ["make", "all"]`: run directly.
    Exec(Vec<String>),
}

impl Command {
    /// As the argv the image's config records (`/bin/sh -c LINE` for the shell form).
    pub fn argv(&self) -> Vec<String> {
        match self {
            Command::Shell(s) => vec!["/bin/sh".into(), "-c".into(), s.clone()],
            Command::Exec(v) => v.clone(),
        }
    }
}

/// One instruction and the line it starts on (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The line.
    pub line: usize,
    /// The instruction's text as written (joined continuation lines), for messages.
    pub text: String,
    /// The instruction.
    pub instruction: Instruction,
}

/// Why a Dockerfile was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Dockerfile line {line}: {why}")]
pub struct ParseError {
    /// The line (1-based).
    pub line: usize,
    /// What is wrong, and what to do.
    pub why: String,
}

const SUPPORTED: &str = "FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, ENTRYPOINT, CMD, LABEL, EXPOSE";

/// Parses `text`; `build_args` are `--build-arg K=V` values, which override ARG defaults
/// (and must name an ARG of the file).
pub fn parse(text: &str, build_args: &BTreeMap<String, String>) -> Result<Vec<Step>, ParseError> {
    let mut steps = Vec::new();
    // ARGs in scope (before FROM: usable in FROM only, as docker says) and ENV so far.
    let mut args: BTreeMap<String, String> = BTreeMap::new();
    let mut declared: Vec<String> = Vec::new();
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let mut seen_from = false;
    for (line, raw) in logical_lines(text)? {
        let err = |why: String| ParseError { line, why };
        let (word, rest) = match raw.split_once(|c: char| c.is_ascii_whitespace()) {
            Some((w, r)) => (w, r.trim()),
            None => (raw.as_str(), ""),
        };
        let keyword = word.to_ascii_uppercase();
        if rest.is_empty() {
            return Err(err(format!("{keyword} needs arguments")));
        }
        let vars = |args: &BTreeMap<String, String>, env: &BTreeMap<String, String>| {
            let mut v = args.clone();
            v.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
            v
        };
        let subst = |s: &str, vars: &BTreeMap<String, String>| substitute(s, vars).map_err(err);
        if !seen_from && keyword != "FROM" && keyword != "ARG" {
            return Err(err(format!(
                "{keyword} before FROM; a Dockerfile starts with FROM (ARGs may come before it)"
            )));
        }
        let instruction = match keyword.as_str() {
            "FROM" => {
                if seen_from {
                    return Err(err("a second FROM: multi-stage builds are not supported; build each stage as its own template and start the next FROM it".into()));
                }
                let words: Vec<&str> = rest.split_whitespace().collect();
                if words.iter().any(|w| w.starts_with("--")) {
                    return Err(err(
                        "FROM flags (--platform...) are not supported; linux/amd64 is always used".into(),
                    ));
                }
                let reference = match words.as_slice() {
                    [r] => *r,
                    [r, as_, _] if as_.eq_ignore_ascii_case("as") => r,
                    _ => {
                        return Err(err("FROM takes one image reference (and an optional `AS name`)".into()));
                    }
                };
                seen_from = true;
                let reference = subst(reference, &args)?;
                // ARGs declared before FROM are not in scope after it (unless declared again).
                args.clear();
                Instruction::From(reference)
            }
            "RUN" => Instruction::Run(command(rest, "RUN").map_err(err)?),
            "CMD" => Instruction::Cmd(command(rest, "CMD").map_err(err)?),
            "ENTRYPOINT" => Instruction::Entrypoint(command(rest, "ENTRYPOINT").map_err(err)?),
            "COPY" | "ADD" => {
                let words = match json_array(rest) {
                    Some(Ok(v)) => v,
                    Some(Err(e)) => return Err(err(e)),
                    None => rest.split_whitespace().map(str::to_owned).collect(),
                };
                if let Some(flag) = words.iter().find(|w| w.starts_with("--")) {
                    return Err(err(format!(
                        "{keyword} {flag} is not supported (only local files from the context, owned by root; chown them in a RUN)"
                    )));
                }
                let vars = vars(&args, &env);
                let mut words = words.iter().map(|w| subst(w, &vars)).collect::<Result<Vec<_>, _>>()?;
                if words.len() < 2 {
                    return Err(err(format!("{keyword} needs at least one source and a destination")));
                }
                let dest = words.pop().expect("two or more");
                if keyword == "ADD"
                    && let Some(url) = words.iter().find(|w| w.contains("://") || w.starts_with("git@"))
                {
                    return Err(err(format!(
                        "ADD of a URL (`{url}`) is not supported; download it in a RUN"
                    )));
                }
                Instruction::Copy { sources: words, dest, add: keyword == "ADD" }
            }
            "ENV" => {
                let pairs = pairs(rest, "ENV", &vars(&args, &env)).map_err(err)?;
                env.extend(pairs.iter().cloned());
                Instruction::Env(pairs)
            }
            "LABEL" => Instruction::Label(pairs(rest, "LABEL", &vars(&args, &env)).map_err(err)?),
            "ARG" => {
                if rest.split_whitespace().count() != 1 {
                    return Err(err("ARG takes one NAME or NAME=DEFAULT".into()));
                }
                let (name, default) = match rest.split_once('=') {
                    Some((n, d)) => (n, Some(unquote(&subst(d, &vars(&args, &env))?).map_err(err)?)),
                    None => (rest, None),
                };
                if !is_var_name(name) {
                    return Err(err(format!("`{name}` is not a valid ARG name")));
                }
                declared.push(name.to_owned());
                if let Some(v) = build_args.get(name).cloned().or(default.clone()) {
                    args.insert(name.to_owned(), v);
                }
                Instruction::Arg(name.to_owned(), args.get(name).cloned())
            }
            "WORKDIR" => Instruction::Workdir(subst(rest, &vars(&args, &env))?),
            "USER" => {
                let user = subst(rest, &vars(&args, &env))?;
                if user.split_whitespace().count() != 1 {
                    return Err(err("USER takes one NAME[:GROUP] or UID[:GID]".into()));
                }
                Instruction::User(user)
            }
            "EXPOSE" => {
                let vars = vars(&args, &env);
                let ports =
                    rest.split_whitespace().map(|p| subst(p, &vars)).collect::<Result<Vec<_>, _>>()?;
                for p in &ports {
                    let (num, proto) = p.split_once('/').unwrap_or((p, "tcp"));
                    if num.parse::<u16>().map_or(true, |n| n == 0) || !matches!(proto, "tcp" | "udp") {
                        return Err(err(format!("EXPOSE `{p}` is not PORT or PORT/tcp or PORT/udp")));
                    }
                }
                Instruction::Expose(ports)
            }
            "MAINTAINER" | "HEALTHCHECK" | "ONBUILD" | "SHELL" | "STOPSIGNAL" | "VOLUME" => {
                return Err(err(format!(
                    "{keyword} is not supported by atoll (it runs {SUPPORTED}); remove it"
                )));
            }
            _ => {
                return Err(err(format!("unknown instruction `{word}`; atoll runs {SUPPORTED}")));
            }
        };
        steps.push(Step { line, text: raw.clone(), instruction });
    }
    if !seen_from {
        return Err(ParseError { line: 1, why: "no FROM; a Dockerfile starts with FROM IMAGE".into() });
    }
    if let Some(unused) = build_args.keys().find(|k| !declared.contains(k)) {
        return Err(ParseError {
            line: 1,
            why: format!("--build-arg {unused} names no ARG of the Dockerfile"),
        });
    }
    Ok(steps)
}

/// Instructions with their continuation lines joined, comments and blank lines dropped.
fn logical_lines(text: &str) -> Result<Vec<(usize, String)>, ParseError> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim();
        if trimmed.starts_with('#') {
            if current.is_none() && out.is_empty() && is_escape_directive(trimmed) {
                return Err(ParseError {
                    line: n,
                    why: "only the default escape character `\\` is supported".into(),
                });
            }
            continue;
        }
        if trimmed.is_empty() && current.is_none() {
            continue;
        }
        if trimmed.contains("<<")
            && current.is_none()
            && trimmed.split_whitespace().nth(1).is_some_and(|w| w.starts_with("<<"))
        {
            return Err(ParseError {
                line: n,
                why: "heredocs (`<<EOF`) are not supported; use a RUN line or COPY a script".into(),
            });
        }
        let (body, continues) = match trimmed.strip_suffix('\\') {
            Some(b) => (b, true),
            None => (trimmed, false),
        };
        match &mut current {
            Some((_, s)) => {
                s.push(' ');
                s.push_str(body.trim());
            }
            None => current = Some((n, body.trim().to_owned())),
        }
        if !continues {
            out.extend(current.take().filter(|(_, s)| !s.is_empty()));
        }
    }
    if let Some((line, _)) = current {
        return Err(ParseError {
            line,
            why: "the last instruction ends with `\\` and nothing follows".into(),
        });
    }
    Ok(out)
}

fn is_escape_directive(comment: &str) -> bool {
    let body = comment.trim_start_matches('#').trim().to_ascii_lowercase();
    body.strip_prefix("escape")
        .is_some_and(|r| r.trim_start().strip_prefix('=').is_some_and(|v| v.trim() != "\\"))
}

/// Exec form (a JSON array of strings) or shell form.
fn command(rest: &str, what: &str) -> Result<Command, String> {
    match json_array(rest) {
        Some(Ok(v)) if v.is_empty() => Err(format!("{what} [] runs nothing")),
        Some(Ok(v)) => Ok(Command::Exec(v)),
        Some(Err(e)) => Err(e),
        None => Ok(Command::Shell(rest.to_owned())),
    }
}

/// `Some` when `s` looks like a JSON array: its strings, or why it is not one.
fn json_array(s: &str) -> Option<Result<Vec<String>, String>> {
    if !s.starts_with('[') {
        return None;
    }
    Some(
        serde_json::from_str::<Vec<String>>(s)
            .map_err(|e| format!("`{s}` is not a JSON array of strings ({e})")),
    )
}

/// `K=V K2="v 2"` (or the old `K V` form, one pair) with substitution in the values.
fn pairs(rest: &str, what: &str, vars: &BTreeMap<String, String>) -> Result<Vec<(String, String)>, String> {
    let first = rest.split_whitespace().next().unwrap_or("");
    if !first.contains('=') {
        let (k, v) = rest.split_once(char::is_whitespace).ok_or(format!("{what} {first} needs a value"))?;
        check_key(k, what)?;
        return Ok(vec![(k.to_owned(), unquote(&substitute(v.trim(), vars)?)?)]);
    }
    let mut out = Vec::new();
    for word in split_words(rest)? {
        let (k, v) = word.split_once('=').ok_or(format!("{what} `{word}` is not KEY=VALUE"))?;
        let k = unquote(k)?;
        check_key(&k, what)?;
        out.push((k, unquote(&substitute(v, vars)?)?));
    }
    Ok(out)
}

fn check_key(k: &str, what: &str) -> Result<(), String> {
    if what == "ENV" && !is_var_name(k) {
        return Err(format!("`{k}` is not a valid ENV name"));
    }
    if k.is_empty() || k.chars().any(char::is_control) {
        return Err(format!("{what} has an empty or invalid key"));
    }
    Ok(())
}

/// Splits on whitespace outside quotes (the quotes stay, [`unquote`] removes them).
fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, '\\') => {
                cur.push(c);
                cur.extend(chars.next());
            }
            (None, '"' | '\'') => {
                quote = Some(c);
                cur.push(c);
            }
            (Some(q), c) if c == q => {
                quote = None;
                cur.push(c);
            }
            (None, c) if c.is_whitespace() => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            _ => cur.push(c),
        }
    }
    if quote.is_some() {
        return Err(format!("unterminated quote in `{s}`"));
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    Ok(words)
}

/// Removes quotes and backslash escapes: `"a b"` -> `a b`, `a\ b` -> `a b`.
fn unquote(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut quote: Option<char> = None;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some('\''), '\'') => quote = None,
            (Some('\''), c) => out.push(c),
            (_, '\\') => out.extend(chars.next()),
            (None, '"' | '\'') => quote = Some(c),
            (Some('"'), '"') => quote = None,
            _ => out.push(c),
        }
    }
    if quote.is_some() {
        return Err(format!("unterminated quote in `{s}`"));
    }
    Ok(out)
}

fn is_var_name(s: &str) -> bool {
    let mut b = s.bytes();
    b.next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Docker's substitution: `$V`, `${V}`, `${V:-default}`, `${V:+alt}`; `\$` is a
/// literal `$`; an unset variable is empty.
pub fn substitute(s: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'$') => {
                out.push('$');
                chars.next();
            }
            '$' if chars.peek() == Some(&'{') => {
                chars.next();
                let mut inner = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => inner.push(c),
                        None => return Err(format!("`${{{inner}` has no closing `}}`")),
                    }
                }
                let (name, op) = match inner.find(":-").or_else(|| inner.find(":+")) {
                    Some(i) => (&inner[..i], Some((&inner[i..i + 2], &inner[i + 2..]))),
                    None => (inner.as_str(), None),
                };
                if !is_var_name(name) {
                    return Err(format!(
                        "`${{{inner}}}` is not a supported substitution (${{V}}, ${{V:-default}}, ${{V:+alt}})"
                    ));
                }
                let value = vars.get(name).filter(|v| !v.is_empty());
                match op {
                    None => out.push_str(vars.get(name).map_or("", String::as_str)),
                    Some((":-", d)) => out.push_str(value.map_or(d, String::as_str)),
                    Some((_, alt)) => out.push_str(if value.is_some() { alt } else { "" }),
                }
            }
            '$' if chars.peek().is_some_and(|c| c.is_ascii_alphabetic() || *c == '_') => {
                let mut name = String::new();
                while let Some(c) = chars.peek().copied().filter(|c| c.is_ascii_alphanumeric() || *c == '_') {
                    name.push(c);
                    chars.next();
                }
                out.push_str(vars.get(&name).map_or("", String::as_str));
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Vec<Instruction>, ParseError> {
        parse(text, &BTreeMap::new()).map(|s| s.into_iter().map(|s| s.instruction).collect())
    }

    #[test]
    fn every_supported_instruction() {
        let text = "# comment\nARG BASE=img:1\nFROM $BASE AS build\nARG V=2\nENV A=1 B=\"two words\" \\\n  C=${V}\n\
                    ENV OLD old style\nRUN echo $A \\\n && true\nRUN [\"sh\", \"-c\", \"x\"]\nCOPY a b /dst/\n\
                    ADD t.tar /opt\nWORKDIR /w/$A\nUSER app:app\nENTRYPOINT [\"/bin/app\"]\nCMD --serve\n\
                    LABEL org.x=\"y z\"\nEXPOSE 80 53/udp\n";
        let got = p(text).unwrap();
        assert_eq!(got[1], Instruction::From("img:1".into()));
        assert_eq!(got[2], Instruction::Arg("V".into(), Some("2".into())));
        assert_eq!(
            got[3],
            Instruction::Env(vec![
                ("A".into(), "1".into()),
                ("B".into(), "two words".into()),
                ("C".into(), "2".into())
            ])
        );
        assert_eq!(got[4], Instruction::Env(vec![("OLD".into(), "old style".into())]));
        assert_eq!(got[5], Instruction::Run(Command::Shell("echo $A && true".into())));
        assert_eq!(got[6], Instruction::Run(Command::Exec(vec!["sh".into(), "-c".into(), "x".into()])));
        assert_eq!(
            got[7],
            Instruction::Copy { sources: vec!["a".into(), "b".into()], dest: "/dst/".into(), add: false }
        );
        assert_eq!(
            got[8],
            Instruction::Copy { sources: vec!["t.tar".into()], dest: "/opt".into(), add: true }
        );
        assert_eq!(got[9], Instruction::Workdir("/w/1".into()));
        assert_eq!(got[10], Instruction::User("app:app".into()));
        assert_eq!(got[11], Instruction::Entrypoint(Command::Exec(vec!["/bin/app".into()])));
        assert_eq!(got[12], Instruction::Cmd(Command::Shell("--serve".into())));
        assert_eq!(got[13], Instruction::Label(vec![("org.x".into(), "y z".into())]));
        assert_eq!(got[14], Instruction::Expose(vec!["80".into(), "53/udp".into()]));
    }

    #[test]
    fn build_args_override_defaults_and_must_exist() {
        let args = BTreeMap::from([("V".to_owned(), "9".to_owned())]);
        let steps = parse("FROM x\nARG V=1\nENV W=$V\n", &args).unwrap();
        assert_eq!(steps[2].instruction, Instruction::Env(vec![("W".into(), "9".into())]));
        let args = BTreeMap::from([("NOPE".to_owned(), "1".to_owned())]);
        assert!(parse("FROM x\n", &args).unwrap_err().why.contains("--build-arg NOPE"));
    }

    #[test]
    fn refusals_name_the_line() {
        let e = p("FROM x\nRUN true\nFROBNICATE now\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.to_string().contains("unknown instruction `FROBNICATE`"), "{e}");
        let e = p("FROM x\nHEALTHCHECK CMD true\n").unwrap_err();
        assert!(e.to_string().contains("line 2: HEALTHCHECK is not supported"), "{e}");
        assert!(p("FROM x\nFROM y\n").unwrap_err().why.contains("multi-stage"));
        assert!(p("FROM x\nCOPY --from=a b c\n").unwrap_err().why.contains("--from=a is not supported"));
        assert!(p("RUN x\n").unwrap_err().why.contains("before FROM"));
        assert!(p("").unwrap_err().why.contains("no FROM"));
        assert!(p("FROM x\nRUN a \\").unwrap_err().why.contains("nothing follows"));
        assert!(p("FROM x\nEXPOSE 99999\n").unwrap_err().why.contains("EXPOSE"));
        assert!(p("FROM x\nRUN <<EOF\nx\nEOF\n").unwrap_err().why.contains("heredoc"));
        assert!(p("FROM x\nADD https://x/y /z\n").unwrap_err().why.contains("URL"));
    }

    #[test]
    fn substitution() {
        let vars = BTreeMap::from([("A".to_owned(), "1".to_owned()), ("E".to_owned(), String::new())]);
        assert_eq!(substitute("$A-${A}-${E:-d}-${A:+alt}-${N}-\\$A", &vars).unwrap(), "1-1-d-alt--$A");
        assert!(substitute("${A", &vars).is_err());
    }
}
