//! The live view: QEMU's VNC server on a Unix socket in the sandbox directory
//! (`vnc.sock`), bridged to a WebSocket on the host's loopback for noVNC (Debian's
//! `novnc` package, served from /usr/share/novnc by the same server). Every URL carries a
//! per-view token (32 random bytes, hex) as its first path segment; a request without it
//! gets 404 and touches nothing. With `view_only`, what the viewer sends is filtered
//! ([`super::rfb::ViewOnly`]): it watches but cannot type, click or paste. The view ends
//! when the sandbox's QEMU does.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use subtle::ConstantTimeEq;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Desktop, DesktopError};

/// The VNC socket's name in the sandbox's `vm/` directory (the one QEMU sees).
pub const VNC_SOCKET: &str = "vnc.sock";
/// Where Debian's `novnc` package puts the page.
pub const NOVNC_DIR: &str = "/usr/share/novnc";

/// QEMU's arguments for the VNC server of a sandbox whose `vm/` directory is `dir`.
pub fn qemu_args(dir: &Path) -> Vec<String> {
    // QEMU's option syntax: a comma in a value is written twice.
    let path = dir.join(VNC_SOCKET).display().to_string().replace(',', ",,");
    vec!["-vnc".into(), format!("unix:{path}")]
}

/// One running view.
#[derive(Debug, Clone)]
pub struct View {
    /// The URL to open (noVNC, connecting by itself).
    pub url: String,
    /// Where it listens.
    pub addr: SocketAddr,
}

#[derive(Clone)]
struct Shared {
    token: String,
    vnc: PathBuf,
    novnc: PathBuf,
    view_only: bool,
}

fn token() -> Result<String, DesktopError> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| DesktopError::View(format!("cannot read /dev/urandom for the view's token: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Desktop {
    /// Starts a view of this desktop on 127.0.0.1 (an ephemeral port); returns it and
    /// the future that serves it until the sandbox's QEMU ends.
    pub async fn view(
        &self,
        view_only: bool,
    ) -> Result<(View, impl std::future::Future<Output = ()> + Send + 'static), DesktopError> {
        let novnc = PathBuf::from(NOVNC_DIR);
        if !novnc.join("vnc.html").is_file() {
            return Err(DesktopError::View(format!(
                "the live view needs noVNC's page at {NOVNC_DIR}/vnc.html; install Debian's `novnc` package"
            )));
        }
        let vnc = self.dir.join(VNC_SOCKET);
        if crate::vmm::safe_fs::connect_unix(&vnc).await.is_err() {
            return Err(DesktopError::View(format!(
                "sandbox `{}` has no VNC server at {} (made by an atoll from before the live view?); create it again",
                self.record.name,
                vnc.display()
            )));
        }
        let shared = Shared { token: token()?, vnc, novnc: novnc.canonicalize().unwrap_or(novnc), view_only };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| DesktopError::View(format!("cannot listen on 127.0.0.1: {e}")))?;
        let addr = listener.local_addr().map_err(|e| DesktopError::View(e.to_string()))?;
        let t = &shared.token;
        let url = format!(
            "http://{addr}/{t}/vnc.html?autoconnect=1&resize=scale&reconnect=0&path={t}/websockify{}",
            if view_only { "&view_only=1" } else { "" }
        );
        let app = axum::Router::new()
            .route("/{token}/websockify", get(websocket))
            .route("/{token}/{*file}", get(file))
            .fallback(|| async { StatusCode::NOT_FOUND })
            .with_state(shared);
        let qemu = self.record.qemu;
        let serve = async move {
            let ended = async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    if !qemu.is_some_and(|q| q.is_alive()) {
                        return;
                    }
                }
            };
            if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(ended).await {
                tracing::warn!("the live view stopped: {e}");
            }
        };
        Ok((View { url, addr }, serve))
    }
}

fn token_ok(shared: &Shared, given: &str) -> bool {
    given.len() == shared.token.len() && bool::from(given.as_bytes().ct_eq(shared.token.as_bytes()))
}

/// noVNC's files, below its directory only.
async fn file(State(shared): State<Shared>, UrlPath((given, rel)): UrlPath<(String, String)>) -> Response {
    if !token_ok(&shared, &given) {
        return StatusCode::NOT_FOUND.into_response();
    }
    let plain =
        !rel.is_empty() && rel.split('/').all(|c| !c.is_empty() && !c.starts_with('.') && !c.contains('\\'));
    let path = shared.novnc.join(&rel);
    let inside = plain && path.canonicalize().is_ok_and(|p| p.starts_with(&shared.novnc) && p.is_file());
    if !inside {
        return StatusCode::NOT_FOUND.into_response();
    }
    let Ok(bytes) = tokio::fs::read(&path).await else { return StatusCode::NOT_FOUND.into_response() };
    let kind = match path.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript",
        Some("css") => "text/css",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    };
    ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "no-store")], bytes).into_response()
}

async fn websocket(
    State(shared): State<Shared>,
    UrlPath(given): UrlPath<String>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    // The token first: without it, nothing about the request is looked at.
    if !token_ok(&shared, &given) {
        return StatusCode::NOT_FOUND.into_response();
    }
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => return rejection.into_response(),
    };
    ws.protocols(["binary"]).on_upgrade(move |socket| bridge(socket, shared))
}

/// Pumps one viewer's WebSocket to a new connection to QEMU's VNC server and back.
async fn bridge(mut ws: WebSocket, shared: Shared) {
    let Ok(vnc) = crate::vmm::safe_fs::connect_unix(&shared.vnc).await else {
        let _ = ws.send(Message::Close(None)).await;
        return;
    };
    let (mut from_vnc, mut to_vnc) = vnc.into_split();
    let mut filter = shared.view_only.then(super::rfb::ViewOnly::default);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            n = from_vnc.read(&mut buf) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => if ws.send(Message::Binary(buf[..n].to_vec().into())).await.is_err() { break },
            },
            msg = ws.recv() => match msg {
                Some(Ok(Message::Binary(data))) => {
                    let pass = match filter.as_mut() {
                        Some(f) => match f.feed(&data) {
                            Ok(pass) => pass,
                            Err(e) => { tracing::warn!("live view: {e}"); break }
                        },
                        None => data.to_vec(),
                    };
                    if !pass.is_empty() && to_vnc.write_all(&pass).await.is_err() { break }
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                _ => break,
            },
        }
    }
    let _ = ws.send(Message::Close(None)).await;
}
