//! Computer use through `atoll screenshot` and `atoll input` on one real `desktop`
//! sandbox (its first create boots and saves the template snapshot; a second create
//! restores it): a Tk program the test starts (tests/desktop/app.py) draws known
//! colours, which the screenshot has where the program says its canvas is; clicks,
//! right clicks, drags and the wheel reach it at the coordinates given; typed text and
//! ctrl+a / ctrl+c / ctrl+v land in its fields. Bad input (off-screen points, unknown
//! keys, characters the layout lacks, a sandbox without a screen) is refused with a
//! clear message and exit code 2 or 1, and sends nothing.

use std::time::Duration;

use atoll_tests::data_dir;
use atoll_tests::vm::{Atoll, text, wait_until};

const APP: &str = include_str!("../desktop/app.py");

/// Whether the `desktop` template is built; missing, it fails the test unless
/// ATOLL_TEST_SKIP_DESKTOP=1 asks to skip it on purpose.
fn desktop_or_skip() -> bool {
    if data_dir().join("templates/desktop/template.json").is_file() {
        return true;
    }
    let hint = "template `desktop` is not built; build it with `rootfs/setup.sh --with-desktop`";
    assert!(
        std::env::var_os("ATOLL_TEST_SKIP_DESKTOP").is_some(),
        "{hint} (or set ATOLL_TEST_SKIP_DESKTOP=1 to skip)"
    );
    eprintln!("SKIPPED (ATOLL_TEST_SKIP_DESKTOP is set): {hint}");
    false
}

/// The screenshot `atoll screenshot NAME ARGS -o -` prints, decoded: (width, height, RGB).
fn screenshot(atoll: &Atoll, name: &str, args: &[&str]) -> (u32, u32, Vec<u8>) {
    let mut all = vec!["screenshot", name, "-o", "-"];
    all.extend_from_slice(args);
    let out = atoll.run(&all);
    assert!(out.status.success(), "screenshot failed: {}", text(&out.stderr));
    let decoder = png::Decoder::new(std::io::Cursor::new(out.stdout));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a PNG frame");
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

fn pixel(shot: &(u32, u32, Vec<u8>), x: u32, y: u32) -> [u8; 3] {
    let i = ((y * shot.0 + x) * 3) as usize;
    [shot.2[i], shot.2[i + 1], shot.2[i + 2]]
}

fn input(atoll: &Atoll, name: &str, args: &[&str]) -> String {
    let mut all = vec!["input", name];
    all.extend_from_slice(args);
    let out = atoll.run(&all);
    assert!(out.status.success(), "input {args:?} failed: {}", text(&out.stderr));
    text(&out.stdout)
}

/// A guest file's text once `done` holds for it (events reach a program through X).
fn guest_file_until(atoll: &Atoll, name: &str, path: &str, done: impl Fn(&str) -> bool) -> String {
    let mut last = String::new();
    wait_until(&format!("{path} in the guest"), Duration::from_secs(30), || {
        last = atoll.sh(name, &format!("cat {path} 2>/dev/null || true"));
        done(&last)
    });
    last
}

#[test]
fn a_desktop_is_seen_and_driven_from_the_host() {
    if !desktop_or_skip() {
        return;
    }
    let atoll = Atoll::new();
    let created = atoll.create_with("desk", &["--template", "desktop", "--memory", "1024"]);
    assert_eq!(created["template"], "desktop");

    // The screen: the template's size, unscaled and scaled.
    let full = screenshot(&atoll, "desk", &[]);
    assert_eq!((full.0, full.1), (1280, 800));
    let small = screenshot(&atoll, "desk", &["--scale", "640"]);
    assert_eq!((small.0, small.1), (640, 400));

    // The test's program, started as the desktop's user.
    atoll.sh("desk", &format!("cat > /tmp/app.py <<'EOF'\n{APP}EOF\nchmod 644 /tmp/app.py"));
    let started =
        atoll.run(&["-s", "desk", "run", "-d", "--", "su", "user", "-c", "DISPLAY=:0 python3 /tmp/app.py"]);
    assert!(started.status.success(), "{}", text(&started.stderr));
    let layout = guest_file_until(&atoll, "desk", "/tmp/layout.json", |t| t.contains("canvas"));
    let layout: serde_json::Value = serde_json::from_str(&layout).unwrap();
    let at = |name: &str, dx: i64, dy: i64| {
        let g = &layout[name];
        (g[0].as_i64().unwrap() + dx, g[1].as_i64().unwrap() + dy)
    };
    let (cx, cy) = at("canvas", 0, 0);

    // Known colours where the program drew them (the pointer parked out of the way).
    input(&atoll, "desk", &["move", "1270", "790"]);
    std::thread::sleep(Duration::from_secs(1));
    let shot = screenshot(&atoll, "desk", &[]);
    assert_eq!(
        pixel(&shot, (cx + 50) as u32, (cy + 50) as u32),
        [255, 0, 0],
        "red half, canvas at {cx},{cy}"
    );
    assert_eq!(pixel(&shot, (cx + 150) as u32, (cy + 50) as u32), [0, 0, 255], "blue half");
    assert_ne!(pixel(&shot, (cx + 50) as u32, (cy + 150) as u32), [255, 0, 0], "below the canvas is not red");

    // The pointer goes where it is sent.
    input(&atoll, "desk", &["move", "321", "123"]);
    assert_eq!(input(&atoll, "desk", &["cursor"]).trim(), "321 123");

    // A click on the button.
    let (bx, by) = at("button", 20, 10);
    input(&atoll, "desk", &["click", &bx.to_string(), &by.to_string()]);
    assert_eq!(guest_file_until(&atoll, "desk", "/tmp/clicks", |t| !t.is_empty()), "click\n");

    // A right click, a drag and the wheel on the canvas, at the coordinates given.
    let (rx, ry) = at("canvas", 30, 40);
    input(&atoll, "desk", &["click", &rx.to_string(), &ry.to_string(), "--button", "right"]);
    let (x1, y1, x2, y2) = (cx + 10, cy + 10, cx + 190, cy + 90);
    input(&atoll, "desk", &["drag", &x1.to_string(), &y1.to_string(), &x2.to_string(), &y2.to_string()]);
    input(&atoll, "desk", &["scroll", &rx.to_string(), &ry.to_string(), "--down", "2"]);
    let events = guest_file_until(&atoll, "desk", "/tmp/events", |t| t.matches("down").count() >= 2);
    let expected =
        format!("right {rx} {ry}\npress {x1} {y1}\nrelease {x2} {y2}\ndown {rx} {ry}\ndown {rx} {ry}\n");
    assert_eq!(events, expected);

    // Typing and key combinations: type into the first field, select it all, copy, paste
    // into the second, Return saves both.
    let (e1x, e1y) = at("e1", 10, 5);
    let (e2x, e2y) = at("e2", 10, 5);
    input(&atoll, "desk", &["click", &e1x.to_string(), &e1y.to_string()]);
    input(&atoll, "desk", &["type", "Hello, World! ~{42}"]);
    input(&atoll, "desk", &["key", "ctrl+a ctrl+c"]);
    input(&atoll, "desk", &["click", &e2x.to_string(), &e2y.to_string()]);
    input(&atoll, "desk", &["key", "ctrl+v"]);
    input(&atoll, "desk", &["key", "Return"]);
    let entries = guest_file_until(&atoll, "desk", "/tmp/entries", |t| !t.is_empty());
    assert_eq!(entries, "Hello, World! ~{42}|Hello, World! ~{42}");

    // Bad input: clear words, exit code 2, nothing sent (the field keeps its text).
    for (args, words) in [
        (vec!["click", "1280", "5"], "off the screen, which is 1280x800"),
        (vec!["move", "-1", "5"], "off the screen"),
        (vec!["key", "ctrl+nope"], "unknown key `nope`"),
        (vec!["type", "naïve"], "cannot type 'ï'"),
        (vec!["hold", "shift", "--for", "60000"], "at most 30 s"),
        (vec!["scroll", "5", "5", "--down", "0"], "1 to 100"),
    ] {
        let mut all = vec!["input", "desk"];
        all.extend_from_slice(&args);
        let out = atoll.run(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains(words), "{args:?}: {}", text(&out.stderr));
    }
    let e = atoll.fails(&["screenshot", "desk", "--scale", "5000", "-o", "-"]);
    assert!(e.contains("scale width 5000 is out of range"), "{e}");
    assert_eq!(atoll.sh("desk", "cat /tmp/entries"), "Hello, World! ~{42}|Hello, World! ~{42}");

    // A sandbox without a screen is refused, and so is a screen on a template without one.
    atoll.create("plain");
    for args in [vec!["screenshot", "plain", "-o", "-"], vec!["input", "plain", "click", "1", "1"]] {
        let e = atoll.fails(&args);
        assert!(e.contains("sandbox `plain` has no screen") && e.contains("--template desktop"), "{e}");
    }
    let e = atoll.fails(&["create", "--name", "x", "--display", "800x600"]);
    assert!(e.contains("--display 800x600 needs a template with a screen"), "{e}");
    let e = atoll.fails(&["create", "--name", "x", "--template", "desktop", "--display", "10x10"]);
    assert!(e.contains("out of range; give 640x480 to 2560x1600"), "{e}");

    // The second desktop restores the template snapshot the first saved, desktop and all.
    let second = atoll.create_with("desk2", &["--template", "desktop", "--memory", "1024"]);
    assert_eq!(second["started_from"], "template snapshot", "{second}");
    input(&atoll, "desk2", &["move", "10", "20"]);
    assert_eq!(input(&atoll, "desk2", &["cursor"]).trim(), "10 20");
    let shot = screenshot(&atoll, "desk2", &[]);
    assert_eq!(pixel(&shot, 640, 400), [0x2e, 0x34, 0x40], "the desktop's background");
}
