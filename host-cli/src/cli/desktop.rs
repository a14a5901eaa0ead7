//! The arguments of computer use: `atoll screenshot`, `atoll input`, `atoll desktop`
//! and `atoll browser`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::desktop::input::Button;

/// `atoll screenshot`.
#[derive(Debug, Args)]
pub struct ScreenshotArgs {
    /// The desktop sandbox (name, id or unique id prefix); default: the global --sandbox.
    #[arg(value_name = "SANDBOX")]
    pub name: Option<String>,
    /// Where to write the PNG (`-`: stdout).
    #[arg(short = 'o', long, value_name = "FILE", default_value = "screenshot.png")]
    pub output: PathBuf,
    /// Scale the image down to this width in pixels (the height keeps the aspect).
    #[arg(long, value_name = "WIDTH")]
    pub scale: Option<u32>,
}

/// `atoll input`.
#[derive(Debug, Args)]
pub struct InputArgs {
    /// The desktop sandbox (name, id or unique id prefix).
    #[arg(value_name = "SANDBOX")]
    pub name: String,
    /// What to do.
    #[command(subcommand)]
    pub action: InputAction,
}

/// One input action; coordinates are screen pixels from the top-left corner.
#[derive(Debug, Subcommand)]
pub enum InputAction {
    /// Click at X Y.
    Click {
        /// X.
        #[arg(allow_negative_numbers = true)]
        x: i64,
        /// Y.
        #[arg(allow_negative_numbers = true)]
        y: i64,
        /// The button.
        #[arg(long, value_enum, default_value = "left")]
        button: Button,
        /// A double click.
        #[arg(long)]
        double: bool,
    },
    /// Move the pointer to X Y.
    Move {
        /// X.
        #[arg(allow_negative_numbers = true)]
        x: i64,
        /// Y.
        #[arg(allow_negative_numbers = true)]
        y: i64,
    },
    /// Drag with the left button from X1 Y1 to X2 Y2.
    Drag {
        /// Start X.
        #[arg(allow_negative_numbers = true)]
        x1: i64,
        /// Start Y.
        #[arg(allow_negative_numbers = true)]
        y1: i64,
        /// End X.
        #[arg(allow_negative_numbers = true)]
        x2: i64,
        /// End Y.
        #[arg(allow_negative_numbers = true)]
        y2: i64,
    },
    /// Turn the wheel at X Y: --down N or --up N clicks.
    Scroll {
        /// X.
        #[arg(allow_negative_numbers = true)]
        x: i64,
        /// Y.
        #[arg(allow_negative_numbers = true)]
        y: i64,
        /// Wheel clicks down (content moves up).
        #[arg(long, value_name = "N", conflicts_with = "up", required_unless_present = "up")]
        down: Option<u32>,
        /// Wheel clicks up.
        #[arg(long, value_name = "N")]
        up: Option<u32>,
    },
    /// Type TEXT (printable ASCII, newlines and tabs; US keyboard layout).
    Type {
        /// The text.
        text: String,
    },
    /// Press keys: xdotool names joined with `+` (`ctrl+l`, `Return`, `alt+F4`), several
    /// separated by spaces.
    Key {
        /// The keys.
        keys: String,
    },
    /// Hold a key (or combination) down for --for milliseconds.
    Hold {
        /// The key.
        key: String,
        /// How long, in milliseconds.
        #[arg(long = "for", value_name = "MS")]
        for_ms: u64,
    },
    /// Print where the pointer is.
    Cursor,
}

/// `atoll desktop`.
#[derive(Debug, Args)]
pub struct ViewArgs {
    /// The desktop sandbox (name, id or unique id prefix); default: the global --sandbox.
    #[arg(value_name = "SANDBOX")]
    pub name: Option<String>,
    /// Watch only: the viewer's keys, clicks and clipboard never reach the guest.
    #[arg(long)]
    pub view_only: bool,
}

/// `atoll browser`.
#[derive(Debug, Subcommand)]
pub enum BrowserCommand {
    /// Open an http(s) URL in a new window of the desktop's Chromium (started if it does
    /// not run, with its DevTools endpoint relayed to guest port 9223: publish that port
    /// with `atoll port publish SANDBOX 9223` to drive the browser from the host over CDP).
    #[command(after_help = "Examples:\n  atoll browser open desk https://example.com/\n  \
                      atoll browser open desk http://127.0.0.1:8000/")]
    Open {
        /// The desktop sandbox (name, id or unique id prefix).
        #[arg(value_name = "SANDBOX")]
        name: String,
        /// The URL (http:// or https:// only).
        url: String,
    },
}
