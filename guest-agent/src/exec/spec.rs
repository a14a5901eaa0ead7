//! Checking a request before anything is started: what to run, where, as whom, how long.

use std::path::{Path, PathBuf};
use std::time::Duration;

use atoll_proto::limits::{DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT_MS, MAX_OUTPUT_LIMIT, MAX_TIMEOUT_MS};

use super::ExecError;
use super::user::{self, Credentials};

/// PATH for commands when the agent's own environment has none (as PID 1 it has none).
pub(crate) const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A validated command, ready to spawn.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Program and arguments; `argv[0]` is looked up in PATH.
    pub argv: Vec<String>,
    /// True for `/bin/sh -c`.
    pub shell: bool,
    /// Absolute working directory that exists.
    pub cwd: PathBuf,
    /// Variables set on top of the agent's environment.
    pub env: Vec<(String, String)>,
    /// Who to run as; `None` keeps the agent's user.
    pub user: Option<Credentials>,
    /// The user as asked for, for messages.
    pub user_asked: Option<String>,
    /// One-line rendering for listings.
    pub display: String,
}

impl Spec {
    /// Validates `cmd`: exactly one of shell/argv, absolute existing cwd, sane env, known user.
    pub fn from_command(cmd: Option<&super::Command>) -> Result<Spec, ExecError> {
        let cmd = cmd.ok_or(ExecError::NoCommand)?;
        let (argv, shell) = match (cmd.shell.is_empty(), cmd.argv.is_empty()) {
            (true, true) => return Err(ExecError::NoCommand),
            (false, false) => return Err(ExecError::ShellAndArgv),
            (false, true) => (vec!["/bin/sh".to_owned(), "-c".to_owned(), cmd.shell.clone()], true),
            (true, false) => (cmd.argv.clone(), false),
        };
        if argv[0].is_empty() {
            return Err(ExecError::EmptyProgram);
        }
        for (i, arg) in argv.iter().enumerate() {
            no_nul(arg, || if shell { "the shell command".to_owned() } else { format!("argv[{i}]") })?;
        }
        let cwd = check_cwd(&cmd.cwd)?;
        let mut env = Vec::with_capacity(cmd.env.len() + 1);
        for (k, v) in &cmd.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(ExecError::BadEnvName(k.clone()));
            }
            no_nul(v, || format!("the value of environment variable `{k}`"))?;
            env.push((k.clone(), v.clone()));
        }
        if std::env::var_os("PATH").is_none() && !cmd.env.contains_key("PATH") {
            env.push(("PATH".to_owned(), DEFAULT_PATH.to_owned()));
        }
        let (user, user_asked) = match cmd.user.as_str() {
            "" => (None, None),
            name => {
                let creds = user::resolve(name)?;
                for (key, value) in [("HOME", &creds.home), ("USER", &creds.name), ("LOGNAME", &creds.name)] {
                    if let Some(value) = value
                        && !cmd.env.contains_key(key)
                    {
                        env.push((key.to_owned(), value.clone()));
                    }
                }
                (Some(creds), Some(name.to_owned()))
            }
        };
        let display = render(&argv, shell);
        Ok(Spec { argv, shell, cwd, env, user, user_asked, display })
    }

    /// Bytes of argv and the added env as `execve` sees them, for messages.
    pub fn command_line_bytes(&self) -> usize {
        let argv: usize = self.argv.iter().map(|a| a.len() + 1).sum();
        argv + self.env.iter().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>()
    }

    /// `argv[0]`, for messages.
    pub fn program(&self) -> &str {
        &self.argv[0]
    }
}

/// `timeout_ms` of an Exec: 0 is the default, over the cap is refused.
pub fn exec_timeout(ms: u32) -> Result<Duration, ExecError> {
    match ms {
        0 => Ok(Duration::from_millis(DEFAULT_TIMEOUT_MS.into())),
        ms if ms > MAX_TIMEOUT_MS => Err(ExecError::TimeoutTooLong { asked: ms, max: MAX_TIMEOUT_MS }),
        ms => Ok(Duration::from_millis(ms.into())),
    }
}

/// `output_limit` of an Exec: 0 is the default, over the cap is refused.
pub fn output_limit(limit: u32) -> Result<usize, ExecError> {
    match limit {
        0 => Ok(DEFAULT_OUTPUT_LIMIT as usize),
        n if n > MAX_OUTPUT_LIMIT => Err(ExecError::OutputLimitTooLarge { asked: n, max: MAX_OUTPUT_LIMIT }),
        n => Ok(n as usize),
    }
}

fn no_nul(s: &str, what: impl FnOnce() -> String) -> Result<(), ExecError> {
    if s.contains('\0') { Err(ExecError::NulByte { what: what() }) } else { Ok(()) }
}

fn check_cwd(cwd: &str) -> Result<PathBuf, ExecError> {
    if cwd.is_empty() {
        return Ok(PathBuf::from("/"));
    }
    no_nul(cwd, || "the working directory".to_owned())?;
    let path = Path::new(cwd);
    if !path.is_absolute() {
        return Err(ExecError::RelativeCwd(cwd.to_owned()));
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(path.to_owned()),
        Ok(_) => Err(ExecError::CwdNotDir(path.to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ExecError::CwdMissing(path.to_owned())),
        Err(source) => Err(ExecError::CwdUnusable { path: path.to_owned(), source }),
    }
}

/// One line: the shell text, or argv with arguments quoted where needed; newlines escaped.
fn render(argv: &[String], shell: bool) -> String {
    const MAX: usize = 200;
    let line = if shell {
        argv[2].clone()
    } else {
        let quoted: Vec<String> = argv
            .iter()
            .map(|a| {
                let plain =
                    !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
                if plain { a.clone() } else { format!("'{}'", a.replace('\'', r"'\''")) }
            })
            .collect();
        quoted.join(" ")
    };
    let mut line = line.replace('\n', "\\n");
    if line.len() > MAX {
        let cut = (0..=MAX).rev().find(|i| line.is_char_boundary(*i)).unwrap_or(0);
        line.truncate(cut);
        line.push('…');
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_one_line() {
        let argv = ["echo", "a b", "it's", "x\ny"].map(String::from);
        assert_eq!(render(&argv, false), r"echo 'a b' 'it'\''s' 'x\ny'");
        assert_eq!(render(&["/bin/sh", "-c", "ls\npwd"].map(String::from), true), r"ls\npwd");
    }

    #[test]
    fn limits_have_defaults_and_caps() {
        assert_eq!(exec_timeout(0).unwrap(), Duration::from_secs(60));
        assert!(matches!(exec_timeout(600_001), Err(ExecError::TimeoutTooLong { .. })));
        assert_eq!(output_limit(0).unwrap(), 32 * 1024);
        assert!(matches!(output_limit(MAX_OUTPUT_LIMIT + 1), Err(ExecError::OutputLimitTooLarge { .. })));
    }
}
