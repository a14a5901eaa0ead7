//! A desktop's screen size (`--display 1280x800`) and the QEMU devices that give a VM
//! a screen: a bochs-display (its EDID offers the size as the preferred mode, which the
//! guest's bochs DRM driver and Xorg's modesetting driver take), a virtio keyboard and
//! a virtio tablet (an absolute pointer, so a click lands where the host says).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The default screen of a desktop template (Anthropic's computer-use tool suggests
/// screenshots of about this size).
pub const DEFAULT: Size = Size { width: 1280, height: 800 };
/// Smallest screen accepted.
pub const MIN: Size = Size { width: 640, height: 480 };
/// Largest screen accepted: bochs-display's 16 MiB of video memory holds 2560x1600 at
/// 32 bits per pixel.
pub const MAX: Size = Size { width: 2560, height: 1600 };

/// QEMU id of the keyboard.
pub const KEYBOARD_ID: &str = "atoll-kbd";
/// QEMU id of the absolute pointer.
pub const TABLET_ID: &str = "atoll-tablet";
/// QEMU id of the display.
pub const DISPLAY_ID: &str = "atoll-display";

/// A screen size in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Size {
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

/// Why a screen size was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Not `WIDTHxHEIGHT`.
    #[error("`{0}` is not a screen size; write WIDTHxHEIGHT, such as 1280x800")]
    Syntax(String),
    /// Out of range.
    #[error("screen size {0} is out of range; give {MIN} to {MAX}")]
    Range(Size),
}

impl FromStr for Size {
    type Err = SizeError;

    fn from_str(s: &str) -> Result<Size, SizeError> {
        let syntax = || SizeError::Syntax(s.chars().take(40).collect());
        let (w, h) = s.trim().split_once(['x', 'X']).ok_or_else(syntax)?;
        let num = |t: &str| {
            if t.is_empty() || t.len() > 5 || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax());
            }
            t.parse::<u32>().map_err(|_| syntax())
        };
        let size = Size { width: num(w)?, height: num(h)? };
        if !(MIN.width..=MAX.width).contains(&size.width) || !(MIN.height..=MAX.height).contains(&size.height)
        {
            return Err(SizeError::Range(size));
        }
        Ok(size)
    }
}

/// QEMU's arguments for a VM with a screen of `size`.
pub fn qemu_args(size: Size) -> Vec<String> {
    vec![
        "-device".into(),
        format!("bochs-display,id={DISPLAY_ID},xres={},yres={}", size.width, size.height),
        "-device".into(),
        format!("virtio-keyboard-pci,id={KEYBOARD_ID}"),
        "-device".into(),
        format!("virtio-tablet-pci,id={TABLET_ID}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_out_of_range_ones_are_refused() {
        assert_eq!("1280x800".parse::<Size>(), Ok(DEFAULT));
        assert_eq!("1024X768".parse::<Size>(), Ok(Size { width: 1024, height: 768 }));
        for bad in ["", "1280", "x800", "1280x", "-1x5", "1280x800x2", "12 80x800", "99999999x1"] {
            assert!(matches!(bad.parse::<Size>(), Err(SizeError::Syntax(_))), "{bad}");
        }
        let e = "320x200".parse::<Size>().unwrap_err().to_string();
        assert!(e.contains("640x480") && e.contains("2560x1600"), "{e}");
        assert!("2561x1600".parse::<Size>().is_err());
        let args = qemu_args(DEFAULT).join(" ");
        assert!(args.contains("bochs-display,id=atoll-display,xres=1280,yres=800"), "{args}");
        assert!(args.contains("virtio-tablet-pci") && args.contains("virtio-keyboard-pci"), "{args}");
    }
}
