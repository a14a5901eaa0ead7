//! Making a guest restored from a snapshot a machine of its own: the host's clock, its
//! own hostname and randomness of its own. The VM generation id changed with the
//! restore, so Linux has reseeded its generator already (`vmgenid`); host randomness is
//! mixed in on top.
//!
//! One Restored call does it all, without a process in the guest, and it is the first
//! call the restored agent gets: its answer carries the agent's version, so no Info is
//! needed. An agent older than that call (in a snapshot saved with one) answers
//! UNIMPLEMENTED; it is asked for its Info instead, and [`by_hand`] then does the same
//! with SetTime and an exec.

use std::time::Duration;

use bytes::Bytes;

use crate::client::{Client, ClientError, ExecSpec};
use crate::vmm::now_unix_ms;

/// How many bytes of host randomness a restored guest gets.
const ENTROPY_BYTES: usize = 64;
/// How long the exec of [`by_hand`] may take.
const BY_HAND_LIMIT: Duration = Duration::from_secs(10);

/// What the first call to a restored guest's agent found.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Greeted {
    /// The agent's version.
    pub version: String,
    /// False when the agent is older than Restored: [`by_hand`] is still to be done.
    pub made_own: bool,
}

/// The first call to the agent of a guest restored from a snapshot: Restored, which
/// makes it the machine `name`; an agent without that call is asked for its Info.
pub(super) async fn greet(client: &Client, name: &str) -> Result<Greeted, ClientError> {
    match client.restored(now_unix_ms(), name, host_random()).await {
        Ok(r) => Ok(Greeted { version: r.agent_version, made_own: true }),
        Err(ClientError::Unsupported { .. }) => {
            tracing::debug!("the agent predates Restored: SetTime and an exec make `{name}` its own");
            let info = client.info().await?;
            Ok(Greeted { version: info.agent_version, made_own: false })
        }
        Err(e) => Err(e),
    }
}

/// What Restored does, with calls every agent has: SetTime, then an exec that writes the
/// hostname and mixes host randomness into the kernel's pool. A hostname the guest
/// refuses is only logged, as it always was.
pub(super) async fn by_hand(client: &Client, name: &str) -> Result<(), ClientError> {
    client.set_time(now_unix_ms()).await?;
    let script = "echo \"$0\" > /proc/sys/kernel/hostname && cat > /dev/urandom";
    let mut spec = ExecSpec::argv(["sh", "-c", script, name]);
    spec.stdin = host_random();
    spec.timeout = Some(BY_HAND_LIMIT);
    let result = client.exec(&spec).await?;
    if !result.status.success() {
        tracing::warn!(
            "setting the hostname of `{name}` failed: {}",
            String::from_utf8_lossy(&result.stderr.data).trim()
        );
    }
    Ok(())
}

/// [`ENTROPY_BYTES`] from the host's generator (zeros, which mix in harmlessly, if it
/// cannot be read).
fn host_random() -> Bytes {
    use std::io::Read;
    let mut buf = vec![0u8; ENTROPY_BYTES];
    if let Err(e) = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)) {
        tracing::warn!("cannot read the host's /dev/urandom ({e}); the guest keeps only its own reseed");
    }
    Bytes::from(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::fake::{Call, FakeAgent};

    #[tokio::test]
    async fn a_current_agent_is_made_its_own_by_one_call() {
        let agent = FakeAgent::start(true).await;
        let client = agent.client().await;
        let before = now_unix_ms();
        let greeted = greet(&client, "f1").await.unwrap();
        assert_eq!(greeted, Greeted { version: "fake-1".into(), made_own: true });
        let calls = agent.calls();
        let [Call::Restored(req)] = calls.as_slice() else { panic!("one Restored call, got {calls:?}") };
        assert_eq!(req.hostname, "f1");
        assert_eq!(req.entropy.len(), ENTROPY_BYTES);
        assert!((before..=now_unix_ms()).contains(&req.unix_ms), "the host's clock at the call");
    }

    #[tokio::test]
    async fn an_older_agent_gets_set_time_and_an_exec() {
        let agent = FakeAgent::start(false).await;
        let client = agent.client().await;
        let greeted = greet(&client, "f2").await.unwrap();
        assert_eq!(greeted, Greeted { version: "fake-1".into(), made_own: false });
        by_hand(&client, "f2").await.unwrap();
        let calls = agent.calls();
        let [Call::Restored(_), Call::Info, Call::SetTime(ms), Call::Exec(exec)] = calls.as_slice() else {
            panic!("Restored (refused), Info, SetTime, Exec; got {calls:?}")
        };
        assert!(*ms > 0);
        let argv = &exec.command.as_ref().unwrap().argv;
        assert_eq!(argv[..2], ["sh", "-c"]);
        assert!(argv[2].contains("/proc/sys/kernel/hostname") && argv[2].contains("/dev/urandom"));
        assert_eq!(argv[3], "f2", "the hostname is the script's $0, never spliced into it");
        assert_eq!(exec.stdin.len(), ENTROPY_BYTES);
    }

    #[tokio::test]
    async fn an_agent_refusing_restored_is_an_error_not_a_fallback() {
        let agent = FakeAgent::start(true).await;
        let client = agent.client().await;
        let e = greet(&client, "bad/name").await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
        assert!(e.to_string().contains("hostname"), "{e}");
        assert_eq!(agent.calls().len(), 1, "nothing else was tried");
    }
}
