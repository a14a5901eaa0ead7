//! Which MCP servers are compared and how each one spells the four operations: `atoll mcp`
//! and the local servers users would pick instead, installed by `bench/run.sh`.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::mcp::{Op, ServerSpec, ToolCall};

/// The content every write sends: 1 KiB of text that a check can recognise.
pub(crate) fn kib_text() -> String {
    "atoll-bench\n".repeat(103)[..1024].to_string()
}

/// Files the servers work on, the same for all of them.
pub(crate) struct Workload {
    /// The directory every file server is allowed to touch.
    pub(crate) root: PathBuf,
    /// A 1 KiB file to read.
    pub(crate) read_file: PathBuf,
    /// Where writes go.
    pub(crate) write_file: PathBuf,
    /// A directory on tmpfs the file servers may touch too, when there is one.
    pub(crate) mem_root: Option<PathBuf>,
    /// A directory holding exactly 100 files.
    pub(crate) list_dir: PathBuf,
}

impl Workload {
    /// Creates the files under `root`; `mem_root`, if any, is a directory on tmpfs.
    pub(crate) fn create(root: &Path, mem_root: Option<&Path>) -> std::io::Result<Workload> {
        let list_dir = root.join("hundred");
        std::fs::create_dir_all(&list_dir)?;
        for i in 0..100 {
            std::fs::write(list_dir.join(format!("entry-{i:03}.txt")), b"x")?;
        }
        let read_file = root.join("read-1k.txt");
        std::fs::write(&read_file, kib_text())?;
        Ok(Workload {
            root: root.to_path_buf(),
            read_file,
            write_file: root.join("write-1k.txt"),
            mem_root: mem_root.map(Path::to_path_buf),
            list_dir,
        })
    }

    /// The directories a file server is allowed to touch.
    fn allowed(&self) -> Vec<String> {
        std::iter::once(&self.root).chain(&self.mem_root).map(|p| Workload::s(p)).collect()
    }

    /// The tmpfs write, as `tool` with `arguments(path)`, when there is a tmpfs.
    fn mem_write(&self, tool: &str, arguments: impl Fn(String) -> serde_json::Value) -> Option<ToolCall> {
        let path = Workload::s(&self.mem_root.as_ref()?.join("write-1k.txt"));
        Some(self.call(Op::WriteMem, tool, arguments(path)))
    }

    fn s(p: &Path) -> String {
        p.display().to_string()
    }

    fn call(&self, op: Op, tool: &str, arguments: serde_json::Value) -> ToolCall {
        let expect = match op {
            Op::Exec => "hi",
            Op::Read => "atoll-bench",
            // Peers answer writes with prose; atoll with JSON. Both name the path.
            Op::Write | Op::WriteMem => "write-1k",
            Op::List | Op::ListStat => "entry-099",
        };
        ToolCall { op, tool: tool.into(), arguments, expect: expect.into() }
    }
}

/// Where the peers were installed (`bench/run.sh` makes these).
pub(crate) struct PeerInstall {
    /// `node_modules/.bin` of the npm peers.
    pub(crate) npm_bin: PathBuf,
    /// The venv holding `mcp-shell-server`.
    pub(crate) shell_venv: PathBuf,
    /// A HOME for peers that write config files there.
    pub(crate) home: PathBuf,
}

/// `atoll mcp` pinned to the agent at `agent`.
pub(crate) fn atoll(atoll_bin: &Path, agent: &str, w: &Workload) -> ServerSpec {
    let (r, wr, l) = (Workload::s(&w.read_file), Workload::s(&w.write_file), Workload::s(&w.list_dir));
    ServerSpec {
        name: "atoll mcp".into(),
        command: atoll_bin.to_path_buf(),
        args: vec!["--agent".into(), agent.into(), "mcp".into()],
        env: vec![],
        cwd: w.root.clone(),
        calls: [
            w.call(Op::Exec, "sandbox_exec", json!({"command": "echo hi"})),
            w.call(Op::Read, "sandbox_files_read", json!({"path": r})),
            w.call(Op::Write, "sandbox_files_write", json!({"path": wr, "content": kib_text()})),
            // Names and types without a stat per entry, as the peers' plain listings.
            w.call(Op::List, "sandbox_files_list", json!({"path": l, "names_only": true})),
            // Each entry's size, mode and mtime (a stat each), as list_directory_with_sizes.
            w.call(Op::ListStat, "sandbox_files_list", json!({"path": l})),
        ]
        .into_iter()
        .chain(w.mem_write("sandbox_files_write", |p| json!({"path": p, "content": kib_text()})))
        .collect(),
    }
}

/// The peers that are installed, and why the others are left out.
pub(crate) fn peers(p: &PeerInstall, w: &Workload) -> (Vec<ServerSpec>, Vec<String>) {
    let (r, wr, l) = (Workload::s(&w.read_file), Workload::s(&w.write_file), Workload::s(&w.list_dir));
    let home = vec![("HOME".to_string(), Workload::s(&p.home))];
    let candidates = [
        ServerSpec {
            name: "server-filesystem".into(),
            command: p.npm_bin.join("mcp-server-filesystem"),
            args: w.allowed(),
            env: home.clone(),
            cwd: w.root.clone(),
            calls: [
                w.call(Op::Read, "read_text_file", json!({"path": r})),
                w.call(Op::Write, "write_file", json!({"path": wr, "content": kib_text()})),
                w.call(Op::List, "list_directory", json!({"path": l})),
                w.call(Op::ListStat, "list_directory_with_sizes", json!({"path": l})),
            ]
            .into_iter()
            .chain(w.mem_write("write_file", |p| json!({"path": p, "content": kib_text()})))
            .collect(),
        },
        ServerSpec {
            name: "desktop-commander".into(),
            command: p.npm_bin.join("desktop-commander"),
            args: vec![],
            env: home.clone(),
            cwd: w.root.clone(),
            calls: [
                w.call(Op::Exec, "start_process", json!({"command": "echo hi", "timeout_ms": 10000})),
                w.call(Op::Read, "read_file", json!({"path": r})),
                // It refuses to replace an existing file unless told to.
                w.call(
                    Op::Write,
                    "write_file",
                    json!({"path": wr, "content": kib_text(), "mode": "rewrite"}),
                ),
                w.call(Op::List, "list_directory", json!({"path": l, "depth": 1})),
            ]
            .into_iter()
            .chain(
                w.mem_write("write_file", |p| json!({"path": p, "content": kib_text(), "mode": "rewrite"})),
            )
            .collect(),
        },
        ServerSpec {
            name: "mcp-server-commands".into(),
            command: p.npm_bin.join("mcp-server-commands"),
            args: vec![],
            env: home.clone(),
            cwd: w.root.clone(),
            calls: vec![w.call(Op::Exec, "run_command", json!({"command": "echo hi"}))],
        },
        ServerSpec {
            name: "mcp-shell-server".into(),
            command: p.shell_venv.join("bin/mcp-shell-server"),
            args: vec![],
            env: [home.clone(), vec![("ALLOW_COMMANDS".into(), "echo".into())]].concat(),
            cwd: w.root.clone(),
            calls: vec![w.call(Op::Exec, "shell_execute", json!({"command": ["echo", "hi"]}))],
        },
    ];
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for c in candidates {
        if c.command.exists() {
            found.push(c);
        } else {
            missing.push(format!(
                "{}: {} is not installed (bench/run.sh installs it)",
                c.name,
                c.command.display()
            ));
        }
    }
    (found, missing)
}
