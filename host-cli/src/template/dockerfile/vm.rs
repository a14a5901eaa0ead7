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

/// What FROM names, resolved (an image fetched into the blob cache) but not yet baked.
pub(super) struct Origin {
    reference: String,
    /// The fetched image; `None`: an installed template.
    fetched: Option<Box<store::image::Fetched>>,
    /// Its command defaults (the image's Env, WorkingDir, User).
    pub defaults: Option<CommandDefaults>,
    /// The installed template it is, if it is one.
    pub from_template: Option<String>,
    /// The image it came from (`REF@DIGEST`).
    pub from_image: Option<String>,
    /// Its ENTRYPOINT, CMD, LABELs and EXPOSEd ports, which the Dockerfile inherits.
    pub config: super::ImageConfig,
    /// Its step-cache key ([`super::cache`]).
    pub key: String,
}

impl Origin {
    pub(super) async fn resolve(
        opts: &DockerfileOptions,
        reference: &str,
        progress: &(dyn Fn(Progress) + Send + Sync),
    ) -> Result<Origin, DockerfileError> {
        let templates = dirs::templates_dir()?;
        let mut key = super::cache::Key::new("base");
        key.field(opts.by.as_deref().unwrap_or("").as_bytes());
        if store::check_name(reference).is_ok() && templates.join(reference).join("template.json").is_file() {
            let text = std::fs::read_to_string(templates.join(reference).join("template.json"))
                .map_err(|e| DockerfileError::Vm(format!("template `{reference}`: {e}")))?;
            let file: TemplateFile = serde_json::from_str(&text)
                .map_err(|e| DockerfileError::Vm(format!("template `{reference}`: {e}")))?;
            if let Some(by) = &opts.by
                && !store::mcp_access::may_use(reference, file.saved_by.as_deref(), by)
            {
                return Err(DockerfileError::NotYours(format!(
                    "FROM {reference}: over MCP, FROM takes a registry image, an installed template of \
                     the operator's or one this client saved; not another client's template, a build's \
                     temporary, or an image's template (name the image itself instead)"
                )));
            }
            let Some(rootfs) = &file.rootfs else {
                return Err(DockerfileError::NoDisk(reference.into()));
            };
            progress(Progress::Note(format!("FROM the installed template `{reference}`")));
            key.field(b"template").field(reference.as_bytes()).field(text.as_bytes());
            key.file_stamp(&templates.join(reference).join(rootfs));
            return Ok(Origin {
                reference: reference.into(),
                fetched: None,
                defaults: file.defaults,
                from_template: Some(reference.into()),
                from_image: file.from_image,
                config: super::ImageConfig {
                    start: None,
                    ready_cmd: None,
                    ..super::image_config(reference).unwrap_or_default()
                },
                key: key.finish(),
            });
        }
        // Over MCP the image comes from a registry: never a transport that reads host
        // files (checked here, on the FROM the parser made with ARGs substituted).
        if opts.by.is_some()
            && !store::image::transport_reference(reference).is_ok_and(|t| t.starts_with("docker://"))
        {
            return Err(DockerfileError::NotYours(format!(
                "FROM {reference}: over MCP, FROM takes a registry image (such as python:3.12-slim) or an \
                 installed template, not host files"
            )));
        }
        progress(Progress::Note(format!("fetching image {reference}")));
        let (r, fetch) = (reference.to_owned(), opts.fetch.clone());
        let fetched = tokio::task::spawn_blocking(move || store::image::fetch(&r, &fetch))
            .await
            .map_err(|e| DockerfileError::Vm(e.to_string()))?
            .map_err(|source| DockerfileError::Fetch { reference: reference.into(), source })?;
        // What the bake puts in the image besides the layers: the agent; and beside it:
        // the kernel.
        key.field(b"image").field(fetched.digest.as_bytes());
        key.field(&opts.size.unwrap_or(DEFAULT_SIZE).to_le_bytes());
        if let Ok(agent) = store::agent_binary() {
            key.file_stamp(&agent);
        }
        let kernel = dirs::data_dir()?.join("kernel/current");
        key.file_stamp(&kernel.join("vmlinux")).file_stamp(&kernel.join("initrd.cpio"));
        Ok(Origin {
            reference: reference.into(),
            defaults: Some(fetched.defaults.clone()),
            from_template: None,
            from_image: Some(format!("{}@{}", fetched.reference, fetched.digest)),
            config: fetched.config.clone(),
            fetched: Some(Box::new(fetched)),
            key: key.finish(),
        })
    }

    /// The template to boot: the installed one, or the image baked for this build.
    pub(super) async fn base(
        &self,
        opts: &DockerfileOptions,
        progress: &(dyn Fn(Progress) + Send + Sync),
    ) -> Result<Base, DockerfileError> {
        let Some(fetched) = &self.fetched else {
            return Ok(Base {
                template: self.reference.clone(),
                temporary: false,
                defaults: self.defaults.clone(),
            });
        };
        let name = temp_name("build-base");
        progress(Progress::Note(format!(
            "baking {} ({}) as the build's base",
            self.reference, fetched.digest
        )));
        let base = Base { template: name.clone(), temporary: true, defaults: self.defaults.clone() };
        let build = BuildOptions {
            name,
            source: Source::Image(fetched.clone()),
            init: InitKind::Agent,
            size: Some(opts.size.unwrap_or(DEFAULT_SIZE)),
            force: false,
        };
        let reference = self.reference.clone();
        tokio::task::spawn_blocking(move || store::build(&build))
            .await
            .map_err(|e| DockerfileError::Vm(e.to_string()))?
            .map_err(|source| DockerfileError::Bake { reference, source })?;
        Ok(base)
    }
}

/// The template the build VM boots: an installed one, or one made for this build (from
/// the FROM image or a cached step), removed after it.
pub(super) struct Base {
    /// Its name.
    pub template: String,
    /// Made for this build.
    temporary: bool,
    /// Its command defaults (the image's Env, WorkingDir, User).
    pub defaults: Option<CommandDefaults>,
}

impl Base {
    /// The cached step `entry` installed as a template for this build.
    pub(super) async fn cached(
        entry: &std::path::Path,
        from: &Origin,
    ) -> Result<Base, super::cache::CacheError> {
        let name = temp_name("build-base");
        let dest =
            dirs::templates_dir().map_err(|e| super::cache::CacheError::Io(e.to_string()))?.join(&name);
        super::cache::install(entry, &dest).await?;
        Ok(Base { template: name, temporary: true, defaults: from.defaults.clone() })
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

/// A template name no other build uses.
fn temp_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
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

    /// Saves the VM's disk as a template directory for the step cache; its path.
    pub(super) async fn save_step(&self, opts: &DockerfileOptions) -> Result<std::path::PathBuf, String> {
        let save = crate::sandbox::save_template::SaveOptions {
            name: temp_name("build-step"),
            replace: false,
            by: opts.by.clone(),
        };
        crate::sandbox::save_template::save_template(&self.vm.name, &save)
            .await
            .map(|s| s.path)
            .map_err(|e| e.to_string())
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
