//! The base a Dockerfile builds on and the one build VM its steps run in.

use std::time::Duration;

use futures::StreamExt;

use super::{Command, DockerfileError, DockerfileOptions, Progress};
use crate::client::{Client, ExecEvent, ExecSpec, ExitStatus};
use crate::template::{self as store, BuildOptions, InitKind, Source};
use crate::vmm::dirs;
use crate::vmm::template::{CommandDefaults, TemplateFile};

/// The longest a RUN may take (the agent's cap on one command).
pub(super) const RUN_TIMEOUT: Duration = Duration::from_secs(600);
/// The base template's disk when `--size` is not given (sparse: only what is written
/// takes space).
const DEFAULT_SIZE: u64 = 4 << 30;
/// How long the build VM gets to boot.
const BOOT_TIMEOUT: Duration = Duration::from_secs(300);

/// The template the build VM boots: an installed one, or one baked from the FROM image
/// for this build (removed after it).
pub(super) struct Base {
    /// Its name.
    pub template: String,
    /// Baked for this build.
    temporary: bool,
    /// Its command defaults (the image's Env, WorkingDir, User).
    pub defaults: Option<CommandDefaults>,
    /// The installed template it is, if it is one.
    pub from_template: Option<String>,
    /// The image it came from (`REF@DIGEST`).
    pub from_image: Option<String>,
    /// Its ENTRYPOINT, CMD, LABELs and EXPOSEd ports, which the Dockerfile inherits.
    pub config: super::ImageConfig,
}

impl Base {
    pub(super) async fn prepare(
        opts: &DockerfileOptions,
        reference: &str,
        progress: &(dyn Fn(Progress) + Send + Sync),
    ) -> Result<Base, DockerfileError> {
        let templates = dirs::templates_dir()?;
        if store::check_name(reference).is_ok() && templates.join(reference).join("template.json").is_file() {
            let text = std::fs::read_to_string(templates.join(reference).join("template.json"))
                .map_err(|e| DockerfileError::Vm(format!("template `{reference}`: {e}")))?;
            let file: TemplateFile = serde_json::from_str(&text)
                .map_err(|e| DockerfileError::Vm(format!("template `{reference}`: {e}")))?;
            if file.rootfs.is_none() {
                return Err(DockerfileError::NoDisk(reference.into()));
            }
            progress(Progress::Note(format!("FROM the installed template `{reference}`")));
            return Ok(Base {
                template: reference.into(),
                temporary: false,
                defaults: file.defaults,
                from_template: Some(reference.into()),
                from_image: file.from_image,
                config: super::ImageConfig {
                    start: None,
                    ready_cmd: None,
                    ..super::image_config(reference).unwrap_or_default()
                },
            });
        }
        progress(Progress::Note(format!("fetching image {reference}")));
        let (r, fetch) = (reference.to_owned(), opts.fetch.clone());
        let fetched = tokio::task::spawn_blocking(move || store::image::fetch(&r, &fetch))
            .await
            .map_err(|e| DockerfileError::Vm(e.to_string()))?
            .map_err(|source| DockerfileError::Fetch { reference: reference.into(), source })?;
        let name = temp_name();
        progress(Progress::Note(format!("baking {reference} ({}) as the build's base", fetched.digest)));
        let base = Base {
            template: name.clone(),
            temporary: true,
            defaults: Some(fetched.defaults.clone()),
            from_template: None,
            from_image: Some(format!("{}@{}", fetched.reference, fetched.digest)),
            config: fetched.config.clone(),
        };
        let build = BuildOptions {
            name,
            source: Source::Image(Box::new(fetched)),
            init: InitKind::Agent,
            size: Some(opts.size.unwrap_or(DEFAULT_SIZE)),
            force: false,
        };
        tokio::task::spawn_blocking(move || store::build(&build))
            .await
            .map_err(|e| DockerfileError::Vm(e.to_string()))?
            .map_err(|source| DockerfileError::Bake { reference: reference.into(), source })?;
        Ok(base)
    }
}

impl Drop for Base {
    /// Removes the base when it was baked for this build (dropped after its VM, also
    /// when the build is cancelled).
    fn drop(&mut self) {
        if self.temporary
            && let Err(e) = store::remove(&self.template)
        {
            tracing::warn!("could not remove the build's base template `{}`: {e}", self.template);
        }
    }
}

/// A name for a base template no other build uses.
fn temp_name() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("build-base-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The build VM; dropped without [`Session::stop`] (a cancelled build), it is killed
/// with `atoll kill -f`.
pub(super) struct Session {
    vm: Vm,
    client: Client,
    /// The base template's command defaults, for RUN's own connection.
    defaults: Option<CommandDefaults>,
}

/// The build VM's name; dropped while armed, the VM is killed with `atoll kill -f`.
struct Vm {
    name: String,
    armed: bool,
}

impl Vm {
    async fn stop(&mut self) {
        let opts = crate::sandbox::RemoveOptions { all: false, force: true };
        if let Err(e) = crate::sandbox::remove(std::slice::from_ref(&self.name), opts).await {
            tracing::warn!("could not remove the build VM `{}`: {e}", self.name);
            return;
        }
        self.armed = false;
    }
}

impl Session {
    pub(super) async fn start(
        base: &Base,
        opts: &DockerfileOptions,
        progress: &(dyn Fn(Progress) + Send + Sync),
    ) -> Result<Session, DockerfileError> {
        let templates = dirs::templates_dir()?;
        let image = crate::vmm::template::load(&templates, &base.template)
            .ok()
            .and_then(|t| t.rootfs)
            .and_then(|r| std::fs::metadata(r).ok())
            .map(|m| m.len());
        let create = crate::sandbox::CreateOptions {
            template: base.template.clone(),
            memory_mib: opts.memory_mib,
            timeout: BOOT_TIMEOUT,
            // The template's own disk size, said out loud: a build VM boots afresh and
            // never makes or uses a template snapshot (a disk option turns them off).
            storage: crate::vmm::storage::Storage { mounts: Vec::new(), disk_bytes: image, display: None },
            created_by: opts.by.clone(),
            // A FROM template's start command is for its sandboxes, not for building on it.
            no_start: true,
            ..Default::default()
        };
        progress(Progress::Note("booting the build VM".into()));
        let info = crate::sandbox::create(&create).await.map_err(|e| DockerfileError::Vm(e.to_string()))?;
        let mut vm = Vm { name: info.name.clone(), armed: true };
        let addr = crate::sandbox::target::sandbox_address(&info.name)
            .await
            .map_err(|e| DockerfileError::Vm(e.to_string()));
        let client = match addr {
            Ok(addr) => Client::connect(&addr, Duration::from_secs(30))
                .await
                .map_err(|e| DockerfileError::Vm(e.to_string())),
            Err(e) => Err(e),
        };
        match client {
            Ok(client) => Ok(Session { vm, client, defaults: base.defaults.clone() }),
            Err(e) => {
                vm.stop().await;
                Err(e)
            }
        }
    }

    /// Runs one RUN, streaming its output; its exit status.
    pub(super) async fn run(
        &self,
        cmd: &Command,
        env: std::collections::BTreeMap<String, String>,
        cwd: Option<String>,
        user: Option<String>,
        progress: &(dyn Fn(Progress) + Send + Sync),
    ) -> Result<ExitStatus, String> {
        let mut spec = match cmd {
            Command::Shell(line) => ExecSpec::shell(line.clone()),
            Command::Exec(argv) => ExecSpec::argv(argv.clone()),
        };
        spec.env = env;
        spec.cwd = cwd;
        spec.user = user;
        spec.timeout = Some(RUN_TIMEOUT);
        // The stream runs on a thread and runtime of its own, its events come back over
        // a channel: ExecStream's future is not `Send` for every lifetime, which a build
        // running inside an MCP tool call needs. Dropping `_cancel` (a cancelled build)
        // ends the thread, which drops the stream, which kills the command.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<ExecEvent, String>>(64);
        let (_cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
        let addr = self.client.address().clone();
        let defaults = self.defaults.clone();
        std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e.to_string()));
                    return;
                }
            };
            runtime.block_on(async move {
                let work = async {
                    let client = Client::connect(&addr, Duration::from_secs(30))
                        .await
                        .map_err(|e| e.to_string())?
                        .with_defaults(defaults);
                    let mut events = client
                        .exec_stream::<tokio::io::Empty>(&spec, None)
                        .await
                        .map_err(|e| e.to_string())?;
                    while let Some(ev) = events.next().await {
                        if tx.send(ev.map_err(|e| e.to_string())).await.is_err() {
                            break;
                        }
                    }
                    Ok::<(), String>(())
                };
                tokio::select! {
                    r = work => if let Err(e) = r { let _ = tx.send(Err(e)).await; },
                    _ = cancelled => {}
                }
            });
        });
        while let Some(ev) = rx.recv().await {
            match ev? {
                ExecEvent::Started { .. } => {}
                ExecEvent::Stdout(b) => progress(Progress::Output { stderr: false, bytes: b }),
                ExecEvent::Stderr(b) => progress(Progress::Output { stderr: true, bytes: b }),
                ExecEvent::Exited(status) => return Ok(status),
            }
        }
        Err("the agent ended the command's stream without an exit status".into())
    }

    /// Extracts one COPY/ADD zip in the guest.
    pub(super) async fn upload(&self, u: super::context::Upload) -> Result<(), String> {
        self.client
            .upload_dir(&u.dir, false, tokio::fs::File::from_std(u.zip))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// `mkdir -p` in the guest.
    pub(super) async fn mkdir(&self, dir: &str) -> Result<(), String> {
        self.client.mkdir(dir, true, None).await.map_err(|e| e.to_string())
    }

    /// Saves the VM's disk as template `opts.name`.
    pub(super) async fn save(&self, opts: &DockerfileOptions) -> Result<(), DockerfileError> {
        let save = crate::sandbox::save_template::SaveOptions {
            name: opts.name.clone(),
            replace: opts.force,
            by: opts.by.clone(),
        };
        crate::sandbox::save_template::save_template(&self.vm.name, &save)
            .await
            .map(|_| ())
            .map_err(|e| DockerfileError::Save(e.to_string()))
    }

    /// Removes the VM.
    pub(super) async fn stop(&mut self) {
        self.vm.stop().await;
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if self.armed
            && let Ok(exe) = std::env::current_exe()
        {
            let _ = std::process::Command::new(exe)
                .args(["kill", "-f", &self.name])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .status();
        }
    }
}
