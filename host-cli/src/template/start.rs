//! A template's start command and ready check (`atoll template build --start
//! --ready-cmd CMD`), E2B-style: kept in the template's `image.json`, run by every
//! fresh boot of the template before the sandbox counts as ready. The start command
//! (the image's ENTRYPOINT followed by its CMD) becomes a background job; the ready
//! command is run every second until it exits 0. A template snapshot is saved only
//! after that, so `atoll create` restoring it starts with the service already up.

use std::time::{Duration, Instant};

use crate::client::{Client, ExecSpec};
use crate::vmm::dirs;
use atoll_proto::Address;

use super::dockerfile::ImageConfig;

/// How long a ready command may keep failing before the boot fails.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long one run of the ready command may take.
const READY_RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a template's start command or ready check failed (the sandbox is undone).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The agent could not be reached or refused the job.
    #[error("template `{template}`: could not start `{command}` at boot: {why}")]
    Start {
        /// The template.
        template: String,
        /// The start command.
        command: String,
        /// Why.
        why: String,
    },
    /// The ready command never succeeded.
    #[error(
        "template `{template}`: the ready command `{ready}` did not succeed within {} s (last: {last}); \
         the start job `{command}` wrote: {job_tail}",
        timeout.as_secs()
    )]
    NotReady {
        /// The template.
        template: String,
        /// The ready command.
        ready: String,
        /// The start command.
        command: String,
        /// How long it was tried.
        timeout: Duration,
        /// What its last run said.
        last: String,
        /// The end of the start job's output.
        job_tail: String,
    },
}

/// The start argv of `config`: ENTRYPOINT then CMD (or either alone).
pub fn start_argv(config: &ImageConfig) -> Option<Vec<String>> {
    let mut argv = config.entrypoint.clone().unwrap_or_default();
    argv.extend(config.cmd.clone().unwrap_or_default());
    (!argv.is_empty()).then_some(argv)
}

/// Runs template `template`'s start command and waits for its ready command, in the
/// sandbox whose agent is at `addr`; nothing when the template has neither.
pub async fn at_boot(template: &str, addr: &Address) -> Result<(), StartError> {
    let Some(config) = super::dockerfile::image_config(template) else { return Ok(()) };
    if config.start.is_none() && config.ready_cmd.is_none() {
        return Ok(());
    }
    let command = config.start.as_ref().map(|a| shell_words(a)).unwrap_or_default();
    let fail = |why: String| StartError::Start { template: template.into(), command: command.clone(), why };
    let defaults = dirs::templates_dir()
        .ok()
        .and_then(|d| std::fs::read(d.join(template).join("template.json")).ok())
        .and_then(|b| serde_json::from_slice::<crate::vmm::template::TemplateFile>(&b).ok())
        .and_then(|f| f.defaults);
    let client = Client::connect(addr, Duration::from_secs(30))
        .await
        .map_err(|e| fail(e.to_string()))?
        .with_defaults(defaults);
    let job = match &config.start {
        Some(argv) => {
            let mut spec = ExecSpec::argv(argv.clone());
            spec.timeout = None;
            Some(client.start_job(&spec).await.map_err(|e| fail(e.to_string()))?)
        }
        None => None,
    };
    let Some(ready) = &config.ready_cmd else { return Ok(()) };
    let started = Instant::now();
    let mut last;
    loop {
        let mut spec = ExecSpec::shell(ready.clone());
        spec.timeout = Some(READY_RUN_TIMEOUT);
        last = match client.exec(&spec).await {
            Ok(r) if r.status.success() => return Ok(()),
            Ok(r) => format!(
                "exit {:?}: {}",
                r.status.code,
                String::from_utf8_lossy(if r.stderr.data.is_empty() {
                    &r.stdout.data
                } else {
                    &r.stderr.data
                })
                .trim()
            ),
            Err(e) => e.to_string(),
        };
        if started.elapsed() >= READY_TIMEOUT {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let job_tail = match &job {
        Some(j) => match client.job(&j.id).await {
            Ok(j) => {
                let mut t = String::from_utf8_lossy(&j.stdout.tail).into_owned();
                t.push_str(&String::from_utf8_lossy(&j.stderr.tail));
                let t = t.trim();
                let t = &t[t.len().saturating_sub(400)..];
                let state = match j.status {
                    Some(s) => format!(" (it exited: {:?})", s.code),
                    None => String::new(),
                };
                format!("{}{state}", if t.is_empty() { "nothing" } else { t })
            }
            Err(e) => e.to_string(),
        },
        None => "(no start command)".into(),
    };
    Err(StartError::NotReady {
        template: template.into(),
        ready: ready.clone(),
        command,
        timeout: READY_TIMEOUT,
        last: super::image::escape_controls(&last),
        job_tail: super::image::escape_controls(&job_tail),
    })
}

/// `argv` as one line, for messages.
fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| if a.contains(char::is_whitespace) || a.is_empty() { format!("'{a}'") } else { a.clone() })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Records `start` (when asked: the config's ENTRYPOINT+CMD) and `ready_cmd` in
/// template `template`'s `image.json`.
pub fn record(template: &str, start: bool, ready_cmd: Option<String>) -> Result<ImageConfig, String> {
    let dir = dirs::templates_dir().map_err(|e| e.to_string())?.join(template);
    let mut config = super::dockerfile::image_config(template).unwrap_or_default();
    if start {
        config.start = Some(start_argv(&config).ok_or_else(|| {
            format!("--start: template `{template}`'s image has no ENTRYPOINT or CMD to start")
        })?);
    }
    config.ready_cmd = ready_cmd;
    super::dockerfile::write_image_config(&dir, &config).map_err(|e| e.to_string())?;
    Ok(config)
}
