//! `atoll screenshot`, `atoll input`, `atoll desktop` and `atoll browser`: thin callers of [`crate::desktop`]. A request
//! the desktop refuses before sending anything (off-screen point, unknown key, text
//! the layout cannot type) exits 2, as a usage error.

use std::time::Duration;

use anyhow::Result;
use serde_json::json;

use super::error::UsageError;
use super::{Ctx, print};
use crate::cli::{BrowserCommand, InputAction, InputArgs, ScreenshotArgs, ViewArgs};
use crate::desktop::input::Wheel;
use crate::desktop::{Desktop, DesktopError};

/// A refusal about the request itself becomes a usage error (exit 2).
fn usage(e: DesktopError) -> anyhow::Error {
    match e {
        DesktopError::OffScreen { .. } | DesktopError::Key(_) | DesktopError::BadRequest(_) => {
            UsageError(e.to_string()).into()
        }
        other => other.into(),
    }
}

/// `atoll screenshot`.
pub(crate) async fn screenshot(ctx: &Ctx, args: ScreenshotArgs) -> Result<u8> {
    let Some(name) = args.name.or_else(|| ctx.global.sandbox.clone()) else {
        return Err(UsageError("name the sandbox: `atoll screenshot NAME`".into()).into());
    };
    let desktop = Desktop::open(&name).await.map_err(usage)?;
    let shot = desktop.with_x(desktop.screenshot(args.scale)).await.map_err(usage)?;
    crate::desktop::screen::save(&shot, &args.output)
        .map_err(|e| anyhow::anyhow!("could not write {}: {e}", args.output.display()))?;
    if args.output.as_os_str() == "-" {
        return Ok(0);
    }
    let text = format!(
        "{} ({}, screen {}, {} bytes)",
        args.output.display(),
        shot.image,
        shot.screen,
        shot.png.len()
    );
    let value = json!({ "path": args.output, "bytes": shot.png.len(), "image": shot.image, "screen": shot.screen, "scale": shot.scale });
    print(ctx, &value, &text)
}

/// `atoll input`.
pub(crate) async fn input(ctx: &Ctx, args: InputArgs) -> Result<u8> {
    let d = Desktop::open(&args.name).await.map_err(usage)?;
    let done = d
        .with_x(async {
            match args.action {
                InputAction::Click { x, y, button, double } => d
                    .click(Some((x, y)), button, if double { 2 } else { 1 })
                    .await
                    .map(|()| json!({ "clicked": [x, y] })),
                InputAction::Move { x, y } => d.move_to(x, y).await.map(|()| json!({ "moved": [x, y] })),
                InputAction::Drag { x1, y1, x2, y2 } => {
                    d.drag((x1, y1), (x2, y2)).await.map(|()| json!({ "dragged": [[x1, y1], [x2, y2]] }))
                }
                InputAction::Scroll { x, y, down, up } => {
                    let (wheel, n) = match (down, up) {
                        (Some(n), _) => (Wheel::Down, n),
                        (None, Some(n)) => (Wheel::Up, n),
                        (None, None) => {
                            return Err(DesktopError::BadRequest("give --down N or --up N".into()));
                        }
                    };
                    d.scroll(Some((x, y)), wheel, n).await.map(|()| json!({ "scrolled": n }))
                }
                InputAction::Type { text } => {
                    d.type_text(&text).await.map(|()| json!({ "typed": text.chars().count() }))
                }
                InputAction::Key { keys } => d.keys(&keys).await.map(|()| json!({ "pressed": keys })),
                InputAction::Hold { key, for_ms } => d
                    .hold(&key, Duration::from_millis(for_ms))
                    .await
                    .map(|()| json!({ "held": key, "ms": for_ms })),
                InputAction::Cursor => d.cursor().await.map(|(x, y)| json!({ "x": x, "y": y })),
            }
        })
        .await
        .map_err(usage)?;
    let text = match (done.get("x"), done.get("y")) {
        (Some(x), Some(y)) => format!("{x} {y}"),
        _ => String::new(),
    };
    if text.is_empty() && !ctx.out.json {
        return Ok(0);
    }
    print(ctx, &done, &text)
}

/// `atoll desktop`: prints the view's URL, then serves it until the sandbox ends or
/// this process is stopped.
pub(crate) async fn view(ctx: &Ctx, args: ViewArgs) -> Result<u8> {
    let Some(name) = args.name.or_else(|| ctx.global.sandbox.clone()) else {
        return Err(UsageError("name the sandbox: `atoll desktop NAME`".into()).into());
    };
    let desktop = Desktop::open(&name).await.map_err(usage)?;
    let (view, serve) = desktop.view(args.view_only).await.map_err(usage)?;
    let value = json!({ "url": view.url, "view_only": args.view_only });
    print(ctx, &value, &view.url)?;
    if !ctx.out.json {
        eprintln!("atoll: serving the view of `{}` until it ends; Ctrl-C stops it", desktop.record.name);
    }
    serve.await;
    Ok(0)
}

/// `atoll browser open`: prints the URL opened once the browser's job started.
pub(crate) async fn browser(ctx: &Ctx, cmd: BrowserCommand) -> Result<u8> {
    let BrowserCommand::Open { name, url } = cmd;
    // A URL the browser will not be given is refused before the sandbox is touched.
    crate::desktop::browser::check_url(&url).map_err(usage)?;
    let desktop = Desktop::open(&name).await.map_err(usage)?;
    let opened = desktop.open_url(&url).await.map_err(usage)?;
    let value = serde_json::to_value(&opened)?;
    print(ctx, &value, &opened.url)
}
