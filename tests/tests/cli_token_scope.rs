//! `ATOLL_AGENT_TOKEN` is meant for agents at `tcp://` addresses (an agent on a
//! non-loopback address requires it) and goes nowhere else: an agent on a Unix socket,
//! behind a VM socket (hybrid vsock) or a sandbox's agent link (a Unix socket too) is
//! one the guest may control, and it must not learn the token. A hostile "agent" here
//! records the metadata of every call it receives and answers UNIMPLEMENTED.

mod cli_util;

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Write};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use cli_util::atoll_cmd;
use futures::future::{BoxFuture, FutureExt};
use tonic::body::Body;
use tonic::codegen::http;

const TOKEN: &str = "s3cret-token-for-tcp-agents-only";

/// Every call's request headers, as the hostile agent saw them.
type Seen = Arc<Mutex<Vec<http::HeaderMap>>>;

#[derive(Clone)]
struct Recorder(Seen);

impl tonic::server::NamedService for Recorder {
    const NAME: &'static str = "atoll.agent.v1.Agent";
}

impl tower::Service<http::Request<Body>> for Recorder {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        self.0.lock().unwrap().push(req.headers().clone());
        async { Ok(tonic::Status::unimplemented("a recorder, not an agent").into_http()) }.boxed()
    }
}

/// Serves the recorder on `listener` (Unix or TCP) in the background.
fn serve<L, S>(
    rt: &tokio::runtime::Runtime,
    listener: L,
    accept: fn(&L) -> BoxFuture<'_, std::io::Result<S>>,
) -> Seen
where
    L: Send + Sync + 'static,
    S: tonic::transport::server::Connected
        + tokio::io::AsyncRead
        + tokio::io::AsyncWrite
        + Unpin
        + Send
        + 'static,
{
    let seen = Seen::default();
    let svc = Recorder(seen.clone());
    rt.spawn(async move {
        let incoming = futures::stream::unfold(listener, move |l| async move {
            let next = accept(&l).await;
            Some((next, l))
        });
        let _ = tonic::transport::Server::builder().add_service(svc).serve_with_incoming(incoming).await;
    });
    seen
}

fn unix_recorder(rt: &tokio::runtime::Runtime, path: &std::path::Path) -> Seen {
    let listener = rt.block_on(async { tokio::net::UnixListener::bind(path) }).unwrap();
    serve(rt, listener, |l| async { l.accept().await.map(|(s, _)| s) }.boxed())
}

/// Runs `atoll --agent ADDR info` with the token set; the recorder's answer makes it fail.
fn call_with_token(addr: &str) {
    let out = atoll_cmd(addr, &["--connect-timeout", "10s", "info"])
        .env("ATOLL_AGENT_TOKEN", TOKEN)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run atoll");
    assert!(!out.status.success(), "the recorder answers no call");
}

/// What the recorder was sent: calls seen, and whether any carried the token anywhere.
fn token_sent(seen: &Seen) -> (usize, bool) {
    let seen = seen.lock().unwrap();
    let leaked = seen.iter().any(|headers| {
        headers.contains_key("authorization")
            || headers.values().any(|v| String::from_utf8_lossy(v.as_bytes()).contains(TOKEN))
    });
    (seen.len(), leaked)
}

#[test]
fn the_token_is_not_sent_to_an_agent_on_a_unix_socket() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sock");
    let seen = unix_recorder(&rt, &path);
    call_with_token(&format!("unix://{}", path.display()));
    let (calls, leaked) = token_sent(&seen);
    assert!(calls > 0, "the recorder saw no call");
    assert!(!leaked, "ATOLL_AGENT_TOKEN reached an agent on a Unix socket");
}

/// A VM socket (hybrid vsock): the `CONNECT` line is answered `OK`, then the bytes go
/// to the recorder.
#[test]
fn the_token_is_not_sent_to_an_agent_behind_a_vm_socket() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (inner, front) = (dir.path().join("agent.sock"), dir.path().join("vm.vsock"));
    let seen = unix_recorder(&rt, &inner);
    let listener = std::os::unix::net::UnixListener::bind(&front).unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let inner = inner.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let mut conn = conn;
                conn.write_all(b"OK 1073741824\n").unwrap();
                let agent = std::os::unix::net::UnixStream::connect(&inner).unwrap();
                let (mut to_agent, mut from_agent) = (agent.try_clone().unwrap(), agent);
                let mut to_client = conn;
                std::thread::spawn(move || std::io::copy(&mut reader, &mut to_agent));
                let _ = std::io::copy(&mut from_agent, &mut to_client);
            });
        }
    });
    call_with_token(&format!("hvsock://{}:1024", front.display()));
    let (calls, leaked) = token_sent(&seen);
    assert!(calls > 0, "the recorder saw no call");
    assert!(!leaked, "ATOLL_AGENT_TOKEN reached an agent behind a VM socket");
}

#[test]
fn the_token_still_goes_to_a_tcp_agent() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = format!("tcp://{}", listener.local_addr().unwrap());
    let seen = serve(&rt, listener, |l| async { l.accept().await.map(|(s, _)| s) }.boxed());
    call_with_token(&addr);
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty(), "the recorder saw no call");
    for headers in seen.iter() {
        let auth = headers.get("authorization").map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        assert_eq!(auth.as_deref(), Some(format!("Bearer {TOKEN}").as_str()), "every call carries the token");
    }
}
