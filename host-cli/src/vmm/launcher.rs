//! QEMU's command line for a sandbox (guest RAM, devices, the agent link's port),
//! its disk overlay, and choosing QEMU's accelerator.

use std::path::{Path, PathBuf};

use super::process::{ProcessError, find_in_path};
use super::state::Paths;
use super::template::Template;

/// The QEMU binary looked up in `PATH`.
pub const QEMU: &str = "qemu-system-x86_64";
/// The image tool used for copy-on-write overlays.
pub const QEMU_IMG: &str = "qemu-img";
/// QEMU id of the virtio-serial bus the agent link's port sits on.
pub const AGENT_SERIAL_BUS: &str = "vser0";
/// QEMU id of the chardev behind the agent link's port (`<dir>/vm/wire/agent.port`).
pub const AGENT_PORT_CHARDEV: &str = "agentport";
/// QEMU id of the agent link's port, for `device_del`/`device_add` on a restore.
pub const AGENT_PORT_DEVICE: &str = "agentport0";
/// QEMU id of guest RAM's memory backend; its RAM block (and so its part of a
/// migration stream) is named after it.
pub const GUEST_RAM: &str = "mem";

/// Why a process behind the sandbox could not be prepared or started.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// A program is missing or would not start.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// `qemu-img create` failed.
    #[error("could not create the copy-on-write disk {}: {output}", path.display())]
    Overlay {
        /// The overlay.
        path: PathBuf,
        /// What qemu-img said.
        output: String,
    },
}

/// QEMU's accelerator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualization through a kvm_intel / kvm_amd module.
    Kvm,
    /// Software emulation.
    Tcg,
}

impl Accel {
    /// `kvm` or `tcg`.
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }

    /// The `-accel` value. TCG's translation cache is capped at [`TCG_TB_MIB`]: QEMU 7.2
    /// defaults it to 1 GiB, filled as the guest runs new code, which outgrows the
    /// sandbox cgroup's headroom (`jail::cgroup::OVERHEAD_MIB`): a 512 MiB debian guest
    /// running `update-ca-certificates` had its QEMU killed by the cgroup at 1 GiB
    /// anonymous memory.
    pub fn qemu_arg(self) -> String {
        match self {
            Accel::Kvm => "kvm".into(),
            Accel::Tcg => format!("tcg,tb-size={TCG_TB_MIB}"),
        }
    }
}

/// The TCG translation cache, in MiB (see [`Accel::qemu_arg`]).
pub const TCG_TB_MIB: u32 = 128;

/// Picks KVM only when a hardware KVM module is loaded and `/dev/kvm` opens; otherwise
/// TCG. `$ATOLL_ACCEL=tcg|kvm` overrides the probe. Some hosts have a `/dev/kvm` (for
/// instance from kvm_pvm) that runs ordinary guests uselessly slowly, hence the probe.
pub fn probe_accel() -> Accel {
    match std::env::var("ATOLL_ACCEL").as_deref() {
        Ok("tcg") => return Accel::Tcg,
        Ok("kvm") => return Accel::Kvm,
        _ => {}
    }
    let modules = std::fs::read_to_string("/proc/modules").unwrap_or_default();
    let hw = hardware_kvm(&modules, Path::new("/sys/module"));
    let opens = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").is_ok();
    if hw && opens { Accel::Kvm } else { Accel::Tcg }
}

/// True when kvm_intel or kvm_amd is loaded: listed in `/proc/modules`, or (built in, or
/// where /proc/modules is missing) present as `/sys/module/<name>`, since both take
/// parameters. kvm_pvm and friends do not count.
fn hardware_kvm(proc_modules: &str, sys_module: &Path) -> bool {
    ["kvm_intel", "kvm_amd"].iter().any(|m| {
        proc_modules.lines().any(|l| l.split_whitespace().next() == Some(m)) || sys_module.join(m).is_dir()
    })
}

/// What QEMU needs to boot one sandbox.
#[derive(Debug)]
pub struct VmSpec<'a> {
    /// The sandbox id (used in QEMU's process name).
    pub id: &'a str,
    /// The sandbox name, which becomes the guest's hostname.
    pub name: &'a str,
    /// The template to boot.
    pub template: &'a Template,
    /// Guest memory.
    pub memory_mib: u32,
    /// Guest vCPUs.
    pub cpus: u32,
    /// Accelerator.
    pub accel: Accel,
    /// The sandbox's files.
    pub paths: &'a Paths,
    /// Whether the guest gets a NIC (attached to the network helper's `net.sock`).
    pub network: bool,
    /// Host folders and the disk size.
    pub storage: &'a super::storage::Storage,
    /// Where guest RAM comes from.
    pub ram: GuestRam<'a>,
}

/// Where a VM's guest RAM comes from.
#[derive(Debug, Clone, Copy)]
pub enum GuestRam<'a> {
    /// Fresh anonymous memory, for a boot: the host gives a page when the guest
    /// first writes it.
    Fresh,
    /// A snapshot's `ram.bin`, mapped privately (`share=off`): pages are read from the
    /// file (the page cache, shared by every VM started from it) when the guest first
    /// touches them and copied when it first writes them; the file never changes.
    Snapshot(&'a Path),
}

impl GuestRam<'_> {
    /// The `-object` value of the memory backend, `size` MiB.
    fn backend(self, size: u32) -> String {
        match self {
            GuestRam::Fresh => format!("memory-backend-ram,id={GUEST_RAM},size={size}M"),
            GuestRam::Snapshot(file) => format!(
                "memory-backend-file,id={GUEST_RAM},size={size}M,mem-path={},share=off",
                // QEMU's option syntax: a comma in a value is written twice.
                file.display().to_string().replace(',', ",,")
            ),
        }
    }
}

/// The guest NIC's MAC address (QEMU's own prefix, as slirp uses).
pub const GUEST_MAC: &str = "52:54:00:12:34:56";
/// The guest's addressing on its NIC, for `atoll.net=`: its address, then the gateway
/// (the network helper, which is the DNS server too).
pub const GUEST_NET: &str = "10.0.2.15/24,10.0.2.2";
/// The NIC's MTU, which the guest driver takes from the device: large frames cost the
/// network helper's userspace stack far less per byte (passt advises the same).
pub const GUEST_MTU: u16 = atoll_net::stack::GUEST_MTU;

/// Kernel parameters that turn off the guest's hang detectors and its boot-time timer
/// check (see [`qemu_args`]). Under emulation on a loaded host the check's busy wait sees
/// too few timer ticks and the kernel panics with "IO-APIC + timer doesn't work!" (seen on
/// the 2-core test machine at load 15); `no_timer_check` is what cloud images pass too.
const HANG_DETECTORS_OFF: &str = "nowatchdog no_timer_check rcupdate.rcu_cpu_stall_suppress=1 \
     sysctl.kernel.hung_task_timeout_secs=0";

/// QEMU's command line: q35 with the uncompressed kernel's PVH entry, guest RAM as
/// [`GuestRam`] says, the agent link's virtio-serial port, serial console to the
/// network helper,
/// QMP on a Unix socket, and no reboot, so a guest panic ends QEMU at once.
pub fn qemu_args(spec: &VmSpec<'_>) -> Vec<String> {
    let p = spec.paths;
    let mem = spec.memory_mib;
    // Names are checked to be letters, digits, `-`, `_` and `.`: safe on a kernel command line.
    // The hang detectors are off (`nowatchdog`, RCU stall warnings, hung tasks): `atoll
    // pause` freezes QEMU with SIGSTOP (control.rs says why), so a resumed guest finds its
    // clock moved on by the whole pause and, without these, reports a soft lockup of
    // whatever ran and an RCU stall, with stack dumps, after any pause over 20 s, and
    // any task that was waiting on I/O as hung after one over 120 s.
    let mut cmdline =
        format!("console=ttyS0 panic=-1 reboot=t {HANG_DETECTORS_OFF} atoll.hostname={}", spec.name);
    if spec.template.rootfs.is_some()
        && !spec.template.cmdline.split_whitespace().any(|w| w.starts_with("root="))
    {
        cmdline.push_str(" root=/dev/vda rw");
    }
    if spec.network {
        cmdline.push_str(&format!(" atoll.net={GUEST_NET}"));
    }
    let storage = super::storage::cmdline(spec.storage);
    if !storage.is_empty() {
        cmdline.push(' ');
        cmdline.push_str(&storage);
    }
    if !spec.template.cmdline.trim().is_empty() {
        cmdline.push(' ');
        cmdline.push_str(spec.template.cmdline.trim());
    }
    let mut args: Vec<String> = vec![
        "-name".into(),
        format!("atoll-{},process=atoll-{}", spec.id, spec.id),
        "-machine".into(),
        "q35".into(),
        "-accel".into(),
        spec.accel.qemu_arg(),
        "-smp".into(),
        spec.cpus.to_string(),
        "-m".into(),
        format!("{mem}M"),
        "-object".into(),
        spec.ram.backend(mem),
        "-numa".into(),
        format!("node,memdev={GUEST_RAM}"),
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-display".into(),
        "none".into(),
        "-no-reboot".into(),
        // To the network helper, which alone writes `vm/console.log` and keeps it
        // bounded (`sandbox::network::helper::console`). A client without reconnecting:
        // once the helper is gone, QEMU drops what the guest writes.
        "-chardev".into(),
        format!(
            "socket,id=console,path={},server=off",
            crate::sandbox::network::config::console_socket_path(&p.dir).display()
        ),
        "-serial".into(),
        "chardev:console".into(),
        "-qmp".into(),
        format!("unix:{},server=on,wait=off", p.qmp_socket.display()),
        // A VM generation id: a restored snapshot gets a new one, and Linux reseeds its
        // random number generator when it changes (see vmm::migrate).
        "-device".into(),
        "vmgenid,guid=auto".into(),
        // The agent link (vmm::agent_link): a virtio-serial port served inside QEMU on
        // a Unix socket in the sandbox directory, which migrates with the VM.
        "-device".into(),
        format!("virtio-serial-pci,id={AGENT_SERIAL_BUS}"),
        "-chardev".into(),
        format!(
            "socket,id={AGENT_PORT_CHARDEV},path={},server=on,wait=off",
            crate::vmm::agent_link::port_path(&p.dir).display()
        ),
        "-device".into(),
        agent_port_device(),
        "-kernel".into(),
        spec.template.kernel.display().to_string(),
        "-append".into(),
        cmdline,
    ];
    if spec.accel == Accel::Kvm {
        args.extend(["-cpu".into(), "host".into()]);
    }
    if spec.network {
        // `romfile=`: no option ROM; the kernel is booted directly, nothing PXE-boots.
        let frames = crate::sandbox::network::config::frames_path(&p.dir);
        args.extend([
            "-netdev".into(),
            format!("stream,id=net0,server=off,addr.type=unix,addr.path={}", frames.display()),
            "-device".into(),
            format!("virtio-net-pci,netdev=net0,mac={GUEST_MAC},romfile=,host_mtu={GUEST_MTU}"),
        ]);
    }
    args.extend(super::storage::qemu_args(spec.storage));
    if let Some(size) = spec.storage.display.or(spec.template.display) {
        args.extend(crate::desktop::size::qemu_args(size));
        args.extend(crate::desktop::view::qemu_args(&p.vm));
    }
    if let Some(initrd) = &spec.template.initrd {
        args.extend(["-initrd".into(), initrd.display().to_string()]);
    }
    if let Some(overlay) = &p.overlay {
        // `cache=unsafe`: QEMU ignores the guest's flushes. The overlay is scratch that
        // dies with the sandbox (a crashed host leaves only dead sandboxes, which `atoll
        // kill` deletes), so flushing it to the host disk bought nothing, and it made
        // every guest fsync wait for the host's. A durable 1 KiB write in the guest
        // went from 2.7-3.3 ms to 1.9-2.0 ms (bench/guest_durable_write.py).
        args.extend([
            "-drive".into(),
            format!("file={},format=qcow2,if=virtio,discard=unmap,cache=unsafe", overlay.display()),
        ]);
    }
    args
}

/// The `-device` / `device_add` value of the agent link's port.
pub fn agent_port_device() -> String {
    format!(
        "virtserialport,bus={AGENT_SERIAL_BUS}.0,chardev={AGENT_PORT_CHARDEV},name={},id={AGENT_PORT_DEVICE}",
        atoll_proto::link::PORT_NAME
    )
}

/// Makes a qcow2 overlay backed by the template's raw image, which is never written;
/// `size` in bytes makes its disk larger than the image (the agent grows the
/// filesystem to fill it).
pub async fn create_overlay(base: &Path, overlay: &Path, size: Option<u64>) -> Result<(), LaunchError> {
    let qemu_img = find_in_path(QEMU_IMG)?;
    let out = tokio::process::Command::new(&qemu_img)
        .args(["create", "-q", "-f", "qcow2", "-F", "raw", "-b"])
        .arg(base)
        .arg(overlay)
        .args(size.map(|s| s.to_string()))
        .output()
        .await
        .map_err(|source| ProcessError::Spawn { program: QEMU_IMG.into(), source })?;
    if out.status.success() {
        Ok(())
    } else {
        let text = String::from_utf8_lossy(&out.stderr).trim().to_string();
        Err(LaunchError::Overlay { path: overlay.to_path_buf(), output: text })
    }
}

/// The last `lines` lines of a log file, for error messages ("(empty)" if none), control
/// characters escaped.
pub fn tail(path: &Path, lines: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    // Only the last 64 KiB are read: a console log can grow large.
    let mut bytes = Vec::new();
    // Not followed if a link: the console is in the directory QEMU writes.
    if let Ok(mut f) = super::safe_fs::open_read(path) {
        let _ = f.seek(SeekFrom::End(-64 * 1024)).or_else(|_| f.seek(SeekFrom::Start(0)));
        let _ = f.take(64 * 1024).read_to_end(&mut bytes);
    }
    let text = String::from_utf8_lossy(&bytes);
    let kept: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let kept = &kept[kept.len().saturating_sub(lines)..];
    if kept.is_empty() {
        "(empty)".into()
    } else {
        kept.iter().map(|l| printable(l)).collect::<Vec<_>>().join("\n")
    }
}

/// `line` with its control characters (a guest's terminal escapes on its console, say)
/// escaped, tabs kept: what [`tail`] gives lands in error messages on a terminal.
fn printable(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for c in line.chars() {
        if c.is_control() && c != '\t' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vmm::template::InitKind;

    fn template(rootfs: bool, cmdline: &str) -> Template {
        Template {
            name: "t".into(),
            kernel: "/t/vmlinux".into(),
            initrd: (!rootfs).then(|| "/t/initrd.cpio".into()),
            rootfs: rootfs.then(|| "/t/rootfs.ext4".into()),
            cmdline: cmdline.into(),
            init: InitKind::Agent,
            display: None,
        }
    }

    fn append(args: &[String]) -> &str {
        let i = args.iter().position(|a| a == "-append").unwrap();
        &args[i + 1]
    }

    #[test]
    fn disk_templates_get_a_root_device_unless_they_name_one() {
        let paths = Paths::in_dir(Path::new("/s/id"), true);
        let t = template(true, "quiet");
        let spec = VmSpec {
            id: "id",
            name: "dev",
            template: &t,
            memory_mib: 256,
            cpus: 2,
            accel: Accel::Tcg,
            paths: &paths,
            network: false,
            storage: &Default::default(),
            ram: GuestRam::Fresh,
        };
        let args = qemu_args(&spec);
        assert!(append(&args).contains("root=/dev/vda rw") && append(&args).ends_with("quiet"));
        assert!(append(&args).contains(&format!(" {HANG_DETECTORS_OFF} ")));
        assert!(args.iter().any(|a| a.starts_with("file=/s/id/vm/rootfs.qcow2,format=qcow2")));
        assert!(args.iter().any(|a| a.contains("rootfs.qcow2") && a.ends_with(",cache=unsafe")));
        assert!(args.contains(&"memory-backend-ram,id=mem,size=256M".to_string()));
        assert!(!args.iter().any(|a| a.contains("vsock")), "no vsock device: the agent link replaces it");
        assert!(
            args.iter().any(|a| a == "socket,id=console,path=/s/id/vm/wire/tty.sock,server=off"),
            "{args:?}"
        );
        assert!(args.iter().any(|a| a.starts_with("socket,id=agentport,path=/s/id/vm/wire/agent.port,")));
        assert!(args.iter().any(|a| a.starts_with("unix:/s/id/vm/qmp.sock,")));
        let ram = Path::new("/snaps/a,b/ram.bin");
        let args = qemu_args(&VmSpec { ram: GuestRam::Snapshot(ram), ..spec });
        let backend = "memory-backend-file,id=mem,size=256M,mem-path=/snaps/a,,b/ram.bin,share=off";
        assert!(args.contains(&backend.to_string()), "{args:?}");
        let t = template(true, "root=/dev/vdb");
        let args = qemu_args(&VmSpec { template: &t, ..spec });
        assert!(!append(&args).contains("/dev/vda"));
    }

    #[test]
    fn initramfs_templates_pass_the_initrd() {
        let paths = Paths::in_dir(Path::new("/s/id"), false);
        let t = template(false, "");
        let spec = VmSpec {
            id: "id",
            name: "dev",
            template: &t,
            memory_mib: 512,
            cpus: 1,
            accel: Accel::Kvm,
            paths: &paths,
            network: true,
            storage: &Default::default(),
            ram: GuestRam::Fresh,
        };
        let args = qemu_args(&spec);
        assert!(args.windows(2).any(|w| w[0] == "-initrd" && w[1] == "/t/initrd.cpio"));
        assert!(append(&args).contains(" atoll.net=10.0.2.15/24,10.0.2.2"), "{}", append(&args));
        assert!(
            args.iter()
                .any(|a| a == "stream,id=net0,server=off,addr.type=unix,addr.path=/s/id/vm/wire/net.sock")
        );
        assert!(args.iter().any(|a| a.starts_with("virtio-net-pci,netdev=net0,mac=52:54:00:12:34:56")));
        let args = qemu_args(&VmSpec { network: false, ..spec });
        assert!(!append(&args).contains("atoll.net") && !args.iter().any(|a| a == "-netdev"));
        assert!(append(&args).contains("atoll.hostname=dev"), "{}", append(&args));
        assert!(args.windows(2).any(|w| w[0] == "-accel" && w[1] == "kvm"));
        assert!(!args.iter().any(|a| a == "-drive"));
    }

    #[test]
    fn only_hardware_kvm_modules_count() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("kvm_pvm")).unwrap();
        assert!(!hardware_kvm("kvm_pvm 1 0 - Live 0x0\nkvm 2 1 kvm_pvm, Live 0x0\n", d.path()));
        assert!(hardware_kvm("kvm_intel 1 0 - Live 0x0\n", d.path()));
        std::fs::create_dir(d.path().join("kvm_amd")).unwrap();
        assert!(hardware_kvm("", d.path()), "a built-in module shows only in /sys/module");
    }

    #[test]
    fn tail_keeps_the_last_non_empty_lines() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("log");
        std::fs::write(&f, "a\nb\n\nc\n").unwrap();
        assert_eq!(tail(&f, 2), "b\nc");
        let mut big = "x".repeat(200 * 1024);
        big.push_str("\nlast\n");
        std::fs::write(&f, big).unwrap();
        assert!(tail(&f, 2).ends_with("\nlast"), "reads the end of a large log");
        assert_eq!(tail(&d.path().join("none"), 2), "(empty)");
        // What a guest's root writes to its console reaches a terminal escaped.
        std::fs::write(&f, "ok\tline\r\n\x1b]52;c;cHduZWQ=\x07\x1b[2Jgone \u{9b}31m\n").unwrap();
        let got = tail(&f, 2);
        assert!(!got.chars().any(|c| c.is_control() && c != '\n' && c != '\t'), "{got:?}");
        assert_eq!(got, "ok\tline\n\\u{1b}]52;c;cHduZWQ=\\u{7}\\u{1b}[2Jgone \\u{9b}31m");
    }
}
