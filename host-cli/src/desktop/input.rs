//! Input: QMP `input-send-event` to the virtio tablet (absolute pointer: a point on the
//! screen, whatever the guest's pointer acceleration) and keyboard. Each QMP command
//! ends with one input sync, so a press and its release go in separate commands with
//! a short pause between, as a person's would: the guest sees each as its own event.
//! Every argument is checked before the first event is sent, so a refused request
//! leaves the guest as it was.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::keys::{self, Stroke};
use super::{Desktop, DesktopError};
use crate::vmm::qmp::Qmp;

/// Between two input events: long enough for a guest under software emulation to take
/// each one from the virtio queue before the next.
const STEP: Duration = Duration::from_millis(25);
/// Between the clicks of a double or triple click (well inside X's double-click time).
const CLICK_GAP: Duration = Duration::from_millis(60);
/// QEMU's absolute axis range is 0..=0x7fff.
const ABS_SPAN: u64 = 0x8000;
/// Most wheel clicks in one scroll.
pub const MAX_SCROLL: u32 = 100;
/// Longest `hold`.
pub const MAX_HOLD: Duration = Duration::from_secs(30);
/// Longest text typed in one call (characters).
pub const MAX_TEXT: usize = 4096;

/// A mouse button.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Button {
    /// The left button.
    Left,
    /// The middle button.
    Middle,
    /// The right button.
    Right,
}

impl Button {
    fn qemu(self) -> &'static str {
        match self {
            Button::Left => "left",
            Button::Middle => "middle",
            Button::Right => "right",
        }
    }
}

/// Which way the wheel turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Wheel {
    /// Content moves down (the wheel turned towards the user).
    Down,
    /// Content moves up.
    Up,
}

/// The axis value QEMU takes for pixel `p` of `len`: the middle of the pixel, so that
/// the guest's scaling back lands on it.
fn abs(p: u32, len: u32) -> u64 {
    ((2 * u64::from(p) + 1) * ABS_SPAN / (2 * u64::from(len))).min(ABS_SPAN - 1)
}

fn key_event(qcode: &str, down: bool) -> Value {
    json!({ "type": "key", "data": { "down": down, "key": { "type": "qcode", "data": qcode } } })
}

fn btn_event(button: &str, down: bool) -> Value {
    json!({ "type": "btn", "data": { "down": down, "button": button } })
}

async fn send(qmp: &mut Qmp, events: Vec<Value>) -> Result<(), DesktopError> {
    qmp.execute_with("input-send-event", json!({ "events": events })).await?;
    tokio::time::sleep(STEP).await;
    Ok(())
}

impl Desktop {
    async fn move_events(&self, qmp: &mut Qmp, x: u32, y: u32) -> Result<(), DesktopError> {
        let (w, h) = (self.size.width, self.size.height);
        send(
            qmp,
            vec![
                json!({ "type": "abs", "data": { "axis": "x", "value": abs(x, w) } }),
                json!({ "type": "abs", "data": { "axis": "y", "value": abs(y, h) } }),
            ],
        )
        .await
    }

    /// Moves the pointer to (x, y).
    pub async fn move_to(&self, x: i64, y: i64) -> Result<(), DesktopError> {
        let (x, y) = self.check_point(x, y)?;
        let mut qmp = self.qmp().await?;
        self.move_events(&mut qmp, x, y).await
    }

    /// Clicks `button` `count` times (1 to 3) at (x, y), or where the pointer is.
    pub async fn click(
        &self,
        at: Option<(i64, i64)>,
        button: Button,
        count: u32,
    ) -> Result<(), DesktopError> {
        if !(1..=3).contains(&count) {
            return Err(DesktopError::BadRequest(format!("a click is 1 to 3 presses, not {count}")));
        }
        let at = at.map(|(x, y)| self.check_point(x, y)).transpose()?;
        let mut qmp = self.qmp().await?;
        if let Some((x, y)) = at {
            self.move_events(&mut qmp, x, y).await?;
        }
        for i in 0..count {
            if i > 0 {
                tokio::time::sleep(CLICK_GAP).await;
            }
            send(&mut qmp, vec![btn_event(button.qemu(), true)]).await?;
            send(&mut qmp, vec![btn_event(button.qemu(), false)]).await?;
        }
        Ok(())
    }

    /// Presses or releases `button` where the pointer is (or at `at`).
    pub async fn button(
        &self,
        at: Option<(i64, i64)>,
        button: Button,
        down: bool,
    ) -> Result<(), DesktopError> {
        let at = at.map(|(x, y)| self.check_point(x, y)).transpose()?;
        let mut qmp = self.qmp().await?;
        if let Some((x, y)) = at {
            self.move_events(&mut qmp, x, y).await?;
        }
        send(&mut qmp, vec![btn_event(button.qemu(), down)]).await
    }

    /// Presses the left button at `from`, moves to `to` in steps, releases it there.
    pub async fn drag(&self, from: (i64, i64), to: (i64, i64)) -> Result<(), DesktopError> {
        let (x1, y1) = self.check_point(from.0, from.1)?;
        let (x2, y2) = self.check_point(to.0, to.1)?;
        let mut qmp = self.qmp().await?;
        self.move_events(&mut qmp, x1, y1).await?;
        send(&mut qmp, vec![btn_event("left", true)]).await?;
        // Intermediate points, so that programs that track motion see it move.
        const STEPS: i64 = 8;
        for i in 1..=STEPS {
            let x = i64::from(x1) + (i64::from(x2) - i64::from(x1)) * i / STEPS;
            let y = i64::from(y1) + (i64::from(y2) - i64::from(y1)) * i / STEPS;
            // Between two on-screen points, so on the screen too.
            let (x, y) = self.check_point(x, y)?;
            self.move_events(&mut qmp, x, y).await?;
        }
        send(&mut qmp, vec![btn_event("left", false)]).await
    }

    /// Turns the wheel `clicks` times at (x, y), or where the pointer is.
    pub async fn scroll(
        &self,
        at: Option<(i64, i64)>,
        wheel: Wheel,
        clicks: u32,
    ) -> Result<(), DesktopError> {
        if !(1..=MAX_SCROLL).contains(&clicks) {
            return Err(DesktopError::BadRequest(format!(
                "scroll by 1 to {MAX_SCROLL} wheel clicks, not {clicks}"
            )));
        }
        let at = at.map(|(x, y)| self.check_point(x, y)).transpose()?;
        let mut qmp = self.qmp().await?;
        if let Some((x, y)) = at {
            self.move_events(&mut qmp, x, y).await?;
        }
        let b = match wheel {
            Wheel::Down => "wheel-down",
            Wheel::Up => "wheel-up",
        };
        for _ in 0..clicks {
            send(&mut qmp, vec![btn_event(b, true)]).await?;
            send(&mut qmp, vec![btn_event(b, false)]).await?;
        }
        Ok(())
    }

    /// Presses key combinations one after another (`ctrl+a ctrl+c`, xdotool's names).
    pub async fn keys(&self, combos: &str) -> Result<(), DesktopError> {
        let combos = keys::combos(combos)?;
        let mut qmp = self.qmp().await?;
        for combo in combos {
            press(&mut qmp, &combo, Duration::ZERO).await?;
        }
        Ok(())
    }

    /// Holds a key combination down for `hold`, then lets it go.
    pub async fn hold(&self, combo: &str, hold: Duration) -> Result<(), DesktopError> {
        if hold > MAX_HOLD {
            return Err(DesktopError::BadRequest(format!(
                "hold a key for at most {} s, not {} ms",
                MAX_HOLD.as_secs(),
                hold.as_millis()
            )));
        }
        let combo = keys::combo(combo)?;
        let mut qmp = self.qmp().await?;
        press(&mut qmp, &combo, hold).await
    }

    /// Types `text` (printable ASCII, newlines and tabs, on a US layout).
    pub async fn type_text(&self, text: &str) -> Result<(), DesktopError> {
        if text.chars().count() > MAX_TEXT {
            return Err(DesktopError::BadRequest(format!(
                "type at most {MAX_TEXT} characters in one call; split the text"
            )));
        }
        let strokes = keys::text(text)?;
        let mut qmp = self.qmp().await?;
        for Stroke { qcode, shift } in strokes {
            if shift {
                send(&mut qmp, vec![key_event("shift", true)]).await?;
            }
            send(&mut qmp, vec![key_event(qcode, true)]).await?;
            send(&mut qmp, vec![key_event(qcode, false)]).await?;
            if shift {
                send(&mut qmp, vec![key_event("shift", false)]).await?;
            }
        }
        Ok(())
    }

    /// Where the guest's pointer is, as its X server says (`xdotool getmouselocation`).
    pub async fn cursor(&self) -> Result<(u32, u32), DesktopError> {
        use crate::client::{Client, ExecSpec};
        let addr = crate::sandbox::agent_address(&self.record);
        let no_x = |why: String| DesktopError::NoX { why };
        let client =
            Client::connect(&addr, Duration::from_secs(10)).await.map_err(|e| no_x(e.to_string()))?;
        let mut spec = ExecSpec::argv(["xdotool", "getmouselocation", "--shell"]);
        spec.env.insert("DISPLAY".into(), ":0".into());
        spec.timeout = Some(Duration::from_secs(10));
        let out = client.exec(&spec).await.map_err(|e| no_x(e.to_string()))?;
        let stdout = String::from_utf8_lossy(&out.stdout.data);
        let field = |name: &str| {
            stdout.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix('=')?.trim().parse::<u32>().ok())
        };
        match (out.status.code, field("X"), field("Y")) {
            (Some(0), Some(x), Some(y)) => Ok((x, y)),
            _ => Err(no_x(String::from_utf8_lossy(&out.stderr.data).trim().chars().take(300).collect())),
        }
    }
}

/// Presses `combo`'s keys in order, waits `hold`, releases them in reverse.
async fn press(qmp: &mut Qmp, combo: &[&str], hold: Duration) -> Result<(), DesktopError> {
    for k in combo {
        send(qmp, vec![key_event(k, true)]).await?;
    }
    tokio::time::sleep(hold).await;
    for k in combo.iter().rev() {
        send(qmp, vec![key_event(k, false)]).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_values_land_in_the_middle_of_each_pixel() {
        for len in [640u32, 800, 1280, 1600, 2560] {
            for p in [0, 1, len / 2, len - 2, len - 1] {
                let v = abs(p, len);
                assert!(v < ABS_SPAN);
                // How the guest scales back (libinput: value * len / span).
                assert_eq!(v * u64::from(len) / ABS_SPAN, u64::from(p), "pixel {p} of {len}");
            }
        }
    }
}
