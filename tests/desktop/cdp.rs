//! A small Chrome DevTools Protocol client for the desktop tests: Debian's headless
//! Chromium on the host, driven over its DevTools WebSocket (tungstenite) as an
//! automation client would (Playwright and Puppeteer speak the same protocol). It
//! loads a page, waits on the page's own state (no virtual time: the page's network
//! runs in real time), clicks with real input events and takes screenshots. It also
//! attaches to a browser someone else runs, by its DevTools HTTP endpoint, as
//! Playwright's `connect_over_cdp` does (the guest's Chromium through a published port).

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

/// One headless Chromium with one page, ended on drop; or a page of a browser someone
/// else runs ([`Browser::attach`]), left running.
pub(crate) struct Browser {
    child: Option<Child>,
    _profile: Option<tempfile::TempDir>,
    ws: WebSocket<TcpStream>,
    next: u64,
    session: Option<String>,
}

impl Browser {
    /// Starts Chromium with a window of `width`x`height` and attaches to its page.
    pub(crate) fn launch(width: u32, height: u32) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Debian's chromium on the host (apt-get install chromium)");
        // Chromium writes the port it chose and its browser endpoint to DevToolsActivePort.
        let file: PathBuf = profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(120);
        let (port, path) = loop {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let mut lines = text.lines();
            if let (Some(Ok(port)), Some(path)) = (lines.next().map(str::parse::<u16>), lines.next()) {
                break (port, path.to_string());
            }
            assert!(Instant::now() < deadline, "chromium did not open its DevTools port");
            std::thread::sleep(Duration::from_millis(200));
        };
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let url = format!("ws://127.0.0.1:{port}{path}");
        let (ws, _) = tungstenite::client(url.as_str(), stream).expect("the DevTools WebSocket");
        let mut browser = Browser { child: Some(child), _profile: Some(profile), ws, next: 0, session: None };
        // A page of our own, attached in flat mode: its commands carry its session id.
        let target = browser.call("Target.createTarget", json!({ "url": "about:blank" }));
        let attached =
            browser.call("Target.attachToTarget", json!({ "targetId": target["targetId"], "flatten": true }));
        browser.session = Some(attached["sessionId"].as_str().unwrap().to_string());
        browser.call("Page.enable", json!({}));
        browser
    }

    /// Attaches to the page whose URL starts with `url_prefix` in the browser whose
    /// DevTools HTTP endpoint is `addr` (host:port): `GET /json/version` names its browser
    /// WebSocket, as for Playwright's `connect_over_cdp`.
    pub(crate) fn attach(addr: &str, url_prefix: &str) -> Result<Browser, String> {
        use std::io::{Read, Write};
        let mut s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(s, "GET /json/version HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        // Chromium keeps the connection open: read the head, then Content-Length bytes.
        let mut resp = Vec::new();
        let mut byte = [0u8; 1];
        while !resp.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut byte).map_err(|e| format!("read /json/version: {e}"))?;
            resp.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&resp).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or(format!("/json/version without a Content-Length: {head:?}"))?;
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).map_err(|e| format!("read /json/version: {e}"))?;
        let body = String::from_utf8_lossy(&body);
        let version: Value =
            serde_json::from_str(&body).map_err(|e| format!("/json/version {body:?}: {e}"))?;
        let ws_url =
            version["webSocketDebuggerUrl"].as_str().ok_or(format!("no webSocketDebuggerUrl: {version}"))?;
        let stream = TcpStream::connect(addr).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let (ws, _) =
            tungstenite::client(ws_url, stream).map_err(|e| format!("the DevTools WebSocket: {e}"))?;
        let mut browser = Browser { child: None, _profile: None, ws, next: 0, session: None };
        let targets = browser.call("Target.getTargets", json!({}));
        let page = targets["targetInfos"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page" && t["url"].as_str().is_some_and(|u| u.starts_with(url_prefix)))
            .ok_or(format!("no page at {url_prefix}: {targets}"))?
            .clone();
        let attached =
            browser.call("Target.attachToTarget", json!({ "targetId": page["targetId"], "flatten": true }));
        browser.session = Some(attached["sessionId"].as_str().unwrap().to_string());
        Ok(browser)
    }

    /// Sends one command and returns its result (events in between are skipped).
    pub(crate) fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = &self.session {
            msg["sessionId"] = json!(session);
        }
        let msg = msg.to_string();
        self.ws.send(Message::text(msg)).expect("send to chromium");
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            assert!(Instant::now() < deadline, "chromium did not answer {method} in 90 s");
            let msg = self.ws.read().expect("read from chromium");
            let Message::Text(text) = msg else { continue };
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Opens `url` in the page; Chromium's error (such as
    /// `net::ERR_HTTP_RESPONSE_CODE_FAILURE` for a 404) if it did not load.
    pub(crate) fn goto(&mut self, url: &str) -> Result<(), String> {
        let r = self.call("Page.navigate", json!({ "url": url }));
        match r["errorText"].as_str() {
            Some(e) => Err(e.to_string()),
            None => Ok(()),
        }
    }

    /// The value of a JavaScript expression in the page.
    pub(crate) fn eval(&mut self, expr: &str) -> Value {
        let r = self.call("Runtime.evaluate", json!({ "expression": expr, "returnByValue": true }));
        r["result"]["value"].clone()
    }

    /// Polls `expr` until it is `true`; false if `limit` passes first.
    pub(crate) fn wait_for(&mut self, expr: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.eval(expr) == json!(true) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// A left click at (x, y) of the page's viewport, as real mouse events.
    pub(crate) fn click(&mut self, x: f64, y: f64) {
        let mouse = |kind: &str, buttons: u32| json!({ "type": kind, "x": x, "y": y, "button": "left", "buttons": buttons, "clickCount": 1 });
        self.call("Input.dispatchMouseEvent", json!({ "type": "mouseMoved", "x": x, "y": y }));
        self.call("Input.dispatchMouseEvent", mouse("mousePressed", 1));
        std::thread::sleep(Duration::from_millis(100));
        self.call("Input.dispatchMouseEvent", mouse("mouseReleased", 0));
    }

    /// A PNG of the page as it is on screen.
    pub(crate) fn screenshot(&mut self) -> Vec<u8> {
        let r = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        base64::engine::general_purpose::STANDARD.decode(r["data"].as_str().unwrap()).unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
