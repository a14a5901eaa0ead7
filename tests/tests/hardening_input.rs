//! Bad input does not hurt the agent: garbage on its socket leaves other clients
//! served; over-size messages, megabyte command lines and NUL bytes get clear errors;
//! output that is not UTF-8 (or that a cap cuts mid-character) arrives as exact bytes;
//! symlink loops, over-long and non-UTF-8 names are handled without a hang.

mod hardening_util;

use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;

use atoll_proto::agent::v1 as pb;
use atoll_tests::{Agent, noise};
use futures::StreamExt;
use hardening_util::{alive, argv, shell};
use tonic::Code;

fn with_env(mut req: pb::ExecRequest, key: &str, value: &str) -> pb::ExecRequest {
    req.command.as_mut().unwrap().env.insert(key.into(), value.into());
    req
}

#[tokio::test]
async fn garbage_on_the_socket_does_not_disturb_other_clients() {
    let agent = Agent::start();
    let mut client = agent.client().await;
    let mut bad = Vec::new();
    // A connection that never speaks.
    bad.push(UnixStream::connect(&agent.socket).unwrap());
    // Half an HTTP/2 preface, then silence.
    let mut half = UnixStream::connect(&agent.socket).unwrap();
    half.write_all(b"PRI * HTTP/2.0\r\n\r").unwrap();
    bad.push(half);
    // Random bytes; the agent may close the connection, which is fine.
    for seed in 1..=5 {
        let mut noisy = UnixStream::connect(&agent.socket).unwrap();
        let _ = noisy.write_all(&noise(64 * 1024, seed));
        bad.push(noisy);
    }
    // A full preface followed by garbage frames.
    let mut framed = UnixStream::connect(&agent.socket).unwrap();
    let _ = framed.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    let _ = framed.write_all(&noise(4096, 99));
    bad.push(framed);
    // HTTP/1.1 instead of HTTP/2.
    let mut http1 = UnixStream::connect(&agent.socket).unwrap();
    let _ = http1.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    bad.push(http1);

    for i in 0..20 {
        let resp = client.exec(shell(&format!("echo {i}"))).await.expect("exec beside garbage").into_inner();
        assert_eq!(resp.stdout.unwrap().data, format!("{i}\n").into_bytes());
    }
    // New clients still connect while the bad connections are open.
    let resp = agent.client().await.exec(shell("echo new")).await.unwrap().into_inner();
    assert_eq!(resp.stdout.unwrap().data, &b"new\n"[..]);
    drop(bad);
    assert!(alive(agent.pid()), "the agent died");
}

#[tokio::test]
async fn a_message_over_the_maximum_is_rejected_and_the_agent_keeps_serving() {
    let agent = Agent::start();
    // This client would send anything; the agent must be the one refusing.
    let mut client = agent.client().await.max_encoding_message_size(64 << 20);
    let big = pb::ExecRequest {
        stdin: vec![b'x'; atoll_proto::limits::MAX_MESSAGE_BYTES + 1024].into(),
        ..shell("wc -c")
    };
    let status = client.exec(big).await.expect_err("a 16 MiB+ message must be refused");
    assert!(
        matches!(status.code(), Code::ResourceExhausted | Code::OutOfRange),
        "unexpected code {:?}: {}",
        status.code(),
        status.message()
    );
    let resp = agent.client().await.exec(shell("echo still here")).await.unwrap().into_inner();
    assert_eq!(resp.stdout.unwrap().data, &b"still here\n"[..]);
}

#[tokio::test]
async fn a_command_line_of_megabytes_is_refused_with_advice() {
    let agent = Agent::start();
    let mut client = agent.client().await;
    // One argument over the kernel's 128 KiB per-argument limit.
    let long = format!("echo {}", "y".repeat(2 << 20));
    let status = client.exec(shell(&long)).await.expect_err("E2BIG");
    assert_eq!(status.code(), Code::InvalidArgument, "{}", status.message());
    assert!(status.message().contains("stdin"), "no advice in: {}", status.message());
    // Many small arguments over the total limit.
    let many: Vec<String> =
        std::iter::once("true".to_owned()).chain((0..400_000).map(|i| format!("a{i}"))).collect();
    let req = pb::ExecRequest {
        command: Some(pb::Command { argv: many, ..Default::default() }),
        ..Default::default()
    };
    let status = client.exec(req).await.expect_err("E2BIG");
    assert_eq!(status.code(), Code::InvalidArgument, "{}", status.message());
    // The same data through stdin works.
    let req = pb::ExecRequest { stdin: vec![b'y'; 2 << 20].into(), ..shell("wc -c") };
    let resp = client.exec(req).await.unwrap().into_inner();
    assert_eq!(String::from_utf8(resp.stdout.unwrap().data.to_vec()).unwrap().trim(), (2 << 20).to_string());
}

#[tokio::test]
async fn nul_bytes_in_commands_env_and_paths_are_invalid_arguments() {
    let agent = Agent::start();
    let mut client = agent.client().await;
    let cases = [
        shell("echo a\0b"),
        argv(&["echo", "a\0b"]),
        with_env(shell("true"), "SECRET", "x\0y"),
        with_env(shell("true"), "A\0B", "x"),
        pb::ExecRequest {
            command: Some(pb::Command { shell: "true".into(), cwd: "/tmp\0x".into(), ..Default::default() }),
            ..Default::default()
        },
    ];
    for req in cases {
        let status = client.exec(req.clone()).await.expect_err("NUL must be refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{:?}: {}", req.command, status.message());
    }
    let status = client.stat(pb::StatRequest { path: "/tmp/a\0b".into() }).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{}", status.message());
}

#[tokio::test]
async fn output_that_is_not_utf8_or_cut_mid_character_arrives_as_exact_bytes() {
    let agent = Agent::start();
    let mut client = agent.client().await;
    let resp = client.exec(shell(r"printf '\377\376\000x'")).await.unwrap().into_inner();
    assert_eq!(resp.stdout.unwrap().data, &b"\xff\xfe\0x"[..]);
    // "é" is two bytes; a 5-byte cap of five of them cuts one in half.
    let resp = client
        .exec(pb::ExecRequest { output_limit: 5, ..shell("printf 'ééééé'") })
        .await
        .unwrap()
        .into_inner();
    let out = resp.stdout.unwrap();
    assert!(out.truncated && out.total_bytes == 10, "{out:?}");
    // A cap this small keeps the end: the exact last bytes, starting mid-character.
    let full = "ééééé".as_bytes();
    assert_eq!(out.data, &full[full.len() - 5..]);
    assert!(std::str::from_utf8(&out.data).is_err());
}

#[tokio::test]
async fn symlink_loops_long_names_and_non_utf8_names_do_not_hang_or_crash() {
    let agent = Agent::start();
    let mut client = agent.client().await;
    let dir = agent.dir.path().join("tree");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink("loop", dir.join("loop")).unwrap();
    std::os::unix::fs::symlink(&dir, dir.join("up")).unwrap();
    let raw = std::ffi::OsStr::from_bytes(b"caf\xe9");
    std::fs::write(dir.join(raw), b"latin-1").unwrap();

    let list = client
        .list_dir(pb::ListDirRequest {
            path: dir.display().to_string(),
            recursive: true,
            ..Default::default()
        })
        .await
        .expect("list a tree with loops")
        .into_inner();
    let names: Vec<_> = list.entries.iter().map(|e| e.path.clone()).collect();
    assert!(names.contains(&"loop".to_owned()) && names.contains(&"up".to_owned()), "{names:?}");
    let odd = list.entries.iter().find(|e| e.raw_path == b"caf\xe9"[..]).expect("the non-UTF-8 name, raw");
    assert!(odd.path.starts_with("caf"));

    let status = client
        .read_file(pb::ReadFileRequest { path: dir.join("loop").display().to_string(), ..Default::default() })
        .await
        .err();
    let status = match status {
        Some(s) => s,
        None => panic!("reading a symlink loop must fail"),
    };
    assert_ne!(status.code(), Code::Internal, "{}", status.message());

    let mut zip = client
        .download_dir(pb::DownloadDirRequest { path: dir.display().to_string(), max_bytes: 1 << 20 })
        .await
        .expect("download a tree with loops")
        .into_inner();
    let mut bytes = 0;
    while let Some(chunk) = zip.next().await {
        if let Some(pb::download_dir_chunk::Part::Data(d)) = chunk.expect("zip chunk").part {
            bytes += d.len();
        }
    }
    assert!(bytes > 0);

    let long = dir.join("n".repeat(300));
    let status = client.stat(pb::StatRequest { path: long.display().to_string() }).await.unwrap_err();
    assert_ne!(status.code(), Code::Internal, "{}", status.message());
    assert!(alive(agent.pid()));
}
