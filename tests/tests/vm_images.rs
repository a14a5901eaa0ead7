//! The images boot: real microVMs under QEMU (TCG where there is no hardware KVM) with
//! vhost-device-vsock, reached over the hybrid vsock exactly as `atoll` reaches them.
//!
//! These tests boot the templates that `rootfs/setup.sh` builds into the atoll data
//! directory. `minimal` is required; `debian` (`rootfs/setup.sh --with-debian`) is
//! optional and its tests say so and pass when it is not built. Templates baked with
//! `atoll template build` (which runs as root, like the suite) go to a scratch data
//! directory that shares the real kernel, and the snapshot a build makes to a state
//! directory inside it. Each test boots its own VM; the test's
//! QEMU is started by the test itself, independently of `atoll create`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use atoll_proto::agent::v1::agent_client::AgentClient;
use atoll_proto::agent::v1::{self as pb};
use atoll_tests::data_dir;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tonic::transport::{Channel, Endpoint, Uri};

/// Generous bound for a boot under software emulation on a busy 2-core machine.
const BOOT_TIMEOUT: Duration = Duration::from_secs(240);
/// A boot during which QEMU used at most [`STALL_TICKS`] of CPU for this long has
/// stalled: a booting guest under emulation keeps a host CPU busy, and even waiting
/// it uses more (its timer ticks).
const STALL: Duration = Duration::from_secs(20);
/// 50 ms of CPU time, in clock ticks (USER_HZ is 100 on Linux); an idle guest costs
/// about 15 in [`STALL`], a wedged QEMU none.
const STALL_TICKS: u64 = 5;
const AGENT_PORT: u32 = 1024;
const READY_PORT: u32 = 1025;
const GUEST_CID: u32 = 3;

/// A template's boot files, read from its `template.json`.
struct Template {
    kernel: PathBuf,
    initrd: Option<PathBuf>,
    rootfs: Option<PathBuf>,
    cmdline: String,
}

impl Template {
    /// `None` when the template is not built.
    fn load(name: &str) -> Option<Template> {
        Template::load_from(&data_dir(), name)
    }

    /// Template `name` of the data directory `data`.
    fn load_from(data: &Path, name: &str) -> Option<Template> {
        let dir = data.join("templates").join(name);
        let text = std::fs::read_to_string(dir.join("template.json")).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).expect("template.json is JSON");
        let file = |key: &str| json[key].as_str().map(|f| dir.join(f));
        let t = Template {
            kernel: file("kernel").expect("template.json names a kernel"),
            initrd: file("initrd"),
            rootfs: file("rootfs"),
            cmdline: json["cmdline"].as_str().unwrap_or_default().to_owned(),
        };
        for f in [Some(&t.kernel), t.initrd.as_ref(), t.rootfs.as_ref()].into_iter().flatten() {
            assert!(f.exists(), "template {name} names {} but it is missing; rebuild it", f.display());
        }
        Some(t)
    }

    fn require(name: &str) -> Template {
        Template::load(name).unwrap_or_else(|| {
            panic!("template `{name}` is not built in {}; run rootfs/setup.sh", data_dir().display())
        })
    }
}

/// A program from PATH, or from `~/.cargo/bin` where `cargo install` puts it.
fn program(name: &str) -> PathBuf {
    let from_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin")))
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    from_path.unwrap_or_else(|| panic!("`{name}` is not installed; run rootfs/setup.sh"))
}

/// A booted VM: QEMU plus its vhost-device-vsock backend; both killed when dropped.
struct Vm {
    /// `None` only while booting, before QEMU is started.
    qemu: Option<Child>,
    vhost: Child,
    dir: tempfile::TempDir,
    /// Time from starting QEMU to the agent's READY line.
    boot: Duration,
    ready_line: String,
}

impl Vm {
    /// Boots `template` with `extra` kernel arguments and waits for the agent's READY.
    ///
    /// A boot that stalls before READY (see [`STALL`]) is reported on stderr with its
    /// console and vhost-device-vsock logs and tried once more: once in a few hundred
    /// boots under TCG, QEMU stops using CPU in the first second of boot, before the
    /// agent starts, and never goes on. Anything else fails the test at once.
    async fn boot(template: &Template, extra: &str) -> Vm {
        match Vm::boot_once(template, extra).await {
            Ok(vm) => vm,
            Err(stalled) => {
                eprintln!("WARNING: the boot stalled and is tried once more; {stalled}");
                Vm::boot_once(template, extra)
                    .await
                    .unwrap_or_else(|again| panic!("the boot stalled twice; {again}"))
            }
        }
    }

    /// One boot; `Err` with the diagnostics when it stalled.
    async fn boot_once(template: &Template, extra: &str) -> Result<Vm, String> {
        let dir = tempfile::tempdir().expect("tempdir");
        let vhost_sock = dir.path().join("vhost.sock");
        let uds = dir.path().join("vm.vsock");
        let vhost = Command::new(program("vhost-device-vsock"))
            .arg("--vm")
            .arg(format!("guest-cid={GUEST_CID},socket={},uds-path={}", vhost_sock.display(), uds.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("vhost.log")).expect("vhost log"))
            .spawn()
            .expect("spawn vhost-device-vsock");
        let mut vm = Vm { qemu: None, vhost, dir, boot: Duration::ZERO, ready_line: String::new() };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !vhost_sock.exists() {
            if let Some(status) = vm.vhost.try_wait().expect("wait vhost") {
                panic!("vhost-device-vsock exited ({status}): {}", vm.log("vhost.log"));
            }
            assert!(Instant::now() < deadline, "vhost-device-vsock did not create {}", vhost_sock.display());
            std::thread::sleep(Duration::from_millis(10));
        }
        // Listen for READY before QEMU starts, so the announcement cannot be missed.
        let ready =
            tokio::net::UnixListener::bind(format!("{}_{READY_PORT}", uds.display())).expect("bind ready");
        let qemu = qemu_command(template, extra, &vhost_sock, &vm.dir.path().join("console.log"))
            .spawn()
            .expect("spawn qemu-system-x86_64");
        let qemu_pid = qemu.id();
        vm.qemu = Some(qemu);
        let started = Instant::now();
        let mut progress = (cpu_ticks(qemu_pid), Instant::now());
        let accepted = loop {
            tokio::select! {
                conn = ready.accept() => break conn.expect("accept READY").0,
                () = tokio::time::sleep(Duration::from_millis(200)) => {
                    if let Some(status) = vm.qemu_exited() {
                        panic!("QEMU exited ({status}) before READY; console:\n{}", vm.log("console.log"));
                    }
                    assert!(
                        started.elapsed() < BOOT_TIMEOUT,
                        "no READY within {BOOT_TIMEOUT:?} (QEMU used {} s of CPU); {}",
                        cpu_ticks(qemu_pid) / 100,
                        vm.diagnostics()
                    );
                    let ticks = cpu_ticks(qemu_pid);
                    if ticks > progress.0 + STALL_TICKS {
                        progress = (ticks, Instant::now());
                    } else if progress.1.elapsed() > STALL {
                        return Err(format!(
                            "QEMU used {} ms of CPU in the last {STALL:?} ({:.1?} after it started); {}",
                            ticks.saturating_sub(progress.0) * 10, started.elapsed(), vm.diagnostics()
                        ));
                    }
                }
            }
        };
        let mut line = String::new();
        BufReader::new(accepted).read_line(&mut line).await.expect("read READY");
        vm.boot = started.elapsed();
        vm.ready_line = line.trim_end().to_owned();
        eprintln!("booted in {:.2?}: {}", vm.boot, vm.ready_line);
        Ok(vm)
    }

    /// The console and vhost-device-vsock logs, for a boot that went wrong.
    fn diagnostics(&self) -> String {
        format!("console:\n{}\nvhost-device-vsock log:\n{}", self.log("console.log"), self.log("vhost.log"))
    }

    fn qemu_exited(&mut self) -> Option<std::process::ExitStatus> {
        self.qemu.as_mut().and_then(|q| q.try_wait().expect("wait qemu"))
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    /// A gRPC client over the hybrid vsock: `CONNECT 1024\n`, `OK <port>\n`, then HTTP/2.
    async fn client(&self) -> AgentClient<Channel> {
        let uds = self.dir.path().join("vm.vsock");
        let channel = Endpoint::from_static("http://agent.invalid")
            .connect_with_connector(tower::service_fn(move |_: Uri| hvsock_connect(uds.clone(), AGENT_PORT)))
            .await
            .expect("connect to the agent over the hybrid vsock");
        AgentClient::new(channel).max_decoding_message_size(atoll_proto::limits::MAX_MESSAGE_BYTES)
    }

    /// Runs `sh -c script` in the guest and returns (exit code, stdout).
    async fn sh(&self, script: &str) -> (i32, String) {
        self.sh_within(script, 0).await
    }

    /// [`Vm::sh`] with the agent's timeout for the command (0: its default, 60 s).
    async fn sh_within(&self, script: &str, timeout_ms: u32) -> (i32, String) {
        let resp = self
            .client()
            .await
            .exec(pb::ExecRequest {
                command: Some(pb::Command { shell: script.into(), ..Default::default() }),
                timeout_ms,
                ..Default::default()
            })
            .await
            .expect("Exec")
            .into_inner();
        let code = match resp.status.and_then(|s| s.kind) {
            Some(pb::exit_status::Kind::Code(c)) => c,
            other => panic!("`{script}` did not exit normally: {other:?}"),
        };
        let out = String::from_utf8_lossy(&resp.stdout.unwrap_or_default().data).into_owned();
        (code, out)
    }

    /// Waits (boundedly) for QEMU to exit on its own and returns whether it did.
    fn wait_exit(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.qemu_exited().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        for child in self.qemu.iter_mut().chain([&mut self.vhost]) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn hvsock_connect(uds: PathBuf, port: u32) -> std::io::Result<TokioIo<tokio::net::UnixStream>> {
    let mut s = tokio::net::UnixStream::connect(&uds).await?;
    s.write_all(format!("CONNECT {port}\n").as_bytes()).await?;
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while reply.last() != Some(&b'\n') {
        if s.read(&mut byte).await? == 0 || reply.len() > 64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "no OK from the hybrid vsock",
            ));
        }
        reply.push(byte[0]);
    }
    if !reply.starts_with(b"OK ") {
        let text = String::from_utf8_lossy(&reply).into_owned();
        return Err(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, text));
    }
    Ok(TokioIo::new(s))
}

/// CPU time `pid` has used (user and system), in clock ticks; 0 once it is gone.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): state is the first,
    // utime and stime the 12th and 13th.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    field(11) + field(12)
}

/// Hardware KVM where its module is loaded, software emulation otherwise.
fn accel() -> &'static str {
    if Path::new("/sys/module/kvm_intel").exists() || Path::new("/sys/module/kvm_amd").exists() {
        "kvm"
    } else {
        "tcg"
    }
}

fn qemu_command(t: &Template, extra: &str, vhost_sock: &Path, console: &Path) -> Command {
    let mut cmd = Command::new(program("qemu-system-x86_64"));
    cmd.args(["-M", "microvm,rtc=on", "-accel", accel(), "-cpu", "max", "-m", "512M", "-smp", "2"])
        .args(["-nodefaults", "-no-user-config", "-nographic", "-no-reboot"])
        .args(["-object", "memory-backend-memfd,id=mem,size=512M,share=on", "-numa", "node,memdev=mem"])
        .arg("-chardev")
        .arg(format!("socket,id=c0,path={}", vhost_sock.display()))
        .args(["-device", "vhost-user-vsock-device,chardev=c0"])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-kernel")
        .arg(&t.kernel)
        .arg("-append")
        .arg(format!(
            "console=ttyS0 tsc_early_khz=2000000 lpj=4000000 tsc=reliable panic=-1 {} {extra}",
            t.cmdline
        ));
    if let Some(initrd) = &t.initrd {
        cmd.arg("-initrd").arg(initrd);
    }
    if let Some(rootfs) = &t.rootfs {
        cmd.arg("-drive")
            .arg(format!("file={},if=none,id=d0,format=raw,snapshot=on", rootfs.display()))
            .args(["-device", "virtio-blk-device,drive=d0"]);
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit());
    cmd
}

#[tokio::test(flavor = "multi_thread")]
async fn vm_minimal_boots_and_answers_info_over_vsock() {
    let vm = Vm::boot(&Template::require("minimal"), "atoll.hostname=vm-images-test").await;
    assert!(vm.ready_line.starts_with("READY "), "unexpected announcement {:?}", vm.ready_line);
    let info = vm.client().await.info(pb::InfoRequest {}).await.expect("Info").into_inner();
    assert!(info.pid1, "the agent must be PID 1 in the minimal image");
    assert_eq!(info.hostname, "vm-images-test");
    assert!(info.kernel.starts_with("Linux 6."), "kernel {:?}", info.kernel);
    assert_eq!(info.cpus, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn vm_minimal_pid1_mounts_filesystems_and_brings_up_lo() {
    let vm = Vm::boot(&Template::require("minimal"), "").await;
    let (code, mounts) = vm.sh("cut -d' ' -f2,3 /proc/mounts").await;
    assert_eq!(code, 0);
    for want in ["/proc proc", "/sys sysfs", "/dev devtmpfs", "/dev/pts devpts", "/run tmpfs", "/tmp tmpfs"] {
        assert!(mounts.lines().any(|l| l == want), "`{want}` missing from /proc/mounts:\n{mounts}");
    }
    let (code, out) =
        vm.sh("hostname; cat /sys/class/net/lo/operstate /sys/class/net/lo/flags; echo $PATH").await;
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "atoll", "default hostname");
    let flags = u32::from_str_radix(lines[2].trim_start_matches("0x"), 16).expect("lo flags");
    assert_eq!(flags & 1, 1, "lo is not up (flags {})", lines[2]);
    assert!(lines[3].contains("/usr/bin") && lines[3].contains("/bin"), "PATH {:?}", lines[3]);
    // Packets to 127.0.0.1 flow only when lo is up.
    let (code, out) = vm.sh("ping -c 1 -W 10 127.0.0.1").await;
    assert_eq!(code, 0, "ping 127.0.0.1 failed:\n{out}");

    // A process that left the command's session dies with the command; inside the guest
    // the agent finds it through /proc/<pid>/task/*/children (CONFIG_PROC_CHILDREN).
    let (code, out) = vm.sh("test -e /proc/1/task/1/children && echo children").await;
    assert_eq!((code, out.trim()), (0, "children"), "the guest kernel has no /proc/<pid>/task/*/children");
    let (code, pid) = vm.sh("setsid sleep 777 >/dev/null 2>&1 & echo $!").await;
    assert_eq!(code, 0);
    let (_, out) = vm.sh(&format!("cat /proc/{}/cmdline 2>/dev/null | tr '\\0' ' '; echo", pid.trim())).await;
    assert!(!out.contains("sleep 777"), "the setsid escapee {} outlived its command: {out}", pid.trim());
}

#[tokio::test(flavor = "multi_thread")]
async fn vm_minimal_powers_off_on_sigterm_to_pid1() {
    let mut vm = Vm::boot(&Template::require("minimal"), "").await;
    let mut client = vm.client().await;
    // The reply may or may not arrive before the VM goes away; only the power-off counts.
    let _ = tokio::time::timeout(
        Duration::from_secs(30),
        client.exec(pb::ExecRequest {
            command: Some(pb::Command { shell: "kill -TERM 1".into(), ..Default::default() }),
            ..Default::default()
        }),
    )
    .await;
    assert!(
        vm.wait_exit(Duration::from_secs(120)),
        "QEMU still runs after SIGTERM to PID 1; console:\n{}",
        vm.log("console.log")
    );
}

/// The `debian` template, if built (see [`atoll_tests::debian_or_skip`]).
fn debian_template() -> Option<Template> {
    atoll_tests::debian_or_skip().then(|| Template::load("debian").expect("the debian template.json reads"))
}

#[tokio::test(flavor = "multi_thread")]
async fn vm_debian_runs_python3_node_and_the_coding_tools_offline() {
    let Some(t) = debian_template() else { return };
    let vm = Vm::boot(&t, "").await;
    let (code, out) = vm.sh("python3 -c 'import sys, os; print(sys.version_info[0], os.getpid() > 1)'").await;
    assert_eq!((code, out.trim()), (0, "3 True"));
    // Debian bookworm's Node.js is 18; JSON and a computation show it runs, not just exists.
    let js = r#"console.log(process.version.split(".")[0], JSON.stringify([1, 2, 3].map((n) => n * n)))"#;
    let (code, out) = vm.sh(&format!("node -e '{js}'")).await;
    assert_eq!((code, out.trim()), (0, "v18 [1,4,9]"));
    let (code, out) = vm.sh("echo persisted > /root/f && cat /root/f && cat /etc/debian_version").await;
    assert_eq!(code, 0);
    assert!(out.starts_with("persisted\n12"), "{out}");
    coding_tools_work_offline(&vm).await;
}

/// What coding agents reach for first (#33), each made to do its job, in a VM without
/// a network device (so nothing is fetched): a commit, a venv with its pip, npm, a C
/// program compiled and run, curl. A template built before these tools were added
/// fails here, naming the tool.
async fn coding_tools_work_offline(vm: &Vm) {
    let (code, out) = vm.sh("ls /sys/class/net").await;
    assert_eq!((code, out.trim()), (0, "lo"), "the VM has a network device");
    // Under TCG on a loaded machine a venv (ensurepip) or a compile takes minutes.
    const SLOW_MS: u32 = 540_000;
    let must = |what: &str, (code, out): (i32, String)| {
        assert_eq!(
            code, 0,
            "{what} failed (a debian template built before it was added? run rootfs/setup.sh --with-debian): {out}"
        );
        out
    };
    let git = "cd /root && git init -q -b main repo && cd repo && git config user.email a@example.test \
               && git config user.name agent && echo hi > f && git add f && git commit -q -m first 2>&1 \
               && git log --format=%s && git rev-list --count HEAD";
    assert_eq!(must("git", vm.sh_within(git, SLOW_MS).await).trim(), "first\n1");
    let venv = "python3 -m venv /root/venv 2>&1 && /root/venv/bin/pip --version 2>&1 \
                && /root/venv/bin/python -c 'import sys; print(sys.prefix)'";
    let out = must("python3 -m venv", vm.sh_within(venv, SLOW_MS).await);
    assert!(
        out.starts_with("pip ") && out.contains("/root/venv/lib/python3") && out.ends_with("/root/venv\n"),
        "{out}"
    );
    let out = must("npm", vm.sh_within("npm --version 2>&1", SLOW_MS).await);
    assert!(
        out.trim().split('.').count() == 3 && out.trim().split('.').all(|p| p.parse::<u32>().is_ok()),
        "npm --version: {out}"
    );
    let c = r#"cat > /root/hello.c <<'EOF'
#include <stdio.h>
int main(void) { printf("hello from cc %d\n", 6 * 7); return 0; }
EOF
cc -O2 -o /root/hello /root/hello.c 2>&1 && /root/hello && make --version | head -n1"#;
    let out = must("cc", vm.sh_within(c, SLOW_MS).await);
    assert!(out.starts_with("hello from cc 42\nGNU Make 4"), "{out}");
    let out = must(
        "curl",
        vm.sh("curl --version 2>&1 | head -n1 && curl -sS file:///etc/debian_version 2>&1").await,
    );
    assert!(out.starts_with("curl 7.") && out.contains("\n12."), "{out}");
    let out = must(
        "ca-certificates",
        vm.sh("grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt").await,
    );
    assert!(out.trim().parse::<u32>().is_ok_and(|n| n > 100), "ca-certificates.crt holds {out} certificates");
}

/// A data directory of its own whose `kernel/current` is the real one, so building a
/// template in a test does not touch the user's templates.
fn scratch_data_dir() -> tempfile::TempDir {
    let kernel = data_dir().join("kernel/current");
    assert!(kernel.join("vmlinux").is_file(), "no kernel at {}; run rootfs/setup.sh", kernel.display());
    let data = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(data.path().join("kernel")).expect("mkdir kernel");
    std::os::unix::fs::symlink(
        kernel.canonicalize().expect("kernel dir"),
        data.path().join("kernel/current"),
    )
    .expect("link kernel");
    data
}

/// Runs `atoll ARGS` with `ATOLL_DATA_DIR=data` and `ATOLL_STATE_DIR=data/state` (where a
/// build makes the template's snapshot); returns stdout, panics with stderr on failure.
fn atoll(data: &Path, args: &[&str]) -> String {
    let out = Command::new(atoll_tests::workspace_bin("atoll"))
        .args(args)
        .env("ATOLL_DATA_DIR", data)
        .env("ATOLL_STATE_DIR", data.join("state"))
        .output()
        .expect("run atoll");
    assert!(
        out.status.success(),
        "atoll {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

#[tokio::test(flavor = "multi_thread")]
async fn vm_custom_template_from_a_directory_boots_with_the_agent_as_init() {
    let data = scratch_data_dir();
    // A user's tree: static busybox, `/sbin` an absolute symlink (the agent must land
    // in the tree's /bin, not the host's), and a file of the user's.
    let tree = tempfile::tempdir().expect("tempdir");
    let t = tree.path();
    std::fs::create_dir_all(t.join("bin")).unwrap();
    std::fs::create_dir_all(t.join("etc")).unwrap();
    std::fs::copy("/bin/busybox", t.join("bin/busybox"))
        .expect("busybox-static is installed (rootfs/setup.sh)");
    for applet in ["sh", "cat", "ls"] {
        std::os::unix::fs::symlink("busybox", t.join("bin").join(applet)).unwrap();
    }
    std::os::unix::fs::symlink("/bin", t.join("sbin")).unwrap();
    std::fs::write(t.join("etc/marker"), "from the user's tree\n").unwrap();

    let tree_arg = t.to_str().unwrap();
    let built = atoll(data.path(), &["--json", "template", "build", "--from", tree_arg, "--name", "custom"]);
    assert!(!t.join("bin/atoll-agent").exists(), "the user's tree must not be modified");
    // The build ends by making the template's snapshot (booted, saved, removed).
    let built: serde_json::Value = serde_json::from_str(&built).expect("build --json");
    assert_eq!(built["snapshot"]["outcome"], "made", "{built}");
    let state = data.path().join("state");
    let snapshots = || -> Vec<String> {
        std::fs::read_dir(state.join(".template-snapshots"))
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default()
    };
    assert!(matches!(snapshots().as_slice(), [one] if one.starts_with("custom-512m-1c-default-")));
    assert!(atoll_tests::processes_mentioning(&state).is_empty(), "its sandbox is gone");
    let no_sandbox = std::fs::read_dir(&state)
        .unwrap()
        .flatten()
        .all(|e| e.file_name().to_string_lossy().starts_with('.'));
    assert!(no_sandbox, "no sandbox directory is left");
    let listed = atoll(data.path(), &["--json", "template", "ls"]);
    assert!(listed.contains("\"custom\""), "template ls: {listed}");

    let template = Template::load_from(data.path(), "custom").expect("template.json written");
    assert!(template.rootfs.is_some() && template.initrd.is_some());
    let vm = Vm::boot(&template, "").await;
    let (code, out) = vm.sh("cat /etc/marker; ls /bin/atoll-agent").await;
    assert_eq!((code, out.as_str()), (0, "from the user's tree\n/bin/atoll-agent\n"));
    let info = vm.client().await.info(pb::InfoRequest {}).await.expect("Info").into_inner();
    assert!(info.pid1);
    drop(vm);

    atoll(data.path(), &["template", "rm", "custom"]);
    assert!(!data.path().join("templates/custom").exists());
    assert_eq!(snapshots(), Vec::<String>::new(), "its snapshot went with it");
}

#[tokio::test(flavor = "multi_thread")]
async fn vm_debian_tree_rebaked_with_systemd_as_init_boots() {
    let Some(debian) = debian_template() else { return };
    let data = scratch_data_dir();
    // The user's tree as a tarball: debian's root filesystem, taken out of its image.
    let work = tempfile::tempdir().expect("tempdir");
    let tree = work.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    let rootfs = debian.rootfs.expect("debian has a rootfs");
    let dump = Command::new("debugfs")
        .arg("-R")
        .arg(format!("rdump / {}", tree.display()))
        .arg(&rootfs)
        .output()
        .expect("debugfs (e2fsprogs) is installed");
    assert!(dump.status.success(), "debugfs rdump: {}", String::from_utf8_lossy(&dump.stderr));
    let tarball = work.path().join("tree.tar.gz");
    let tar = Command::new("tar")
        .arg("-czf")
        .arg(&tarball)
        .arg("-C")
        .arg(&tree)
        .args(["--numeric-owner", "."])
        .status()
        .expect("tar");
    assert!(tar.success());
    std::fs::remove_dir_all(&tree).unwrap();

    let from = tarball.to_str().unwrap();
    let args =
        ["template", "build", "--from", from, "--name", "deb-systemd", "--init", "systemd", "--no-snapshot"];
    atoll(data.path(), &args);
    assert!(!data.path().join("state/.template-snapshots").exists(), "--no-snapshot makes none");
    let template = Template::load_from(data.path(), "deb-systemd").expect("template.json written");
    assert!(template.cmdline.contains("atoll.init=/usr/lib/systemd/systemd"), "{}", template.cmdline);

    let vm = Vm::boot(&template, "").await;
    let info = vm.client().await.info(pb::InfoRequest {}).await.expect("Info").into_inner();
    assert!(!info.pid1, "systemd, not the agent, is PID 1");
    let (code, out) =
        vm.sh("cat /proc/1/comm; systemctl is-active atoll-agent.service; python3 -c 'print(6*7)'").await;
    assert_eq!((code, out.as_str()), (0, "systemd\nactive\n42\n"));
}
