//! Load: 200 concurrent execs against the default cap of 64 (the rest get a clear
//! ResourceExhausted), a transfer cap, 10 000 mixed calls after which the agent's open
//! fds and memory are back near their baseline, and the memory of a large copy handed
//! back once the agent is idle.

mod hardening_util;

use futures::StreamExt;
use std::time::Duration;

use atoll_proto::agent::v1 as pb;
use atoll_proto::agent::v1::write_file_request::Part;
use atoll_tests::Agent;
use hardening_util::{eventually, eventually_within, fd_count, read_pids, rss_kib, shell};
use tonic::Code;

/// A command that records its pid and then waits for `go` to exist.
fn parked(dir: &std::path::Path) -> pb::ExecRequest {
    let (pids, go) = (dir.join("pids"), dir.join("go"));
    let script = format!(
        "echo $$ >> {}; while [ ! -e {} ]; do sleep 0.1; done; echo ok",
        pids.display(),
        go.display()
    );
    pb::ExecRequest { timeout_ms: 120_000, ..shell(&script) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_execs_succeed_or_get_resource_exhausted() {
    let agent = Agent::start();
    let dir = agent.dir.path().to_path_buf();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(agent.client().await);
    }
    let mut calls = Vec::new();
    for i in 0..200 {
        let mut client = clients[i % 4].clone();
        let req = parked(&dir);
        calls.push(tokio::spawn(async move { client.exec(req).await }));
    }
    // Every call is either running (its pid recorded) or already refused.
    let refused = || calls.iter().filter(|c| c.is_finished()).count();
    eventually("every exec to start or be refused", || read_pids(&dir.join("pids")).len() + refused() == 200)
        .await;
    assert_eq!(read_pids(&dir.join("pids")).len(), 64, "the default cap is 64 running commands");
    std::fs::write(dir.join("go"), b"").unwrap();
    let (mut ok, mut exhausted) = (0, 0);
    for call in calls {
        match call.await.unwrap() {
            Ok(resp) => {
                assert_eq!(resp.into_inner().stdout.unwrap().data, &b"ok\n"[..]);
                ok += 1;
            }
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{}", status.message());
                assert!(status.message().contains("64 commands are already running"), "{}", status.message());
                assert!(status.message().contains("--max-concurrent-execs"), "{}", status.message());
                exhausted += 1;
            }
        }
    }
    assert_eq!((ok, exhausted), (64, 136));
    // Slots come back: a new command runs.
    let resp = clients[0].exec(shell("echo again")).await.expect("a slot is free again").into_inner();
    assert_eq!(resp.stdout.unwrap().data, &b"again\n"[..]);
}

#[tokio::test]
async fn the_exec_cap_is_configurable_and_covers_exec_stream() {
    let agent = Agent::start_with(&["--max-concurrent-execs", "2"]);
    let dir = agent.dir.path().to_path_buf();
    let mut client = agent.client().await;
    let first = tokio::spawn({
        let (mut c, r) = (client.clone(), parked(&dir));
        async move { c.exec(r).await }
    });
    let (mut tx, rx) = futures::channel::mpsc::channel(1);
    futures::SinkExt::send(
        &mut tx,
        pb::ExecStreamInput { input: Some(pb::exec_stream_input::Input::Start(parked(&dir))) },
    )
    .await
    .unwrap();
    let mut stream = client.exec_stream(rx).await.expect("second slot").into_inner();
    eventually("both commands to start", || read_pids(&dir.join("pids")).len() == 2).await;
    let status = client.exec(shell("true")).await.expect_err("over the cap of 2");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().starts_with("2 commands are already running"), "{}", status.message());
    std::fs::write(dir.join("go"), b"").unwrap();
    first.await.unwrap().expect("first exec");
    while stream.next().await.is_some() {}
    drop(tx);
    let mut freed = false;
    for _ in 0..100 {
        if client.exec(shell("true")).await.is_ok() {
            freed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(freed, "slots were not given back");
}

#[tokio::test]
async fn the_transfer_cap_refuses_the_next_read_until_one_ends() {
    let agent = Agent::start_with(&["--max-concurrent-transfers", "2"]);
    let big = agent.dir.path().join("big");
    std::fs::write(&big, vec![7u8; 8 << 20]).unwrap();
    let mut client = agent.client().await;
    let read = || pb::ReadFileRequest { path: big.display().to_string(), ..Default::default() };
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut stream = client.read_file(read()).await.expect("under the cap").into_inner();
        stream.message().await.unwrap().expect("a first chunk");
        open.push(stream);
    }
    let status = client.read_file(read()).await.expect_err("over the cap of 2");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("--max-concurrent-transfers"), "{}", status.message());
    drop(open);
    let mut freed = false;
    for _ in 0..100 {
        if let Ok(resp) = client.read_file(read()).await {
            let mut stream = resp.into_inner();
            while stream.message().await.unwrap().is_some() {}
            freed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(freed, "transfer slots were not given back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_copies_succeed_or_get_resource_exhausted() {
    let agent = Agent::start();
    let client = agent.client().await;
    let data = std::sync::Arc::new(vec![0x5au8; 8 << 20]);
    let mut calls = Vec::new();
    for i in 0..50 {
        let (mut client, data) = (client.clone(), data.clone());
        let path = agent.dir.path().join(format!("copy-{i}")).display().to_string();
        calls.push(tokio::spawn(async move {
            let header = pb::WriteFileHeader { path: path.clone(), ..Default::default() };
            let mut msgs = vec![pb::WriteFileRequest { part: Some(Part::Header(header)) }];
            msgs.extend(
                data.chunks(1 << 20)
                    .map(|c| pb::WriteFileRequest { part: Some(Part::Data(c.to_vec().into())) }),
            );
            msgs.push(pb::WriteFileRequest { part: Some(Part::End(true)) });
            client.write_file(futures::stream::iter(msgs)).await.map(|_| path)
        }));
    }
    let mut ok = 0;
    for call in calls {
        match call.await.unwrap() {
            Ok(path) => {
                assert_eq!(std::fs::metadata(&path).unwrap().len(), 8 << 20);
                ok += 1;
            }
            Err(status) => assert_eq!(status.code(), Code::ResourceExhausted, "{}", status.message()),
        }
    }
    assert!(ok >= 1, "no copy succeeded");
}

#[tokio::test]
async fn ten_thousand_calls_leave_fds_and_memory_at_baseline() {
    let agent = Agent::start();
    let mut client = agent.client().await;
    let file = agent.dir.path().join("f");
    let path = file.display().to_string();
    let kind = |n| n % 4;
    let one = |client: &mut atoll_proto::agent::v1::agent_client::AgentClient<tonic::transport::Channel>,
               i: usize| {
        let mut client = client.clone();
        let path = path.clone();
        async move {
            match kind(i) {
                0 => {
                    client.exec(shell("echo x")).await.unwrap();
                }
                1 => {
                    let header = pb::WriteFileHeader { path, ..Default::default() };
                    let msgs = vec![
                        pb::WriteFileRequest { part: Some(Part::Header(header)) },
                        pb::WriteFileRequest { part: Some(Part::Data(format!("call {i}").into())) },
                        pb::WriteFileRequest { part: Some(Part::End(true)) },
                    ];
                    client.write_file(futures::stream::iter(msgs)).await.unwrap();
                }
                2 => {
                    let mut s = client
                        .read_file(pb::ReadFileRequest { path, ..Default::default() })
                        .await
                        .unwrap()
                        .into_inner();
                    while s.message().await.unwrap().is_some() {}
                }
                _ => {
                    let dir = std::path::Path::new(&path).parent().unwrap().display().to_string();
                    client.list_dir(pb::ListDirRequest { path: dir, ..Default::default() }).await.unwrap();
                }
            }
        }
    };
    // Warm up (thread pools, allocator arenas), then take the baseline.
    for i in 0..400 {
        one(&mut client, i).await;
    }
    let (fds0, rss0) = (fd_count(agent.pid()), rss_kib(agent.pid()));
    for i in 0..10_000 {
        one(&mut client, i).await;
    }
    // Descriptors of finished calls are closed asynchronously; give them a moment.
    eventually("the fd count to return to its baseline", || fd_count(agent.pid()) <= fds0 + 2).await;
    let rss = rss_kib(agent.pid());
    eprintln!("after 10 000 calls: fds {fds0} -> {}, RSS {rss0} KiB -> {rss} KiB", fd_count(agent.pid()));
    assert!(rss < rss0 + 32 * 1024, "RSS grew from {rss0} KiB to {rss} KiB over 10 000 calls");
}

#[tokio::test]
async fn memory_a_large_copy_used_goes_back_to_the_kernel_once_the_agent_is_idle() {
    let agent = Agent::start();
    let mut client = agent.client().await;
    let path = agent.dir.path().join("big").display().to_string();
    client.list_dir(pb::ListDirRequest { path: "/".into(), ..Default::default() }).await.unwrap();
    let rss0 = rss_kib(agent.pid());
    // 64 MiB each way, 1 MiB at a time: the agent's allocator keeps freed chunks for reuse
    // while the transfer runs.
    let header = pb::WriteFileHeader { path: path.clone(), ..Default::default() };
    let mut msgs = vec![pb::WriteFileRequest { part: Some(Part::Header(header)) }];
    msgs.extend((0..64u8).map(|i| pb::WriteFileRequest { part: Some(Part::Data(vec![i; 1 << 20].into())) }));
    msgs.push(pb::WriteFileRequest { part: Some(Part::End(true)) });
    client.write_file(futures::stream::iter(msgs)).await.unwrap();
    let mut chunks =
        client.read_file(pb::ReadFileRequest { path, ..Default::default() }).await.unwrap().into_inner();
    let mut read = 0;
    while let Some(chunk) = chunks.message().await.unwrap() {
        read += chunk.data.len();
    }
    assert_eq!(read, 64 << 20);
    let peak = rss_kib(agent.pid());
    eprintln!("RSS before {rss0} KiB, right after the copies {peak} KiB");
    // Back within 2 MiB of where it started soon after the last call ended (the agent
    // trims one to two seconds after it; left to itself the allocator would hold on to it
    // until something else happens to run, about 10 s).
    let what = format!("the agent's RSS to fall back within 2 MiB of {rss0} KiB in 7 s");
    eventually_within(Duration::from_secs(7), &what, || rss_kib(agent.pid()) < rss0 + 2048).await;
}
