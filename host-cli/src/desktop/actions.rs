//! Anthropic's computer-use actions (`key`, `type`, `mouse_move`, `left_click`, ...,
//! `cursor_position`) on a [`Desktop`], with coordinates in the space of a screenshot
//! scaled to `scale` pixels wide, mapped back to the screen. The MCP tool
//! `computer_action` is this; `atoll input` calls the [`Desktop`] methods directly.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::input::{Button, Wheel};
use super::{Desktop, DesktopError, Size};

/// Longest `wait`.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// The action names, for messages and the schema.
pub const ACTIONS: &[&str] = &[
    "key",
    "type",
    "mouse_move",
    "left_click",
    "right_click",
    "middle_click",
    "double_click",
    "triple_click",
    "left_click_drag",
    "left_mouse_down",
    "left_mouse_up",
    "scroll",
    "hold_key",
    "wait",
    "cursor_position",
    "screenshot",
];

/// One action, as Anthropic's computer-use tool words it.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
pub struct Action {
    /// One of: key, type, mouse_move, left_click, right_click, middle_click,
    /// double_click, triple_click, left_click_drag, left_mouse_down, left_mouse_up,
    /// scroll, hold_key, wait, cursor_position, screenshot.
    pub action: String,
    /// [x, y] in the screenshot's (scaled) pixels: where to move, click or scroll, or
    /// where a drag ends.
    #[serde(default)]
    pub coordinate: Option<[i64; 2]>,
    /// [x, y] where a left_click_drag starts.
    #[serde(default)]
    pub start_coordinate: Option<[i64; 2]>,
    /// The text to type, or the keys for key / hold_key in xdotool names (`ctrl+l`,
    /// `Return`, several separated by spaces).
    #[serde(default)]
    pub text: Option<String>,
    /// up or down.
    #[serde(default)]
    pub scroll_direction: Option<String>,
    /// Wheel clicks (default 3).
    #[serde(default)]
    pub scroll_amount: Option<u32>,
    /// Seconds, for hold_key and wait.
    #[serde(default)]
    pub duration: Option<f64>,
    /// The width of the screenshot the coordinates refer to (as given to
    /// computer_screenshot); default: the screen's own width.
    #[serde(default)]
    pub scale: Option<u32>,
}

/// What an action answers besides success.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct Outcome {
    /// The action done.
    pub action: String,
    /// cursor_position: where the pointer is, in the same scaled pixels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coordinate: Option<[u32; 2]>,
    /// The screen's size.
    pub screen: Option<Size>,
}

/// Maps screenshot pixels to screen pixels and back.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    screen: Size,
    width: u32,
}

impl Scale {
    /// For screenshots `width` pixels wide of `screen` (`None`: unscaled).
    pub fn new(screen: Size, width: Option<u32>) -> Result<Scale, DesktopError> {
        let width = width.unwrap_or(screen.width);
        if !(super::screen::MIN_SCALE_WIDTH..=screen.width).contains(&width) {
            return Err(DesktopError::BadRequest(format!(
                "scale {width} is out of range; give {} to the screen's width, {}",
                super::screen::MIN_SCALE_WIDTH,
                screen.width
            )));
        }
        Ok(Scale { screen, width })
    }

    /// A screenshot point as a screen point (not checked against the screen).
    pub fn to_screen(self, p: [i64; 2]) -> (i64, i64) {
        let (sw, w) = (i64::from(self.screen.width), i64::from(self.width));
        // Round to the nearest screen pixel; negative stays negative (refused later).
        let map = |v: i64| if v < 0 { v } else { (v * sw + w / 2) / w };
        (map(p[0]), map(p[1]))
    }

    /// A screen point as a screenshot point.
    pub fn from_screen(self, (x, y): (u32, u32)) -> [u32; 2] {
        let (sw, w) = (u64::from(self.screen.width), u64::from(self.width));
        // At most the screen point itself (w <= sw), so it fits.
        let map = |v: u32| u32::try_from((u64::from(v) * w + sw / 2) / sw).unwrap_or(u32::MAX);
        [map(x), map(y)]
    }
}

fn need<T>(v: Option<T>, what: &str, action: &str) -> Result<T, DesktopError> {
    v.ok_or_else(|| DesktopError::BadRequest(format!("action `{action}` needs `{what}`")))
}

fn seconds(v: Option<f64>, action: &str, max: Duration) -> Result<Duration, DesktopError> {
    let s = need(v, "duration", action)?;
    if !s.is_finite() || s < 0.0 || s > max.as_secs_f64() {
        return Err(DesktopError::BadRequest(format!(
            "`duration` for `{action}` is seconds from 0 to {}, not {s}",
            max.as_secs()
        )));
    }
    Ok(Duration::from_secs_f64(s))
}

/// Does `a` on `desktop`.
pub async fn run(desktop: &Desktop, a: &Action) -> Result<Outcome, DesktopError> {
    let scale = Scale::new(desktop.size, a.scale)?;
    let name = a.action.as_str();
    let at = a.coordinate.map(|p| scale.to_screen(p));
    let unused = |field: &str, given: bool| {
        if given {
            Err(DesktopError::BadRequest(format!("action `{name}` takes no `{field}`")))
        } else {
            Ok(())
        }
    };
    let mut out = Outcome { action: name.into(), coordinate: None, screen: Some(desktop.size) };
    match name {
        "key" => desktop.keys(&need(a.text.clone(), "text", name)?).await?,
        "type" => desktop.type_text(&need(a.text.clone(), "text", name)?).await?,
        "mouse_move" => {
            let (x, y) = need(at, "coordinate", name)?;
            desktop.move_to(x, y).await?
        }
        "left_click" | "right_click" | "middle_click" | "double_click" | "triple_click" => {
            unused("text (modifier keys with a click: use hold_key)", a.text.is_some())?;
            let (button, count) = match name {
                "right_click" => (Button::Right, 1),
                "middle_click" => (Button::Middle, 1),
                "double_click" => (Button::Left, 2),
                "triple_click" => (Button::Left, 3),
                _ => (Button::Left, 1),
            };
            desktop.click(at, button, count).await?
        }
        "left_mouse_down" | "left_mouse_up" => {
            desktop.button(at, Button::Left, name == "left_mouse_down").await?
        }
        "left_click_drag" => {
            let from = scale.to_screen(need(a.start_coordinate, "start_coordinate", name)?);
            let to = need(at, "coordinate", name)?;
            desktop.drag(from, to).await?
        }
        "scroll" => {
            unused("text (modifier keys with a scroll: use hold_key)", a.text.is_some())?;
            let wheel = match need(a.scroll_direction.as_deref(), "scroll_direction", name)? {
                "down" => Wheel::Down,
                "up" => Wheel::Up,
                other => {
                    return Err(DesktopError::BadRequest(format!(
                        "scroll_direction `{}` is not supported; give up or down (QEMU 7.2's pointer has no horizontal wheel)",
                        other.chars().take(20).collect::<String>()
                    )));
                }
            };
            desktop.scroll(at, wheel, a.scroll_amount.unwrap_or(3)).await?
        }
        "hold_key" => {
            let hold = seconds(a.duration, name, super::input::MAX_HOLD)?;
            desktop.hold(&need(a.text.clone(), "text", name)?, hold).await?
        }
        "wait" => tokio::time::sleep(seconds(a.duration, name, MAX_WAIT)?).await,
        "cursor_position" => out.coordinate = Some(scale.from_screen(desktop.cursor().await?)),
        "screenshot" => {}
        other => {
            return Err(DesktopError::BadRequest(format!(
                "unknown action `{}`; use one of: {}",
                other.chars().take(40).collect::<String>(),
                ACTIONS.join(", ")
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_points_map_back_to_the_screen() {
        let screen = Size { width: 1280, height: 800 };
        let s = Scale::new(screen, Some(640)).unwrap();
        assert_eq!(s.to_screen([320, 200]), (640, 400));
        assert_eq!(s.to_screen([-1, 5]).0, -1, "off-screen stays off-screen");
        assert_eq!(s.from_screen((640, 400)), [320, 200]);
        assert_eq!(Scale::new(screen, None).unwrap().to_screen([7, 9]), (7, 9));
        assert!(Scale::new(screen, Some(2000)).is_err());
        assert!(Scale::new(screen, Some(10)).is_err());
    }
}
