//! The desktop's browser from the host: `atoll browser open` and the MCP `browser_open`.
//!
//! The page opens in the guest's Chromium, on the desktop's screen, as the desktop's
//! user. Chromium runs as a background job of the agent: when it does not run, it is
//! started (with its DevTools endpoint on the guest's 127.0.0.1:[`CDP_PORT`]); then
//! `chromium --new-window URL` hands the URL to the running one and exits. Chromium's DevTools only
//! listens on the guest's loopback, which a published port (it connects to the guest's
//! network address) cannot reach, so a small forwarder (python3, also a job) listens on
//! [`CDP_FORWARD_PORT`] of every guest address and relays to it:
//! `atoll port publish NAME 9223` gives the host a CDP endpoint (docs/desktop.md).

use std::time::Duration;

use serde::Serialize;

use super::{Desktop, DesktopError};
use crate::client::{Client, ExecSpec};

/// Chromium's DevTools port, on the guest's loopback only.
pub const CDP_PORT: u16 = 9222;
/// The forwarder's port, on the guest's network addresses: publish this one.
pub const CDP_FORWARD_PORT: u16 = 9223;
/// The longest URL accepted.
const MAX_URL: usize = 8192;

/// Relays each connection on 0.0.0.0:9223 to 127.0.0.1:9222; exits at once (status 0)
/// when the port is taken, i.e. when a forwarder already runs.
const FORWARDER: &str = r#"
import socket, sys, threading
def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
def serve(c):
    try:
        u = socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=10)
    except OSError:
        c.close()
        return
    u.settimeout(None)
    threading.Thread(target=pipe, args=(c, u), daemon=True).start()
    pipe(u, c)
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    l.bind(("0.0.0.0", int(sys.argv[1])))
except OSError:
    sys.exit(0)
l.listen(16)
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// What `open_url` did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Opened {
    /// The URL opened.
    pub url: String,
    /// The agent's job id of the `chromium --new-window URL` started for this call (it
    /// hands the URL to the running browser and exits).
    pub job: String,
    /// Chromium's DevTools port on the guest's loopback.
    pub cdp_port: u16,
    /// The guest port that relays to it: publish it (`atoll port publish NAME 9223`) for a
    /// CDP endpoint on the host.
    pub cdp_forward_port: u16,
}

/// Checks that `url` is an http(s) URL that can be handed to a browser as one argument.
pub fn check_url(url: &str) -> Result<(), DesktopError> {
    let bad = |why: &str| Err(DesktopError::BadRequest(format!("cannot open {url:?}: {why}")));
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    let rest = if lower.starts_with("https://") {
        &url[8..]
    } else if lower.starts_with("http://") {
        &url[7..]
    } else {
        return bad("only http:// and https:// URLs are opened (not file:, javascript:, data: or others)");
    };
    if url.len() > MAX_URL {
        return bad(&format!("the URL is longer than {MAX_URL} bytes"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("a URL has no spaces or control characters (percent-encode them)");
    }
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.rsplit('@').next().unwrap_or("").is_empty() {
        return bad("the URL has no host");
    }
    Ok(())
}

impl Desktop {
    /// Opens `url` in the desktop's Chromium, starting it (and the DevTools forwarder)
    /// if needed. Returns once the job started; the page loads on its own.
    pub async fn open_url(&self, url: &str) -> Result<Opened, DesktopError> {
        check_url(url)?;
        let addr = crate::sandbox::agent_address(&self.record);
        let client = Client::connect(&addr, Duration::from_secs(10)).await.map_err(|e| agent(&e))?;
        let mut forward = ExecSpec::argv([
            "python3".to_string(),
            "-c".into(),
            FORWARDER.into(),
            CDP_FORWARD_PORT.to_string(),
            CDP_PORT.to_string(),
        ]);
        forward.user = Some("user".into());
        client.start_job(&forward).await.map_err(|e| agent(&e))?;
        let running = client
            .exec(&ExecSpec::argv(["pgrep", "-u", "user", "-x", "chromium"]))
            .await
            .map_err(|e| agent(&e))?;
        if running.status.code != Some(0) {
            start_chromium(&client).await?;
        }
        let job = client.start_job(&chromium(&["--new-window", url])).await.map_err(|e| agent(&e))?;
        Ok(Opened {
            url: url.to_string(),
            job: job.id,
            cdp_port: CDP_PORT,
            cdp_forward_port: CDP_FORWARD_PORT,
        })
    }
}

/// `chromium ARGS` as the desktop's user on its display, with its DevTools on [`CDP_PORT`].
fn chromium(args: &[&str]) -> ExecSpec {
    let mut argv: Vec<String> = [
        "chromium",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--password-store=basic",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    argv.push(format!("--remote-debugging-port={CDP_PORT}"));
    argv.extend(args.iter().map(ToString::to_string));
    let mut spec = ExecSpec::argv(argv);
    spec.user = Some("user".into());
    spec.cwd = Some("/home/user".into());
    for (k, v) in [("DISPLAY", ":0"), ("HOME", "/home/user"), ("USER", "user")] {
        spec.env.insert(k.into(), v.into());
    }
    spec
}

/// Starts Chromium on an empty page and waits until it can be handed a URL. Chromium's
/// first start in the guest restarts its network service some seconds after its
/// DevTools listen (seen on Debian's 150 under TCG: "Network service crashed or was
/// terminated, restarting service"), and a page asked for before that never loads; so
/// this waits for that restart, or 30 s after the DevTools listen, whichever is first.
async fn start_chromium(client: &Client) -> Result<(), DesktopError> {
    let job = client.start_job(&chromium(&["about:blank"])).await.map_err(|e| agent(&e))?;
    let log = &job.stderr.log_path;
    let pid = job.pid;
    let wait = format!(
        "i=0; d=0; while [ $i -lt 900 ]; do \
           grep -q 'Network service crashed' '{log}' && exit 0; \
           if grep -q 'DevTools listening' '{log}'; then d=$((d+1)); [ $d -ge 150 ] && exit 0; fi; \
           kill -0 {pid} 2>/dev/null || {{ tail -n 20 '{log}'; exit 3; }}; \
           sleep 0.2; i=$((i+1)); done; tail -n 20 '{log}'; exit 2"
    );
    let mut spec = ExecSpec::shell(wait);
    spec.timeout = Some(Duration::from_secs(240));
    let out = client.exec(&spec).await.map_err(|e| agent(&e))?;
    match out.status.code {
        Some(0) => Ok(()),
        code => Err(DesktopError::Agent {
            what: "starting the browser",
            why: format!(
                "chromium {} (its log, {log}): {}",
                if code == Some(3) { "exited" } else { "did not open its DevTools in 180 s" },
                String::from_utf8_lossy(&out.stdout.data).trim()
            ),
        }),
    }
}

fn agent(e: &impl std::fmt::Display) -> DesktopError {
    DesktopError::Agent { what: "starting the browser", why: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::check_url;

    #[test]
    fn only_http_urls_with_a_host_are_opened() {
        for ok in ["http://127.0.0.1:8000/", "https://example.test/a?b=c#d", "HTTP://x", "http://u@h/"] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        for (bad, words) in [
            ("file:///etc/passwd", "only http:// and https://"),
            ("javascript:alert(1)", "only http:// and https://"),
            ("--user-data-dir=/tmp", "only http:// and https://"),
            ("ftp://x/", "only http:// and https://"),
            ("http://", "no host"),
            ("http:///path", "no host"),
            ("http://a b/", "no spaces"),
            ("http://a/\n", "no spaces"),
        ] {
            let e = check_url(bad).unwrap_err().to_string();
            assert!(e.contains(words), "{bad}: {e}");
        }
        assert!(
            check_url(&format!("http://h/{}", "a".repeat(9000))).unwrap_err().to_string().contains("longer")
        );
    }
}
