//! A secret's value when the swap needs it: the stored one, or the output of its host
//! command, run again once its cache time has passed (kept in this process's memory
//! only, never written). A jailed helper gets values from its runner,
//! [`super::runner`], which resolves them here.

use std::collections::HashMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::store::{Source, check_value};

/// How long a `--from-command` command may run.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// One command's output: (command, when it ran, its output).
type Cached = (String, Instant, String);

/// The outputs by secret name.
static CACHE: Mutex<Option<HashMap<String, Cached>>> = Mutex::new(None);

/// The value of the secret `name` from `source`.
pub fn resolve(name: &str, source: &Source) -> Result<String, String> {
    match source {
        Source::Value { value, .. } => Ok(value.clone()),
        Source::Command { command, cache_secs } => {
            let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
            let cache = cache.get_or_insert_with(HashMap::new);
            if let Some((cmd, at, value)) = cache.get(name)
                && cmd == command
                && at.elapsed() < Duration::from_secs(*cache_secs)
            {
                return Ok(value.clone());
            }
            let value = run(command)?;
            cache.insert(name.to_owned(), (command.clone(), Instant::now(), value.clone()));
            Ok(value)
        }
    }
}

/// Runs `command` with `sh -c` on the host; its stdout, without the trailing newline,
/// must be a valid value.
pub fn run(command: &str) -> Result<String, String> {
    let mut child = Command::new("/bin/sh")
        .args(["-c", command])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run `{command}`: {e}"))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > COMMAND_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("`{command}` ran longer than {} s", COMMAND_TIMEOUT.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for `{command}`: {e}")),
        }
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    if !status.success() {
        let err: String = err.trim().chars().take(300).collect();
        return Err(format!("`{command}` failed ({status}): {err}"));
    }
    let value = out.trim_end_matches(['\n', '\r']).to_owned();
    check_value(&value).map_err(|e| format!("`{command}` printed no usable value: {e}"))?;
    Ok(value)
}
