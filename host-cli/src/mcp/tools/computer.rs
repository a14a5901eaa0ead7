//! `computer_screenshot`, `computer_action`, `computer_stream_url` and `browser_open`: computer use of a desktop sandbox in the
//! shapes models are trained on (Anthropic's computer-use action names), one call each
//! into [`crate::desktop`]. Screenshots come back as MCP image content (PNG) with their
//! size and scale as structured content.

use base64::Engine as _;
use rmcp::handler::server::common::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::desktop::actions::{self, Action};
use crate::desktop::browser::Opened;
use crate::desktop::screen::Screenshot;
use crate::desktop::{Desktop, DesktopError};
use crate::mcp::error::ToolError;
use crate::mcp::server::AtollMcp;
use crate::sandbox::Target;

/// Arguments of `computer_screenshot`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScreenshotArgs {
    /// The desktop sandbox, by id or name. Default: the sandbox this server was started with.
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// Scale the image down to this width in pixels (64 to the screen's width; the height
    /// keeps the aspect). Pass the same scale to computer_action so that its coordinates
    /// are read in this image's pixels. Default: the screen's size.
    #[serde(default)]
    pub scale: Option<u32>,
}

/// What a screenshot is, besides its PNG.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ScreenshotOutput {
    /// The image's width in pixels.
    pub width: u32,
    /// The image's height in pixels.
    pub height: u32,
    /// The screen's width in pixels.
    pub screen_width: u32,
    /// The screen's height in pixels.
    pub screen_height: u32,
    /// image width / screen width.
    pub scale: f64,
    /// The PNG's size in bytes.
    pub png_bytes: u64,
}

/// Arguments of `computer_action`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActionArgs {
    /// The desktop sandbox, by id or name. Default: the sandbox this server was started with.
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// The action and its arguments.
    #[serde(flatten)]
    pub action: Action,
    /// Return a screenshot (at `scale`) taken after the action. Default: true for the
    /// screenshot action, else false.
    #[serde(default)]
    pub screenshot: Option<bool>,
}

/// Arguments of `computer_stream_url`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamArgs {
    /// The desktop sandbox, by id or name. Default: the sandbox this server was started with.
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// Watch only: the viewer's keys, clicks and clipboard never reach the guest.
    /// Default: false.
    #[serde(default)]
    pub view_only: bool,
}

/// A live view.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StreamOutput {
    /// The URL to open in a browser on this host (127.0.0.1; the token in it is the only
    /// key to the view).
    pub url: String,
    /// Whether the viewer only watches.
    pub view_only: bool,
}

/// Arguments of `browser_open`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BrowserOpenArgs {
    /// The desktop sandbox, by id or name. Default: the sandbox this server was started with.
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// The page to open: an http:// or https:// URL.
    pub url: String,
}

/// What `computer_action` did.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ActionOutput {
    /// The action done.
    pub action: String,
    /// cursor_position: [x, y] of the pointer, in the scaled pixels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coordinate: Option<[u32; 2]>,
    /// The screen's width in pixels.
    pub screen_width: u32,
    /// The screen's height in pixels.
    pub screen_height: u32,
    /// The screenshot's size and scale, when one was asked for (the image is content).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub screenshot: Option<ScreenshotOutput>,
}

fn describe(shot: &Screenshot) -> ScreenshotOutput {
    ScreenshotOutput {
        width: shot.image.width,
        height: shot.image.height,
        screen_width: shot.screen.width,
        screen_height: shot.screen.height,
        scale: shot.scale,
        png_bytes: shot.png.len() as u64,
    }
}

fn image(shot: &Screenshot) -> ContentBlock {
    ContentBlock::image(base64::engine::general_purpose::STANDARD.encode(&shot.png), "image/png")
}

fn result<T: Serialize>(value: &T, mut content: Vec<ContentBlock>) -> Result<CallToolResult, ToolError> {
    let json = serde_json::to_value(value).map_err(ToolError::Encode)?;
    content.push(ContentBlock::text(json.to_string()));
    let mut r = CallToolResult::success(content);
    r.structured_content = Some(json);
    Ok(r)
}

impl AtollMcp {
    async fn desktop(&self, sandbox_id: Option<&str>) -> Result<Desktop, ToolError> {
        match self.target(sandbox_id) {
            Some(Target::Sandbox(name)) => Ok(Desktop::open(&name).await?),
            _ => Err(DesktopError::BadRequest(
                "computer use needs a desktop sandbox: pass sandbox_id (sandbox_create with template \"desktop\" makes one)"
                    .into(),
            )
            .into()),
        }
    }
}

#[tool_router(router = computer_router, vis = "pub(crate)")]
impl AtollMcp {
    /// A screenshot of a desktop sandbox.
    #[tool(
        name = "computer_screenshot",
        description = "Take a screenshot of a desktop sandbox's screen (one made with sandbox_create \
            template \"desktop\"): a PNG image, with its size, the screen's size and the scale. \
            Use scale (a width in pixels) for a smaller image, and pass the same scale to \
            computer_action so that coordinates are read in the image's pixels.",
        output_schema = schema_for_output::<ScreenshotOutput>(),
        annotations(
            title = "Screenshot of a desktop sandbox",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn computer_screenshot(
        &self,
        Parameters(args): Parameters<ScreenshotArgs>,
    ) -> Result<CallToolResult, ToolError> {
        let desktop = self.desktop(args.sandbox_id.as_deref()).await?;
        let shot = desktop.with_x(desktop.screenshot(args.scale)).await?;
        result(&describe(&shot), vec![image(&shot)])
    }

    /// A live view of a desktop sandbox in a browser.
    #[tool(
        name = "computer_stream_url",
        description = "Start a live view of a desktop sandbox's screen for a person to watch (and, \
            unless view_only, use) in a browser on this host: returns a URL on 127.0.0.1 (noVNC) \
            with a token of its own. The view lasts while the sandbox runs and this MCP server \
            does; each call starts a new one.",
        output_schema = schema_for_output::<StreamOutput>(),
        annotations(
            title = "Live view of a desktop sandbox",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn computer_stream_url(
        &self,
        Parameters(args): Parameters<StreamArgs>,
    ) -> Result<CallToolResult, ToolError> {
        let desktop = self.desktop(args.sandbox_id.as_deref()).await?;
        let (view, serve) = desktop.view(args.view_only).await?;
        tokio::spawn(serve);
        result(&StreamOutput { url: view.url, view_only: args.view_only }, Vec::new())
    }

    /// Open a page in a desktop sandbox's browser.
    #[tool(
        name = "browser_open",
        description = "Open an http:// or https:// URL in a new window of a desktop sandbox's \
            Chromium (on its screen, as its user; started if it does not run). Returns once the \
            browser was started; take a screenshot to see the page. Chromium's DevTools (CDP) \
            listens on the guest's 127.0.0.1:9222, relayed on guest port 9223: publish 9223 \
            (sandbox_preview_url) to drive it from the host.",
        output_schema = schema_for_output::<Opened>(),
        annotations(
            title = "Open a page in a desktop sandbox's browser",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn browser_open(
        &self,
        Parameters(args): Parameters<BrowserOpenArgs>,
    ) -> Result<CallToolResult, ToolError> {
        crate::desktop::browser::check_url(&args.url)?;
        let desktop = self.desktop(args.sandbox_id.as_deref()).await?;
        let opened = desktop.open_url(&args.url).await?;
        result(&opened, Vec::new())
    }

    /// One mouse or keyboard action on a desktop sandbox.
    #[tool(
        name = "computer_action",
        description = "Use a desktop sandbox's mouse and keyboard, with the computer-use action \
            names: key (text: xdotool keys such as \"ctrl+l\", \"Return\", several separated by \
            spaces), type (text: printable ASCII, newlines, tabs), mouse_move, left_click, \
            right_click, middle_click, double_click, triple_click (coordinate: [x, y], optional \
            for clicks: where the pointer is), left_click_drag (start_coordinate, coordinate), \
            left_mouse_down, left_mouse_up, scroll (coordinate, scroll_direction up|down, \
            scroll_amount), hold_key (text, duration in seconds), wait (duration), \
            cursor_position, screenshot. Coordinates are pixels of a screenshot taken at \
            `scale` (the same value given to computer_screenshot; default: the screen's size) \
            and are mapped back to the screen; off-screen points, unknown keys and characters \
            the keyboard cannot type are refused before anything is sent. screenshot: true \
            returns a screenshot taken after the action.",
        output_schema = schema_for_output::<ActionOutput>(),
        annotations(
            title = "Mouse and keyboard of a desktop sandbox",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn computer_action(
        &self,
        Parameters(args): Parameters<ActionArgs>,
    ) -> Result<CallToolResult, ToolError> {
        let desktop = self.desktop(args.sandbox_id.as_deref()).await?;
        let done = desktop.with_x(actions::run(&desktop, &args.action)).await?;
        let want_shot = args.screenshot.unwrap_or(args.action.action == "screenshot");
        let shot = if want_shot { Some(desktop.screenshot(args.action.scale).await?) } else { None };
        let out = ActionOutput {
            action: done.action,
            coordinate: done.coordinate,
            screen_width: desktop.size.width,
            screen_height: desktop.size.height,
            screenshot: shot.as_ref().map(describe),
        };
        result(&out, shot.iter().map(image).collect())
    }
}
