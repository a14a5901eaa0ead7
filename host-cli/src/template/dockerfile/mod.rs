//! `atoll template build --dockerfile PATH [CONTEXT]`: a template from a Dockerfile.
//!
//! The file is parsed strictly first ([`parse`]) and every COPY/ADD source checked
//! against the context ([`context`]), so a bad file fails before anything boots. The
//! FROM image is fetched and baked as a hidden base template (or an installed atoll
//! template is used as it is); one build VM boots from it (`vm.rs`) and runs every RUN
//! (as `/bin/sh -c`, with the ENV, ARG, WORKDIR and USER in force, its output streamed)
//! and COPY/ADD (through the agent's UploadDir) in order. Nothing of the build runs on
//! the host. After each RUN, COPY, ADD and WORKDIR the disk is kept in the step cache
//! ([`cache`]), and a rebuild starts from the latest cached step (an unchanged file
//! boots nothing). The last step's disk becomes the template (or the VM's disk is saved,
//! [`crate::sandbox::save_template`]), with the final ENV/WORKDIR/USER as its command
//! defaults and ENTRYPOINT, CMD, LABEL and EXPOSE in `image.json` beside
//! `template.json` ([`ImageConfig`]). The VM and the base template are removed whether
//! the build succeeds or not; a failing step leaves no template.

pub mod cache;
pub mod context;
pub mod parse;
mod vm;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::vmm::dirs;
use crate::vmm::template::{CommandDefaults, TemplateFile};

pub use parse::{Command, Instruction, ParseError, Step};

/// The largest Dockerfile read.
const MAX_DOCKERFILE_BYTES: u64 = 1 << 20;

/// What to build.
#[derive(Debug, Clone)]
pub struct DockerfileOptions {
    /// The template's name.
    pub name: String,
    /// The Dockerfile.
    pub dockerfile: PathBuf,
    /// The build context (COPY/ADD sources); usually the Dockerfile's directory.
    pub context: PathBuf,
    /// `--build-arg K=V`.
    pub build_args: BTreeMap<String, String>,
    /// How to fetch the FROM image.
    pub fetch: super::image::FetchOptions,
    /// Replace a template of the same name.
    pub force: bool,
    /// The template's disk size; `None`: the image plus room, at least 2 GiB.
    pub size: Option<u64>,
    /// The build VM's memory in MiB.
    pub memory_mib: u32,
    /// Which MCP identity builds it (`None`: the CLI).
    pub by: Option<String>,
    /// Use no cached step (`--no-cache`); the steps' results are still cached.
    pub no_cache: bool,
}

/// What a build reports as it goes (owned, so a build's future stays `Send`).
#[derive(Debug)]
pub enum Progress {
    /// A step starts (`index` of `total`, 1-based).
    Step {
        /// Its number.
        index: usize,
        /// How many there are.
        total: usize,
        /// Its line in the Dockerfile.
        line: usize,
        /// Its text.
        text: String,
        /// Its result came from the step cache (nothing ran).
        cached: bool,
    },
    /// Output of a RUN.
    Output {
        /// From stderr.
        stderr: bool,
        /// The bytes.
        bytes: bytes::Bytes,
    },
    /// Something else worth a line.
    Note(String),
}

/// ENTRYPOINT, CMD, LABEL and EXPOSE of a template built from a Dockerfile, kept in
/// `image.json` beside its `template.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    /// ENTRYPOINT, as an argv.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// CMD, as an argv.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    /// LABELs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// EXPOSEd ports (`80/tcp`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exposed_ports: Vec<String>,
    /// Started as a background job at every fresh boot (`--start`: ENTRYPOINT+CMD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<Vec<String>>,
    /// Run until it succeeds before the sandbox is ready (`--ready-cmd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_cmd: Option<String>,
}

/// The file [`ImageConfig`] is kept in.
pub const IMAGE_CONFIG_FILE: &str = "image.json";

/// A template built from a Dockerfile.
#[derive(Debug, Clone, Serialize)]
pub struct DockerfileBuilt {
    /// Its directory.
    pub path: PathBuf,
    /// Its `template.json`.
    pub template: TemplateFile,
    /// Its ENTRYPOINT, CMD, LABELs and EXPOSEd ports.
    pub image: ImageConfig,
    /// How many RUN steps ran.
    pub run_steps: usize,
    /// How many steps were taken from the step cache.
    pub cached_steps: usize,
}

/// Why a Dockerfile build failed (nothing was left behind).
#[derive(Debug, thiserror::Error)]
pub enum DockerfileError {
    /// The Dockerfile cannot be read.
    #[error("cannot read the Dockerfile {}: {source}", path.display())]
    Read {
        /// Its path.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The context is not a directory.
    #[error("the build context {} is not a directory", .0.display())]
    Context(PathBuf),
    /// The Dockerfile is malformed or uses what atoll does not run.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// A COPY/ADD source cannot be used.
    #[error("Dockerfile line {line} (`{text}`): {source}")]
    Source {
        /// The line.
        line: usize,
        /// The instruction.
        text: String,
        /// What is wrong.
        #[source]
        source: context::SourceError,
    },
    /// A template of that name exists.
    #[error("template `{0}` already exists; pick another --name, or pass --force to replace it")]
    AlreadyExists(String),
    /// The FROM template is not a disk template.
    #[error(
        "FROM {0}: template `{0}` boots from an initramfs (no disk to build on); FROM a disk template (such as debian) or an image"
    )]
    NoDisk(String),
    /// The FROM image could not be fetched.
    #[error("FROM {reference}: {source}")]
    Fetch {
        /// The reference.
        reference: String,
        /// What failed.
        #[source]
        source: super::image::ImageError,
    },
    /// The base could not be baked.
    #[error("FROM {reference}: {source}")]
    Bake {
        /// The reference.
        reference: String,
        /// What failed.
        #[source]
        source: super::bake::BakeError,
    },
    /// The build VM could not start or be reached.
    #[error("the build VM: {0}")]
    Vm(String),
    /// Over MCP: the build would replace, or start FROM, a template this client may not.
    #[error("{0}")]
    NotYours(String),
    /// A RUN failed.
    #[error("step {index} (Dockerfile line {line}) `{text}` failed: {how}; nothing was built")]
    RunFailed {
        /// The step's number.
        index: usize,
        /// Its line.
        line: usize,
        /// Its text.
        text: String,
        /// How it ended.
        how: String,
        /// Its exit code (as a shell reports it).
        code: u8,
    },
    /// A step other than RUN failed in the VM.
    #[error("step {index} (Dockerfile line {line}) `{text}` failed: {why}; nothing was built")]
    StepFailed {
        /// The step's number.
        index: usize,
        /// Its line.
        line: usize,
        /// Its text.
        text: String,
        /// Why.
        why: String,
    },
    /// Saving the VM's disk as the template failed.
    #[error("saving the template: {0}")]
    Save(String),
    /// The data directory is unknown.
    #[error(transparent)]
    Dirs(#[from] dirs::DirsError),
    /// Name problems.
    #[error(transparent)]
    Store(#[from] super::TemplateStoreError),
}

impl DockerfileError {
    /// The exit code `atoll` ends with: a failed RUN's own, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            DockerfileError::RunFailed { code, .. } if *code != 0 => *code,
            _ => 1,
        }
    }
}

/// Reads and checks the Dockerfile and its COPY sources; nothing boots.
pub fn prepare(opts: &DockerfileOptions) -> Result<(PathBuf, Vec<Step>), DockerfileError> {
    use std::io::Read;
    super::check_name(&opts.name)?;
    let read_err = |source| DockerfileError::Read { path: opts.dockerfile.clone(), source };
    let mut text = String::new();
    std::fs::File::open(&opts.dockerfile)
        .map_err(read_err)?
        .take(MAX_DOCKERFILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read_err)?;
    if text.len() as u64 > MAX_DOCKERFILE_BYTES {
        return Err(read_err(std::io::Error::other("larger than 1 MiB")));
    }
    let context = opts
        .context
        .canonicalize()
        .ok()
        .filter(|c| c.is_dir())
        .ok_or_else(|| DockerfileError::Context(opts.context.clone()))?;
    let steps = parse::parse(&text, &opts.build_args)?;
    for s in &steps {
        if let Instruction::Copy { sources, .. } = &s.instruction {
            context::check(&context, sources).map_err(|source| DockerfileError::Source {
                line: s.line,
                text: s.text.clone(),
                source,
            })?;
        }
    }
    let dest = dirs::templates_dir()?.join(&opts.name);
    if dest.join("template.json").is_file() && !opts.force {
        return Err(DockerfileError::AlreadyExists(opts.name.clone()));
    }
    refuse_foreign_replace(opts)?;
    Ok((context, steps))
}

/// Over MCP (`opts.by`), refuses to replace a template this client did not save (a
/// built-in, the operator's, another client's); checked before the build and again
/// right before a cached result is installed onto it.
fn refuse_foreign_replace(opts: &DockerfileOptions) -> Result<(), DockerfileError> {
    let Some(by) = &opts.by else { return Ok(()) };
    crate::sandbox::save_template::refuse_foreign_replace(&opts.name, by)
        .map_err(|e| DockerfileError::NotYours(e.to_string()))
}

/// Builds template `opts.name` from its Dockerfile; see the module docs.
pub async fn build(
    opts: &DockerfileOptions,
    progress: &(dyn Fn(Progress) + Send + Sync),
) -> Result<DockerfileBuilt, DockerfileError> {
    let (context, steps) = prepare(opts)?;
    let reference = steps
        .iter()
        .find_map(|s| match &s.instruction {
            Instruction::From(r) => Some(r.clone()),
            _ => None,
        })
        .expect("parse requires a FROM");
    let origin = vm::Origin::resolve(opts, &reference, progress).await?;
    let mut state = State::from_defaults(origin.defaults.clone().unwrap_or_default());
    state.image = origin.config.clone();
    let keys = {
        let (origin_key, steps, context, state) =
            (origin.key.clone(), steps.clone(), context.clone(), state.clone());
        tokio::task::spawn_blocking(move || step_keys(&origin_key, &steps, &context, state))
            .await
            .map_err(|e| DockerfileError::Vm(e.to_string()))??
    };
    let checkpoints: Vec<usize> =
        (0..steps.len()).filter(|&i| cache::checkpoint(&steps[i].instruction)).collect();
    let dest = dirs::templates_dir()?.join(&opts.name);
    // The latest step whose result is cached and sound; `None` as its base: it is the
    // last step that changes the disk, and its result is already the template.
    let mut resume: Option<(usize, Option<vm::Base>)> = None;
    for &i in checkpoints.iter().rev().filter(|_| !opts.no_cache) {
        let Some(entry) = cache::lookup(&keys[i]) else { continue };
        let installed = if Some(&i) == checkpoints.last() {
            refuse_foreign_replace(opts)?;
            cache::install(&entry, &dest).await.map(|()| None)
        } else {
            vm::Base::cached(&entry, &origin).await.map(Some)
        };
        match installed {
            Ok(base) => {
                resume = Some((i, base));
                break;
            }
            Err(cache::CacheError::Io(e)) => return Err(DockerfileError::Save(e)),
            Err(e) => progress(Progress::Note(format!("step {} (line {}): {e}", i + 1, steps[i].line))),
        }
    }
    let total = steps.len();
    let report = |i: usize, cached: bool| {
        let s = &steps[i];
        progress(Progress::Step { index: i + 1, total, line: s.line, text: s.text.clone(), cached });
    };
    let from = (origin.from_template.clone(), origin.from_image.clone());
    let (skip, base) = match resume {
        Some((_, None)) => {
            // Every step that changes the disk is cached: no VM.
            for (i, s) in steps.iter().enumerate() {
                report(i, true);
                state.apply(&s.instruction);
            }
            return finish(opts, from, state, total);
        }
        Some((i, Some(base))) => (i + 1, base),
        None => (0, origin.base(opts, progress).await?),
    };
    for (i, s) in steps[..skip].iter().enumerate() {
        report(i, true);
        state.apply(&s.instruction);
    }
    let session = vm::Session::start(&base, opts, progress).await;
    let result = match session {
        Ok(mut session) => {
            let run = Run { steps: &steps, keys: &keys, context: &context, opts, report: &report, progress };
            let r = run_steps(&mut session, &run, skip, &mut state).await;
            let r = match r.and_then(|entry| refuse_foreign_replace(opts).map(|()| entry)) {
                Ok(Some(entry)) => match cache::install(&entry, &dest).await {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        progress(Progress::Note(format!("{e}; saving the build VM's disk instead")));
                        session.save(opts).await
                    }
                },
                Ok(None) => session.save(opts).await,
                Err(e) => Err(e),
            };
            session.stop().await;
            r
        }
        Err(e) => Err(e),
    };
    drop(base);
    result?;
    finish(opts, from, state, skip)
}

/// Every step's cache key ([`cache`]).
fn step_keys(
    origin: &str,
    steps: &[Step],
    context: &Path,
    mut state: State,
) -> Result<Vec<String>, DockerfileError> {
    let mut keys = Vec::with_capacity(steps.len());
    let mut parent = origin.to_owned();
    for s in steps {
        let sources =
            match &s.instruction {
                Instruction::Copy { sources, .. } => {
                    Some(cache::sources_digest(context, sources).map_err(|source| {
                        DockerfileError::Source { line: s.line, text: s.text.clone(), source }
                    })?)
                }
                _ => None,
            };
        let in_force = format!("{:?}", (&state.env, &state.args, &state.workdir, &state.user));
        parent = cache::step_key(&parent, &s.instruction, &in_force, sources.as_deref());
        keys.push(parent.clone());
        state.apply(&s.instruction);
    }
    Ok(keys)
}

/// ENV, ARG, WORKDIR, USER and the rest as the steps so far left them.
#[derive(Clone)]
struct State {
    env: BTreeMap<String, String>,
    args: BTreeMap<String, String>,
    workdir: Option<String>,
    user: Option<String>,
    image: ImageConfig,
    runs: usize,
}

impl State {
    fn from_defaults(d: CommandDefaults) -> State {
        State {
            env: d.env,
            args: BTreeMap::new(),
            workdir: d.cwd,
            user: d.user,
            image: ImageConfig::default(),
            runs: 0,
        }
    }

    /// What `i` changes besides the disk.
    fn apply(&mut self, i: &Instruction) {
        match i {
            Instruction::From(_) | Instruction::Run(_) | Instruction::Copy { .. } => {}
            Instruction::Env(pairs) => self.env.extend(pairs.iter().cloned()),
            Instruction::Arg(name, value) => {
                if let Some(v) = value {
                    self.args.insert(name.clone(), v.clone());
                }
            }
            Instruction::Workdir(dir) => {
                self.workdir = Some(context::guest_path(self.workdir.as_deref().unwrap_or("/"), dir));
            }
            Instruction::User(user) => {
                self.user = user.split(':').next().filter(|u| !u.is_empty()).map(str::to_owned);
            }
            Instruction::Entrypoint(c) => {
                self.image.entrypoint = Some(c.argv());
                // As docker does: a new ENTRYPOINT drops the CMD inherited so far.
                self.image.cmd = None;
            }
            Instruction::Cmd(c) => self.image.cmd = Some(c.argv()),
            Instruction::Label(pairs) => self.image.labels.extend(pairs.iter().cloned()),
            Instruction::Expose(ports) => {
                for p in ports {
                    let p = if p.contains('/') { p.clone() } else { format!("{p}/tcp") };
                    if !self.image.exposed_ports.contains(&p) {
                        self.image.exposed_ports.push(p);
                    }
                }
            }
        }
    }
}

/// What [`run_steps`] works from.
struct Run<'a> {
    steps: &'a [Step],
    keys: &'a [String],
    context: &'a Path,
    opts: &'a DockerfileOptions,
    report: &'a (dyn Fn(usize, bool) + Send + Sync),
    progress: &'a (dyn Fn(Progress) + Send + Sync),
}

/// Runs the steps from `skip` on in the build VM, caching the disk after each that
/// changes it; the cache entry holding the final disk, if the last one was kept.
async fn run_steps(
    session: &mut vm::Session,
    run: &Run<'_>,
    skip: usize,
    state: &mut State,
) -> Result<Option<PathBuf>, DockerfileError> {
    let progress = run.progress;
    let mut last_entry = None;
    for (index, step) in run.steps.iter().enumerate().skip(skip).map(|(i, s)| (i + 1, s)) {
        (run.report)(index - 1, false);
        let failed = |why: String| DockerfileError::StepFailed {
            index,
            line: step.line,
            text: step.text.clone(),
            why,
        };
        match &step.instruction {
            Instruction::Run(cmd) => {
                let mut env = state.env.clone();
                for (k, v) in &state.args {
                    env.entry(k.clone()).or_insert_with(|| v.clone());
                }
                let status = session
                    .run(cmd, env, state.workdir.clone(), state.user.clone(), progress)
                    .await
                    .map_err(failed)?;
                state.runs += 1;
                if !status.success() {
                    let how = match (status.code, status.signal, status.timed_out) {
                        (_, _, true) => {
                            format!("it ran past the {} min limit of a RUN", vm::RUN_TIMEOUT.as_secs() / 60)
                        }
                        (Some(c), _, _) => format!("it exited with code {c}"),
                        (_, Some(s), _) => format!("it was killed by signal {s}"),
                        _ => "it ended abnormally".into(),
                    };
                    let how = match status.oom_note("give the build VM more memory") {
                        Some(note) => format!("{how} ({note})"),
                        None => how,
                    };
                    return Err(DockerfileError::RunFailed {
                        index,
                        line: step.line,
                        text: step.text.clone(),
                        how,
                        code: status.shell_code(),
                    });
                }
            }
            Instruction::Copy { sources, dest, add } => {
                let workdir = state.workdir.clone().unwrap_or_else(|| "/".into());
                let (ctx, sources, dest, add) = (run.context.to_owned(), sources.clone(), dest.clone(), *add);
                let uploads =
                    tokio::task::spawn_blocking(move || context::pack(&ctx, &sources, &dest, &workdir, add))
                        .await
                        .map_err(|e| failed(e.to_string()))?
                        .map_err(|source| DockerfileError::Source {
                            line: step.line,
                            text: step.text.clone(),
                            source,
                        })?;
                for u in uploads {
                    session.upload(u).await.map_err(failed)?;
                }
            }
            Instruction::Workdir(dir) => {
                let dir = context::guest_path(state.workdir.as_deref().unwrap_or("/"), dir);
                session.mkdir(&dir).await.map_err(failed)?;
            }
            _ => {}
        }
        state.apply(&step.instruction);
        if cache::checkpoint(&step.instruction) {
            last_entry = keep(session, run, index - 1).await;
        }
    }
    Ok(last_entry)
}

/// Saves the build VM's disk as the cache entry of step `i`; the entry, or `None` (and
/// a note) when it could not be kept: the build goes on without it.
async fn keep(session: &vm::Session, run: &Run<'_>, i: usize) -> Option<PathBuf> {
    let note = |e: String| (run.progress)(Progress::Note(format!("step {} was not cached: {e}", i + 1)));
    let saved = match session.save_step(run.opts).await {
        Ok(p) => p,
        Err(e) => {
            note(e);
            return None;
        }
    };
    match cache::store(&run.keys[i], &saved).await {
        Ok(()) => cache::lookup(&run.keys[i]),
        Err(e) => {
            note(e.to_string());
            None
        }
    }
}

/// Writes the final defaults into the saved template's `template.json`, and
/// `image.json`; on failure the template is removed.
fn finish(
    opts: &DockerfileOptions,
    (from_template, from_image): (Option<String>, Option<String>),
    state: State,
    cached_steps: usize,
) -> Result<DockerfileBuilt, DockerfileError> {
    let dir = dirs::templates_dir()?.join(&opts.name);
    let write = || -> Result<TemplateFile, std::io::Error> {
        let text = std::fs::read_to_string(dir.join("template.json"))?;
        let mut file: TemplateFile = serde_json::from_str(&text).map_err(std::io::Error::other)?;
        file.defaults = Some(CommandDefaults {
            env: state.env.clone(),
            cwd: state.workdir.clone(),
            user: state.user.clone(),
        });
        file.from_sandbox = None;
        file.from_template = from_template.clone();
        file.from_image = from_image.clone();
        write_image_config(&dir, &state.image)?;
        replace_file(
            &dir.join("template.json"),
            &serde_json::to_vec_pretty(&file).map_err(std::io::Error::other)?,
        )?;
        Ok(file)
    };
    match write() {
        Ok(template) => Ok(DockerfileBuilt {
            path: dir,
            template,
            image: state.image,
            run_steps: state.runs,
            cached_steps,
        }),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(DockerfileError::Save(format!("could not write {}: {e}", dir.display())))
        }
    }
}

/// Writes `config` as the `image.json` of the template directory `dir`.
pub fn write_image_config(dir: &Path, config: &ImageConfig) -> std::io::Result<()> {
    replace_file(
        &dir.join(IMAGE_CONFIG_FILE),
        &serde_json::to_vec_pretty(config).map_err(std::io::Error::other)?,
    )
}

/// Writes `bytes` to `path` through a temp file and a rename.
fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// The [`ImageConfig`] of installed template `name`, when it has one.
pub fn image_config(name: &str) -> Option<ImageConfig> {
    let dir = dirs::templates_dir().ok()?.join(name);
    serde_json::from_slice(&std::fs::read(dir.join(IMAGE_CONFIG_FILE)).ok()?).ok()
}
