//! ExecStream on a pseudo-terminal (`tty`), through the real agent on a Unix socket: the
//! command sees a terminal of the asked size and TERM, resizes reach it as SIGWINCH,
//! Ctrl-C (byte 3) interrupts it, its exit code and signal come back, and the unary
//! Exec refuses a terminal.

use std::time::Duration;

use atoll_proto::agent::v1 as pb;
use atoll_tests::Agent;
use futures::SinkExt;
use tonic::Code;

use pb::exec_event::Event;
use pb::exec_stream_input::Input;
use pb::exit_status::Kind;

type Keys = futures::channel::mpsc::Sender<pb::ExecStreamInput>;

fn on_terminal(shell: &str, rows: u32, cols: u32) -> pb::ExecRequest {
    pb::ExecRequest {
        command: Some(pb::Command { shell: shell.into(), ..Default::default() }),
        tty: Some(pb::Tty { term: "vt220".into(), size: Some(pb::WindowSize { rows, cols }) }),
        ..Default::default()
    }
}

async fn open(agent: &Agent, start: pb::ExecRequest) -> (Keys, tonic::Streaming<pb::ExecEvent>) {
    let (mut tx, rx) = futures::channel::mpsc::channel(4);
    tx.send(pb::ExecStreamInput { input: Some(Input::Start(start)) }).await.unwrap();
    let events = agent.client().await.exec_stream(rx).await.expect("exec_stream").into_inner();
    (tx, events)
}

/// Reads the screen until it shows `needle` (bounded: a hang fails instead of waiting).
async fn until(events: &mut tonic::Streaming<pb::ExecEvent>, screen: &mut Vec<u8>, needle: &str) {
    let found = |s: &[u8]| s.windows(needle.len()).any(|w| w == needle.as_bytes());
    while !found(screen) {
        let event = tokio::time::timeout(Duration::from_secs(30), events.message())
            .await
            .unwrap_or_else(|_| panic!("no {needle:?} on the screen: {}", String::from_utf8_lossy(screen)))
            .expect("event")
            .expect("the stream ended early");
        match event.event {
            Some(Event::Stdout(b)) => screen.extend_from_slice(&b),
            Some(Event::Started(_)) => {}
            other => panic!("unexpected {other:?} before {needle:?}: {}", String::from_utf8_lossy(screen)),
        }
    }
}

async fn exit_of(events: &mut tonic::Streaming<pb::ExecEvent>) -> pb::ExitStatus {
    while let Some(event) = events.message().await.expect("event") {
        match event.event {
            Some(Event::Exited(status)) => return status,
            Some(Event::Stderr(b)) => panic!("a terminal has no stderr stream: {b:?}"),
            _ => {}
        }
    }
    panic!("the stream ended without `exited`")
}

async fn keys(tx: &mut Keys, keys: &str) {
    tx.send(pb::ExecStreamInput { input: Some(Input::Stdin(keys.to_owned().into_bytes().into())) })
        .await
        .unwrap();
}

#[tokio::test]
async fn a_command_on_a_terminal_sees_its_size_term_and_controlling_tty() {
    let agent = Agent::start();
    let script = "stty size; echo TERM=$TERM; tty; test -t 0 && test -t 1 && test -t 2 && echo all-ttys; \
                  ps -o tty= -p $$ | grep -q pts && echo ctty; exit 5";
    let (_tx, mut events) = open(&agent, on_terminal(script, 33, 77)).await;
    let mut screen = Vec::new();
    until(&mut events, &mut screen, "ctty").await;
    let text = String::from_utf8_lossy(&screen);
    assert!(text.contains("33 77\r\n"), "{text}");
    assert!(text.contains("TERM=vt220\r\n"), "{text}");
    assert!(text.contains("/dev/pts/"), "{text}");
    assert!(text.contains("all-ttys"), "{text}");
    assert_eq!(exit_of(&mut events).await.kind, Some(Kind::Code(5)));
}

#[tokio::test]
async fn resizes_reach_the_command_and_ctrl_c_interrupts_it() {
    let agent = Agent::start();
    let script = "trap 'stty size' WINCH; echo ready; while :; do read line && echo got-$line; done";
    let (mut tx, mut events) = open(&agent, on_terminal(script, 24, 80)).await;
    let mut screen = Vec::new();
    until(&mut events, &mut screen, "ready").await;
    tx.send(pb::ExecStreamInput { input: Some(Input::Resize(pb::WindowSize { rows: 50, cols: 132 })) })
        .await
        .unwrap();
    until(&mut events, &mut screen, "50 132").await;
    // Typed keys are echoed by the terminal and read as a line.
    keys(&mut tx, "abc\r").await;
    until(&mut events, &mut screen, "got-abc").await;
    // Ctrl-C: the line discipline sends SIGINT to the foreground group.
    keys(&mut tx, "\x03").await;
    let status = exit_of(&mut events).await;
    assert_eq!(status.kind, Some(Kind::Signal(libc::SIGINT)), "{}", String::from_utf8_lossy(&screen));
}

#[tokio::test]
async fn a_terminal_needs_exec_stream() {
    let agent = Agent::start();
    let err = agent.client().await.exec(on_terminal("true", 24, 80)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("needs the streaming call"), "{}", err.message());
}
