//! Finding every process a command started, including those that left its process
//! group or session on purpose (`setsid`, double-forked daemons).
//!
//! A process group reaches only the descendants that stayed in it. The agent is a child
//! subreaper, so escapees whose parent died are reparented to the agent and their ppid
//! chain no longer leads to the command. Each command therefore carries a tag in its
//! environment ([`TAG_VAR`]), inherited by everything it starts — the way Jenkins'
//! process-tree killer finds a build's leftovers. A command's members are:
//!
//! - processes in its process group or session, or whose ppid chain leads to it, unless
//!   they carry another command's tag (the command's pid may have been reused);
//! - processes carrying its tag, and their descendants.
//!
//! Zombies are skipped: they are already dead and the reaper collects them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::process::{Pid, Signal};

/// The environment variable that marks a command's processes.
pub const TAG_VAR: &str = "ATOLL_AGENT_CMD";

/// How many times [`signal_all`] rescans for processes forked while it was signalling,
/// and [`snapshot`] for children handed to the agent while it was walking.
const ROUNDS: usize = 8;

/// A tag no other command of this agent has.
pub fn new_tag() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// One line of `/proc/<pid>/stat`, the fields that matter here.
#[derive(Debug, Clone, Copy)]
struct Proc {
    pid: i32,
    ppid: i32,
    pgid: i32,
    sid: i32,
}

/// Parses `/proc/<pid>/stat`; `None` for a zombie or a process that is gone.
fn parse_stat(text: &str) -> Option<Proc> {
    // The command name may contain spaces and parentheses; it ends at the last `)`.
    let (head, rest) = text.rsplit_once(')')?;
    let pid = head.split_once('(')?.0.trim().parse().ok()?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    let mut num = || fields.next()?.parse::<i32>().ok();
    Some(Proc { pid, ppid: num()?, pgid: num()?, sid: num()? })
}

/// The agent's pid as the kernel's `pid_t`.
fn own_pid() -> i32 {
    i32::try_from(std::process::id()).expect("pids fit pid_t")
}

/// The agent's live descendants (the only candidates), with their stat fields.
///
/// Walks `/proc/<pid>/task/*/children` down from the agent, so a sweep reads only our
/// own processes however many run beside them (Debian's guest kernel has
/// CONFIG_PROC_CHILDREN). A kernel without it falls back to reading every
/// `/proc/<pid>/stat`.
///
/// The walk is not atomic. A process that dies during it (the sweep usually runs right
/// after killing the command's group) hands its children to the agent, the subreaper,
/// possibly after the agent's own list was read; they would be missed. So each
/// process's children are read before its stat, and when any stat shows it dead, the
/// agent's list is read again and whatever is new is walked too.
fn snapshot() -> Vec<Proc> {
    let me = own_pid();
    let Some(mut queue) = children_of(me) else { return every_process(me) };
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for _ in 0..ROUNDS {
        let mut saw_death = false;
        while let Some(pid) = queue.pop() {
            if pid == 1 || !seen.insert(pid) {
                continue;
            }
            let kids = children_of(pid).unwrap_or_default();
            match read_stat(pid) {
                Some(p) => out.push(p),
                None => saw_death = true,
            }
            queue.extend(kids);
        }
        if !saw_death {
            break;
        }
        queue = children_of(me).unwrap_or_default();
    }
    out
}

/// The children of every thread of `pid`; `None` when the kernel has no `children` files.
fn children_of(pid: i32) -> Option<Vec<i32>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut kids = Vec::new();
    let mut readable = false;
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            readable = true;
            kids.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
    }
    readable.then_some(kids)
}

fn read_stat(pid: i32) -> Option<Proc> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text).filter(|p| p.pid == pid)
}

/// Every live process except the agent itself and init.
fn every_process(me: i32) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        read_stat(pid).filter(|p| p.pid != me && p.pid != 1)
    })
    .collect()
}

/// Reads of an empty `/proc/<pid>/environ` before it is taken to be really empty.
const ENVIRON_TRIES: usize = 10;

/// The command tag in `pid`'s environment, if any.
///
/// A process in the middle of `execve` shows an empty environment for a moment (its new
/// memory is in place before its environment is copied there). Missing its tag then
/// would let an escapee that has just left the command's session (`setsid prog` calls
/// `setsid()`, then execs) outlive the command, so an empty read is retried a few times,
/// 200 µs apart. Only a process whose environment was cleared pays for that.
fn tag_of(pid: i32) -> Option<String> {
    let path = format!("/proc/{pid}/environ");
    let mut environ = std::fs::read(&path).ok()?;
    for _ in 1..ENVIRON_TRIES {
        if !environ.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
        environ = std::fs::read(&path).ok()?;
    }
    let prefix = format!("{TAG_VAR}=");
    environ
        .split(|b| *b == 0)
        .find_map(|var| var.strip_prefix(prefix.as_bytes()))
        .map(|tag| String::from_utf8_lossy(tag).into_owned())
}

/// The pids belonging to the command started as `root` with `tag`.
pub fn members(root: i32, tag: &str) -> Vec<i32> {
    if has_no_children() {
        // Members are the agent's descendants, and it has none: skip reading /proc.
        return Vec::new();
    }
    let procs = snapshot();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in &procs {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    // Only the agent's own descendants are candidates: the subreaper keeps escapees
    // among them, and nothing else on the machine can be hit by a reused pid.
    let ours = descendants(&children, own_pid());
    let mut found: HashSet<i32> = HashSet::new();
    let mut queue: Vec<i32> = Vec::new();
    for p in procs.iter().filter(|p| ours.contains(&p.pid)) {
        let structural = p.pid == root || p.pgid == root || p.sid == root;
        let belongs = match tag_of(p.pid) {
            Some(t) => t == tag,
            // No tag: the environment was cleared (or unreadable); trust the structure.
            None => structural,
        };
        if belongs {
            queue.push(p.pid);
        }
    }
    while let Some(pid) = queue.pop() {
        if found.insert(pid) {
            for &child in children.get(&pid).into_iter().flatten() {
                // A child carrying another command's tag was started by that command.
                if tag_of(child).is_none_or(|t| t == tag) {
                    queue.push(child);
                }
            }
        }
    }
    found.into_iter().collect()
}

/// True when the agent has no child at all, running or a zombie (`waitid` says ECHILD):
/// then nothing descends from it. The common case after a command ends with no other
/// command or job running, and one syscall instead of a walk of `/proc` (every process's
/// stat, on kernels without `/proc/<pid>/task/*/children`). `NOWAIT` leaves any zombie
/// to the reaper.
fn has_no_children() -> bool {
    use rustix::process::{WaitId, WaitIdOptions};
    let peek = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    matches!(rustix::process::waitid(WaitId::All, peek), Err(rustix::io::Errno::CHILD))
}

fn descendants(children: &HashMap<i32, Vec<i32>>, root: i32) -> HashSet<i32> {
    let mut found = HashSet::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for &child in children.get(&pid).into_iter().flatten() {
            if found.insert(child) {
                queue.push(child);
            }
        }
    }
    found
}

/// Sends `sig` to every member of the command; the caller has just sent it to the
/// process group `root`. For SIGKILL it rescans until no member is left alive (or
/// `ROUNDS` passes), so processes forked meanwhile die too. Other signals get one pass
/// and skip the members still in the group, which have the signal already: a second
/// SIGTERM or SIGINT is not harmless (a trap runs twice, a program takes it for "force
/// quit"). Returns how many processes were signalled.
pub fn signal_all(root: i32, tag: &str, sig: Signal) -> usize {
    let mut signalled: HashSet<i32> = HashSet::new();
    let rounds = if sig == Signal::KILL { ROUNDS } else { 1 };
    let group = Pid::from_raw(root);
    for _ in 0..rounds {
        let alive = members(root, tag);
        if alive.is_empty() {
            break;
        }
        for pid in alive {
            let Some(p) = Pid::from_raw(pid) else { continue };
            let in_group = || rustix::process::getpgid(Some(p)).ok() == group;
            if sig == Signal::KILL || !in_group() {
                let _ = rustix::process::kill_process(p, sig);
            }
            signalled.insert(pid);
        }
    }
    signalled.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_names() {
        let p = parse_stat("42 (a) b (c)) S 7 42 40 0 -1").unwrap();
        assert_eq!((p.pid, p.ppid, p.pgid, p.sid), (42, 7, 42, 40));
        assert!(parse_stat("43 (sleep) Z 1 43 43 0").is_none());
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn tags_are_unique() {
        assert_ne!(new_tag(), new_tag());
    }
}
