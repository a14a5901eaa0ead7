//! Helpers shared by the whole-system tests: a real `atoll-agent` process on a Unix
//! socket in a temp dir, and the generated gRPC client connected to it; [`vm`] runs the
//! real `atoll` binary against microVMs; [`commands`] lists every subcommand that talks
//! to an agent; [`netns`] builds the test "outside world" for
//! network tests; [`pty`] runs a program on a real pseudo-terminal.

pub mod commands;
pub mod netns;
pub mod pty;
pub mod vm;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use atoll_proto::agent::v1::agent_client::AgentClient;
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// Path of a binary built by this workspace (`atoll-agent`, `atoll`), next to the test's own
/// `target/<profile>/deps/` directory.
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    let bin = profile_dir.join(name);
    assert!(bin.exists(), "{} is not built; run `cargo build --workspace` first", bin.display());
    bin
}

/// A real `atoll-agent` serving on `unix://<tmp>/agent.sock`; killed when dropped.
pub struct Agent {
    child: Child,
    /// The temp dir holding the socket and the job logs; tests may use it as scratch.
    pub dir: tempfile::TempDir,
    /// The agent's Unix socket.
    pub socket: PathBuf,
}

impl Agent {
    /// Starts the agent and waits until its socket accepts connections.
    pub fn start() -> Agent {
        Self::start_with(&[])
    }

    /// Starts the agent with extra command-line arguments.
    pub fn start_with(extra: &[&str]) -> Agent {
        Self::spawn(extra, Command::new(workspace_bin("atoll-agent")))
    }

    /// Starts the agent so that any process of the same user may trace it (`strace -p`),
    /// even where Yama's `ptrace_scope` lets only ancestors do so.
    pub fn start_traceable() -> Agent {
        let mut cmd = Command::new(workspace_bin("atoll-agent"));
        // SAFETY: prctl is async-signal-safe and touches only the child's own state.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                // Fails harmlessly (EINVAL) on kernels without Yama.
                libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY);
                Ok(())
            });
        }
        Self::spawn(&[], cmd)
    }

    /// Starts the agent in a UTS namespace of its own, so that setting its hostname
    /// leaves this machine's alone. Needs root (CAP_SYS_ADMIN); `None` without it.
    pub fn start_with_own_hostname() -> Option<Agent> {
        if rustix::process::geteuid().as_raw() != 0 {
            return None;
        }
        let mut cmd = Command::new(workspace_bin("atoll-agent"));
        // SAFETY: unshare is async-signal-safe and changes only the child's namespaces.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                if libc::unshare(libc::CLONE_NEWUTS) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        Some(Self::spawn(&[], cmd))
    }

    fn spawn(extra: &[&str], mut cmd: Command) -> Agent {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("agent.sock");
        let child = cmd
            .arg("--listen")
            .arg(format!("unix://{}", socket.display()))
            .arg("--job-dir")
            .arg(dir.path().join("jobs"))
            .args(extra)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn atoll-agent");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "atoll-agent did not listen on {} within 20 s",
                socket.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Agent { child, dir, socket }
    }

    /// The address to hand to `atoll --agent`.
    pub fn address(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// A gRPC client connected to this agent.
    pub async fn client(&self) -> AgentClient<Channel> {
        connect_unix(&self.socket).await
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Connects the generated client to a Unix socket.
pub async fn connect_unix(path: &Path) -> AgentClient<Channel> {
    let path = path.to_path_buf();
    let channel = Endpoint::from_static("http://agent.invalid")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
        }))
        .await
        .expect("connect to agent");
    AgentClient::new(channel)
        .max_decoding_message_size(atoll_proto::limits::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(atoll_proto::limits::MAX_MESSAGE_BYTES)
}

/// Deterministic bytes that do not compress away (xorshift), for transfer tests.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

/// Whether the `debian` template is built. Missing, it fails the calling test (a skipped
/// proof is no proof), unless ATOLL_TEST_SKIP_DEBIAN=1 asks to skip it on purpose: then
/// this says so and returns false.
pub fn debian_or_skip() -> bool {
    if data_dir().join("templates/debian/template.json").is_file() {
        return true;
    }
    let hint = "template `debian` is not built; build it with `rootfs/setup.sh --with-debian`";
    assert!(
        std::env::var_os("ATOLL_TEST_SKIP_DEBIAN").is_some(),
        "{hint} (or set ATOLL_TEST_SKIP_DEBIAN=1 to skip)"
    );
    eprintln!("SKIPPED (ATOLL_TEST_SKIP_DEBIAN is set): {hint}");
    false
}

/// atoll's data directory, where rootfs/setup.sh puts the kernel and templates:
/// `$ATOLL_DATA_DIR`, else `$XDG_DATA_HOME/atoll`, else `$HOME/.local/share/atoll`.
pub fn data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("ATOLL_DATA_DIR").filter(|d| !d.is_empty()) {
        return d.into();
    }
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("atoll");
    }
    PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".local/share/atoll")
}

/// Live (non-zombie) processes whose command line mentions `needle`, as "pid: cmdline".
pub fn processes_mentioning(needle: &Path) -> Vec<String> {
    let needle = needle.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) && !is_zombie(&entry.path()) {
            found.push(format!("{name}: {cmdline}"));
        }
    }
    found
}

/// The vhost-device-vsock processes among [`processes_mentioning`] `needle`: a sandbox
/// that atoll starts must have none (its agent link runs inside QEMU).
pub fn vsock_backends_mentioning(needle: &Path) -> Vec<String> {
    processes_mentioning(needle).into_iter().filter(|p| p.contains("vhost-device-vsock")).collect()
}

/// The pid is gone from /proc: killed and reaped (stricter than [`pid_gone`]).
pub fn pid_reaped(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// Asserts that a gRPC call failed with `code` and a message that mentions every word.
pub fn assert_status<T: std::fmt::Debug>(
    result: Result<T, tonic::Status>,
    code: tonic::Code,
    words: &[&str],
) {
    let status = result.expect_err("the call should fail");
    assert_eq!(status.code(), code, "unexpected code; message: {}", status.message());
    for w in words {
        assert!(status.message().contains(w), "message {:?} should mention {w:?}", status.message());
    }
}

/// The pid is gone, or only a zombie waiting for its parent.
pub fn pid_gone(pid: u64) -> bool {
    let dir = PathBuf::from(format!("/proc/{pid}"));
    !dir.exists() || is_zombie(&dir)
}

fn is_zombie(proc_dir: &Path) -> bool {
    let stat = std::fs::read_to_string(proc_dir.join("stat")).unwrap_or_default();
    stat.rsplit_once(')').is_none_or(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
}

/// Bytes the process has read so far (`rchar` in `/proc/PID/io`).
pub fn bytes_read(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).expect("/proc/PID/io");
    let line = io.lines().find(|l| l.starts_with("rchar:")).expect("an rchar line");
    line["rchar:".len()..].trim().parse().expect("rchar is a number")
}

/// Waits until the process's read counter stops moving (five steady polls), then
/// returns it. Fails if it keeps moving for a minute: that bound only keeps a runaway
/// reader from hanging the suite.
pub async fn bytes_read_once_settled(pid: u32) -> u64 {
    let mut last = bytes_read(pid);
    let mut steady = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while steady < 5 {
        assert!(Instant::now() < deadline, "the agent kept reading for a minute after the client left");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = bytes_read(pid);
        steady = if now == last { steady + 1 } else { 0 };
        last = now;
    }
    last
}
