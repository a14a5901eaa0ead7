//! Screenshots: QMP `screendump` writes the display's framebuffer as a PPM into the
//! sandbox directory (QEMU sees that directory at the same path inside its jail); it
//! is read, scaled down when asked (an area average) and encoded as PNG.

use std::path::Path;

use serde::Serialize;

use super::size::Size;
use super::{Desktop, DesktopError};

/// Narrowest scaled screenshot.
pub const MIN_SCALE_WIDTH: u32 = 64;
/// Largest decoded framebuffer accepted (16384 x 16384 pixels); QEMU's own are far smaller.
const MAX_PIXELS: u64 = 1 << 28;

/// One screenshot.
#[derive(Debug, Clone, Serialize)]
pub struct Screenshot {
    /// The PNG.
    #[serde(skip)]
    pub png: Vec<u8>,
    /// The screen's size.
    pub screen: Size,
    /// The image's size (the screen's, unless scaled).
    pub image: Size,
    /// image width / screen width: a point (x, y) in the image is (x / scale, y / scale)
    /// on the screen.
    pub scale: f64,
}

/// An RGB image, 3 bytes a pixel, rows top to bottom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rgb {
    /// Its size.
    pub size: Size,
    /// The pixels.
    pub data: Vec<u8>,
}

impl Desktop {
    /// The screen now, as a PNG `width` pixels wide (`None`: the screen's width).
    pub async fn screenshot(&self, width: Option<u32>) -> Result<Screenshot, DesktopError> {
        let raw = self.framebuffer().await?;
        let screen = raw.size;
        let image = match width {
            None => raw,
            Some(w) if w == screen.width => raw,
            Some(w) if !(MIN_SCALE_WIDTH..=screen.width).contains(&w) => {
                return Err(DesktopError::BadRequest(format!(
                    "scale width {w} is out of range; give {MIN_SCALE_WIDTH} to the screen's width, {}",
                    screen.width
                )));
            }
            Some(w) => scale(&raw, w),
        };
        let png = encode_png(&image)?;
        let scale = f64::from(image.size.width) / f64::from(screen.width);
        Ok(Screenshot { png, screen, image: image.size, scale })
    }

    /// The framebuffer as QEMU's `screendump` gives it.
    pub async fn framebuffer(&self) -> Result<Rgb, DesktopError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let file = self.dir.join(format!(
            ".screen-{}-{}.ppm",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let mut qmp = self.qmp().await?;
        let arguments = serde_json::json!({ "filename": file.display().to_string() });
        let done = qmp.execute_with("screendump", arguments).await;
        // QEMU's directory is QEMU's to write: the file is opened without following a
        // link, and read only as far as the largest screen's PPM (a file grown without
        // end, or a FIFO, cannot take the host's memory).
        let bytes = crate::vmm::safe_fs::open_read(&file).and_then(|f| {
            use std::io::Read;
            let mut bytes = Vec::new();
            f.take(MAX_PPM_BYTES).read_to_end(&mut bytes).map(|_| bytes)
        });
        let _ = std::fs::remove_file(&file);
        done?;
        let bytes = bytes.map_err(|e| DesktopError::Screendump { why: e.to_string() })?;
        parse_ppm(&bytes).map_err(|why| DesktopError::Screendump { why })
    }
}

/// The largest PPM a screen atoll makes can give (3 bytes a pixel, and a header).
const MAX_PPM_BYTES: u64 = super::size::MAX.width as u64 * super::size::MAX.height as u64 * 3 + 64;

/// A binary PPM (`P6`, maxval 255), as QEMU writes it.
pub fn parse_ppm(bytes: &[u8]) -> Result<Rgb, String> {
    let mut fields = Vec::with_capacity(4);
    let mut i = 0;
    while fields.len() < 4 {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if start == i || i - start > 8 {
            return Err("not a PPM image (its header is cut short or malformed)".into());
        }
        fields.push(std::str::from_utf8(&bytes[start..i]).unwrap_or(""));
    }
    // One whitespace byte ends the header.
    i += 1;
    if fields[0] != "P6" || fields[3] != "255" {
        return Err(format!("not an 8-bit binary PPM (magic {}, maxval {})", fields[0], fields[3]));
    }
    let num = |s: &str| s.parse::<u32>().map_err(|_| format!("bad PPM size field `{s}`"));
    let size = Size { width: num(fields[1])?, height: num(fields[2])? };
    let pixels = u64::from(size.width) * u64::from(size.height);
    if pixels == 0 || pixels > MAX_PIXELS {
        return Err(format!("a {size} screen is not plausible"));
    }
    let len = usize::try_from(pixels * 3).map_err(|_| format!("a {size} screen is not plausible"))?;
    let data = bytes.get(i..i + len).ok_or("the PPM image is shorter than its header says")?;
    Ok(Rgb { size, data: data.to_vec() })
}

/// `img` scaled to `width` (and the height that keeps its aspect), each target pixel the
/// average of the source pixels it covers.
pub fn scale(img: &Rgb, width: u32) -> Rgb {
    // Sizes are at most 16384 (parse_ppm), so every product below fits.
    let usz = |v: u32| usize::try_from(v).unwrap_or(usize::MAX);
    let (sw, sh) = (usz(img.size.width), usz(img.size.height));
    let w = usz(width);
    let h = ((sh * w + sw / 2) / sw).max(1);
    let mut data = vec![0u8; w * h * 3];
    for ty in 0..h {
        let (y0, y1) = (ty * sh / h, ((ty + 1) * sh / h).max(ty * sh / h + 1));
        for tx in 0..w {
            let (x0, x1) = (tx * sw / w, ((tx + 1) * sw / w).max(tx * sw / w + 1));
            let mut sum = [0u64; 3];
            for y in y0..y1 {
                let row = &img.data[(y * sw + x0) * 3..(y * sw + x1) * 3];
                for px in row.chunks_exact(3) {
                    for c in 0..3 {
                        sum[c] += u64::from(px[c]);
                    }
                }
            }
            let n = u64::try_from((y1 - y0) * (x1 - x0)).unwrap_or(u64::MAX);
            let out = &mut data[(ty * w + tx) * 3..(ty * w + tx) * 3 + 3];
            for c in 0..3 {
                // An average of bytes is a byte.
                out[c] = u8::try_from((sum[c] + n / 2) / n).unwrap_or(u8::MAX);
            }
        }
    }
    let u32z = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    Rgb { size: Size { width: u32z(w), height: u32z(h) }, data }
}

/// `img` as a PNG.
pub fn encode_png(img: &Rgb) -> Result<Vec<u8>, DesktopError> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, img.size.width, img.size.height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Fast);
    let fail = |e: png::EncodingError| DesktopError::Screendump { why: format!("PNG encoding failed: {e}") };
    let mut w = enc.write_header().map_err(fail)?;
    w.write_image_data(&img.data).map_err(fail)?;
    w.finish().map_err(fail)?;
    Ok(out)
}

/// Writes `shot` to `path` (or stdout for `-`).
pub fn save(shot: &Screenshot, path: &Path) -> std::io::Result<()> {
    if path == Path::new("-") {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        out.write_all(&shot.png)?;
        return out.flush();
    }
    std::fs::write(path, &shot.png)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ppm_is_parsed_scaled_and_encoded() {
        let mut ppm = b"P6\n4 2\n255\n".to_vec();
        // Left half red, right half blue.
        for _ in 0..2 {
            ppm.extend([255, 0, 0, 255, 0, 0, 0, 0, 255, 0, 0, 255]);
        }
        let img = parse_ppm(&ppm).unwrap();
        assert_eq!(img.size, Size { width: 4, height: 2 });
        let half = scale(&img, 2);
        assert_eq!(half.size, Size { width: 2, height: 1 });
        assert_eq!(half.data, [255, 0, 0, 0, 0, 255]);
        let png = encode_png(&half).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
        for bad in
            [&b"P5\n4 2\n255\n"[..], b"P6\n4 2\n65535\n", b"P6\n4", b"P6\n0 2\n255\n", b"P6\n4 2\n255\n\0"]
        {
            assert!(parse_ppm(bad).is_err(), "{bad:?}");
        }
    }
}
