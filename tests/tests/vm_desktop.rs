//! Computer use through `atoll screenshot` and `atoll input` on one real `desktop`
//! sandbox (its first create boots and saves the template snapshot; a second create
//! restores it): a Tk program the test starts (tests/desktop/app.py) draws known
//! colours, which the screenshot has where the program says its canvas is; clicks,
//! right clicks, drags and the wheel reach it at the coordinates given; typed text and
//! ctrl+a / ctrl+c / ctrl+v land in its fields. Bad input (off-screen points, unknown
//! keys, characters the layout lacks, a sandbox without a screen) is refused with a
//! clear message and exit code 2 or 1, and sends nothing. The live view is loaded in
//! headless Chromium driven over the DevTools protocol (tests/desktop/cdp.rs): it shows
//! the desktop, a click in it reaches the program, and a view-only view refuses input
//! even when its page is told to send it. `atoll browser open` shows a page served in
//! the guest in the guest's Chromium; its DevTools, relayed by the guest's forwarder to a
//! published port, reads the page's title from the host and changes the page.

use std::time::Duration;

use atoll_tests::data_dir;
use atoll_tests::netns::World;
use atoll_tests::vm::{Atoll, text, wait_until};

#[path = "../desktop/cdp.rs"]
mod cdp;

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

fn pixel(shot: &(u32, u32, Vec<u8>), x: i64, y: i64) -> [u8; 3] {
    let i = usize::try_from((y * i64::from(shot.0) + x) * 3).unwrap();
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
    wait_until(&format!("{path} in the guest"), Duration::from_secs(120), || {
        last = atoll.sh(name, &format!("cat {path} 2>/dev/null || true"));
        done(&last)
    });
    last
}

/// A live view started with `atoll desktop NAME ARGS`: the process and its URL.
fn start_view(atoll: &Atoll, name: &str, args: &[&str]) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut all = vec!["desktop", name];
    all.extend_from_slice(args);
    let mut child = atoll.command(&all).spawn().expect("spawn atoll desktop");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("http://127.0.0.1:"), "atoll desktop printed {line:?}");
    (child, line.trim().to_string())
}

/// (host:port, token) of a view URL.
fn view_parts(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").unwrap();
    let (addr, path) = rest.split_once('/').unwrap();
    (addr.to_string(), path.split('/').next().unwrap().to_string())
}

/// The status code of `GET path` on `addr`.
fn http_status(addr: &str, path: &str) -> u16 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut head = String::new();
    s.read_to_string(&mut head).unwrap();
    head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// noVNC's status line in the page.
const STATUS: &str = "document.getElementById('status') && document.getElementById('status').textContent";

/// Waits until noVNC's page in `browser` says it is connected to the sandbox whose id is
/// `id`, and checks it still is a few seconds later (a bridge that closes right after the
/// handshake shows "Connected" only for a moment); returns the canvas's place in the page
/// (left, top, width, height).
fn novnc_connected(browser: &mut cdp::Browser, id: &str) -> [f64; 4] {
    let want = format!("Connected to QEMU (atoll-{id})");
    let connected = browser.wait_for(&format!("{STATUS} === {want:?}"), Duration::from_secs(120));
    assert!(connected, "noVNC did not connect: its status is {}", browser.eval(STATUS));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(browser.eval(STATUS), want, "noVNC connected, then lost the connection");
    let rect = browser.eval(
        "(() => { const r = document.querySelector('canvas').getBoundingClientRect(); \
         return [r.left, r.top, r.width, r.height]; })()",
    );
    let rect: Vec<f64> = rect.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    rect.try_into().unwrap()
}

/// A PNG's pixel at page point (x, y) (whole CSS pixels: the browser's scale is 1).
fn png_pixel(png_bytes: &[u8], x: f64, y: f64) -> [u8; 3] {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a small positive whole number"
    )]
    let (x, y) = (x.round() as u32, y.round() as u32);
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let i = (y as usize * info.width as usize + x as usize) * channels;
    [buf[i], buf[i + 1], buf[i + 2]]
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
    assert_eq!(pixel(&shot, cx + 50, cy + 50), [255, 0, 0], "red half, canvas at {cx},{cy}");
    assert_eq!(pixel(&shot, cx + 150, cy + 50), [0, 0, 255], "blue half");
    assert_ne!(pixel(&shot, cx + 50, cy + 150), [255, 0, 0], "below the canvas is not red");

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
    std::thread::sleep(Duration::from_secs(1));
    input(&atoll, "desk", &["type", "Hello, World! ~{42}"]);
    input(&atoll, "desk", &["key", "ctrl+a ctrl+c"]);
    input(&atoll, "desk", &["click", &e2x.to_string(), &e2y.to_string()]);
    // The mouse and the keyboard are two devices: X reads each on its own, so a key
    // right after a click can overtake it on a loaded guest (docs/desktop.md).
    std::thread::sleep(Duration::from_secs(1));
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

    // The live view: its page and WebSocket answer only under the view's token.
    let (mut view, url) = start_view(&atoll, "desk", &[]);
    let (addr, token) = view_parts(&url);
    let wrong: String = token.chars().rev().collect();
    assert_eq!(http_status(&addr, &format!("/{token}/vnc_lite.html")), 200);
    assert_eq!(http_status(&addr, &format!("/{wrong}/vnc_lite.html")), 404);
    assert_eq!(http_status(&addr, &format!("/{wrong}/websockify")), 404);
    assert_eq!(http_status(&addr, "/vnc_lite.html"), 404);
    assert_eq!(http_status(&addr, &format!("/{token}/../../../etc/passwd")), 404);
    let lite = url.replace("/vnc.html?", "/vnc_lite.html?");
    // noVNC in Debian's headless Chromium, driven over the DevTools protocol in real
    // time: connected through the bridge to this sandbox's QEMU (its name), the canvas
    // the screen's size, and the page's screenshot shows the desktop once the first
    // framebuffer update has arrived: its background and the test program's red.
    let id = created["id"].as_str().unwrap();
    let mut browser = cdp::Browser::launch(1300, 880);
    browser.goto(&lite).unwrap();
    let [left, top, width, height] = novnc_connected(&mut browser, id);
    assert_eq!((width, height), (1280.0, 800.0));
    let background = [0x2e, 0x34, 0x40];
    let (px, py) = (left + 1000.0, top + 600.0);
    wait_until("the view's screenshot to show the desktop", Duration::from_secs(60), || {
        png_pixel(&browser.screenshot(), px, py) == background
    });
    let shot = browser.screenshot();
    let (rx, ry) = at("canvas", 50, 50);
    assert_eq!(
        png_pixel(&shot, left + rx as f64, top + ry as f64),
        [255, 0, 0],
        "the program's red in the view"
    );
    let (bx, by) = at("canvas", 150, 50);
    assert_eq!(
        png_pixel(&shot, left + bx as f64, top + by as f64),
        [0, 0, 255],
        "the program's blue in the view"
    );
    // Taking over: a click in the page reaches the program's button in the guest.
    let (bx, by) = at("button", 20, 10);
    browser.click(left + bx as f64, top + by as f64);
    let clicks = guest_file_until(&atoll, "desk", "/tmp/clicks", |t| t.lines().count() >= 2);
    assert_eq!(clicks, "click\nclick\n", "the view's click");
    // A wrong token: the page is refused, and nothing connects.
    let refused = browser.goto(&lite.replace(&token, &wrong));
    assert_eq!(refused, Err("net::ERR_HTTP_RESPONSE_CODE_FAILURE".into()), "the page with a wrong token");
    assert!(
        !browser.wait_for("document.body.textContent.includes('Connected')", Duration::from_secs(5)),
        "a wrong token connected"
    );

    // A second, view-only view has a token of its own and tells noVNC to only watch.
    let (mut watch, watch_url) = start_view(&atoll, "desk", &["--view-only"]);
    let (waddr, wtoken) = view_parts(&watch_url);
    assert!(watch_url.ends_with("&view_only=1") && wtoken != token, "{watch_url}");
    assert_eq!(http_status(&waddr, &format!("/{token}/vnc_lite.html")), 404, "another view's token");
    assert_eq!(http_status(&waddr, &format!("/{wtoken}/vnc_lite.html")), 200);
    // As printed, it connects and stays connected (noVNC answers QEMU's clipboard
    // capabilities with an Extended Clipboard message, which the filter passes over) and
    // shows the desktop.
    let watch_lite = watch_url.replace("/vnc.html?", "/vnc_lite.html?");
    browser.goto(&watch_lite).unwrap();
    let [wleft, wtop, ..] = novnc_connected(&mut browser, id);
    wait_until("the view-only view's screenshot to show the desktop", Duration::from_secs(60), || {
        png_pixel(&browser.screenshot(), wleft + 1000.0, wtop + 600.0) == background
    });
    // Whoever holds the view-only URL and drops `view_only=1` from it gets a noVNC that
    // sends input: the bridge drops it, so the same click has no effect in the guest, and
    // the pointer stays where it was.
    browser.goto(&watch_lite.replace("&view_only=1", "")).unwrap();
    let [wleft, wtop, ..] = novnc_connected(&mut browser, id);
    let before = input(&atoll, "desk", &["cursor"]);
    browser.click(wleft + bx as f64, wtop + by as f64);
    browser.click(wleft + 5.0, wtop + 5.0);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(atoll.sh("desk", "cat /tmp/clicks"), "click\nclick\n", "a view-only view clicked");
    assert_eq!(input(&atoll, "desk", &["cursor"]), before, "a view-only view moved the pointer");
    assert_eq!(
        browser.eval(STATUS),
        format!("Connected to QEMU (atoll-{id})"),
        "the filter dropped the clicks without closing the view"
    );
    browser.goto("about:blank").unwrap();

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

    // The desktop's browser (`atoll browser open`): a page served in the guest on
    // 127.0.0.1 opens in the guest's Chromium, on the screen, and is driven over CDP from
    // the host.
    browser_opens_a_page_and_is_driven_over_cdp(&atoll, "desk");

    // `atoll browser open` refuses what is not http(s), and a sandbox without a screen.
    for (name, url, code, words) in [
        ("desk", "file:///etc/passwd", 2, "only http:// and https://"),
        ("desk", "javascript:alert(1)", 2, "only http:// and https://"),
        ("desk", "http://a b/", 2, "no spaces"),
        ("plain", "http://127.0.0.1:8000/", 1, "sandbox `plain` has no screen"),
    ] {
        let out = atoll.run(&["browser", "open", name, url]);
        assert_eq!(out.status.code(), Some(code), "{url}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains(words), "{url}: {}", text(&out.stderr));
    }

    // The second desktop restores the template snapshot the first saved, desktop and all.
    let second = atoll.create_with("desk2", &["--template", "desktop", "--memory", "1024"]);
    assert_eq!(second["started_from"], "template snapshot", "{second}");
    input(&atoll, "desk2", &["move", "10", "20"]);
    assert_eq!(input(&atoll, "desk2", &["cursor"]).trim(), "10 20");
    let shot = screenshot(&atoll, "desk2", &[]);
    assert_eq!(pixel(&shot, 640, 400), [0x2e, 0x34, 0x40], "the desktop's background");

    // Its X server killed: QEMU still takes input and shows a screen, but screenshots and
    // input say the desktop is gone instead of answering as if all were well; a request
    // refused on its own (off the screen) still says why.
    atoll.sh(
        "desk2",
        "pkill -9 -x Xorg; i=0; while pgrep -x Xorg >/dev/null && [ $i -lt 100 ]; do i=$((i+1)); sleep 0.1; done",
    );
    let gone_shot = atoll.state_dir().join("gone.png");
    for args in [
        vec!["screenshot", "desk2", "-o", gone_shot.to_str().unwrap()],
        vec!["input", "desk2", "click", "10", "10"],
        vec!["input", "desk2", "type", "hello"],
    ] {
        let out = atoll.run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(
            err.contains("X server is not running in `desk2`") && err.contains("create it again"),
            "{args:?}: {err}"
        );
    }
    assert!(!gone_shot.exists(), "a screenshot of a desktop without X was written");
    let out = atoll.run(&["input", "desk2", "click", "5000", "5"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("off the screen"), "{}", text(&out.stderr));

    // The views end with their sandbox: the page connected to one says so.
    browser.goto(&lite).unwrap();
    novnc_connected(&mut browser, id);
    atoll.json(&["kill", "desk"]);
    assert!(
        browser.wait_for(&format!("{STATUS} !== 'Connected to QEMU (atoll-{id})'"), Duration::from_secs(30)),
        "noVNC still connected after its sandbox was killed"
    );
    assert_eq!(browser.eval(STATUS), "Disconnected", "noVNC's status once its sandbox was killed");
    drop(browser);
    for child in [&mut view, &mut watch] {
        wait_until("the view to end with its sandbox", Duration::from_secs(20), || {
            child.try_wait().unwrap().is_some()
        });
    }
    assert!(std::net::TcpStream::connect(&addr).is_err(), "the view still listens on {addr}");
}

/// The desktop's browser loads a page from outside the sandbox: a server in the test's
/// network namespace world, reached through the sandbox's network helper like any guest
/// traffic, and the page is on the screen.
#[test]
fn vm_desktop_browser_loads_a_page_from_the_world() {
    let world = World::create();
    let atoll = Atoll::in_netns(world.client.name());
    // A fresh state directory has no template snapshot: a cold desktop boot.
    atoll.create_with("web", &["--template", "desktop", "--memory", "1024"]);
    let magenta = |shot: &(u32, u32, Vec<u8>)| shot.2.chunks_exact(3).filter(|p| *p == [255, 0, 255]).count();
    assert!(magenta(&screenshot(&atoll, "web", &[])) < 1000, "magenta before the page opened");
    let opened = atoll.json(&["browser", "open", "web", "http://allowed.test/page"]);
    assert_eq!(opened["url"], "http://allowed.test/page", "{opened}");
    // Chromium's first start under TCG takes a while.
    wait_until("the world's page on the screen", Duration::from_secs(300), || {
        magenta(&screenshot(&atoll, "web", &[])) > 200_000
    });
    // The request went out through the helper, which logged it.
    let log = text(&atoll.run(&["net", "log", "web"]).stdout);
    assert!(log.contains("allowed.test"), "the helper's audit log lacks the page's host: {log}");
    // An automation client on the host (in the world's client namespace, where this
    // atoll publishes its ports) reads the world page's title over CDP, through the
    // published DevTools forwarder, as Playwright's connect_over_cdp does.
    let published = atoll.json(&["port", "publish", "web", "9223"]);
    let addr = published["url"].as_str().unwrap().trim_start_matches("http://").to_string();
    let title = world
        .client
        .spawn_in(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(120);
            let mut page = loop {
                match cdp::Browser::attach(&addr, "http://allowed.test/page") {
                    Ok(page) => break page,
                    Err(e) if std::time::Instant::now() > deadline => {
                        panic!("the browser's DevTools at {addr}: {e}")
                    }
                    Err(_) => std::thread::sleep(Duration::from_secs(1)),
                }
            };
            page.eval("document.title")
        })
        .join()
        .expect("the CDP client's thread");
    assert_eq!(title, "world page");
}

/// The guest's page: all green, titled.
const PAGE: &str = "<html><head><title>atoll browser page</title></head>\
                    <body style='margin:0;background:#00ff00;height:100vh'></body></html>";

/// How many pixels of `shot` are pure green.
fn green_pixels(shot: &(u32, u32, Vec<u8>)) -> usize {
    shot.2.chunks_exact(3).filter(|p| *p == [0, 255, 0]).count()
}

/// `atoll browser open` on a page served in the guest, seen in the screenshot; then its
/// DevTools endpoint through the guest's forwarder and a published port, from the host.
fn browser_opens_a_page_and_is_driven_over_cdp(atoll: &Atoll, name: &str) {
    atoll.sh(name, &format!("mkdir -p /tmp/site && cat > /tmp/site/index.html <<'EOF'\n{PAGE}\nEOF"));
    let served = atoll.run(&[
        "-s",
        name,
        "run",
        "-d",
        "--",
        "python3",
        "-m",
        "http.server",
        "8000",
        "--bind",
        "127.0.0.1",
        "--directory",
        "/tmp/site",
    ]);
    assert!(served.status.success(), "{}", text(&served.stderr));
    let before = green_pixels(&screenshot(atoll, name, &[]));
    let opened = atoll.json(&["browser", "open", name, "http://127.0.0.1:8000/"]);
    assert_eq!(opened["url"], "http://127.0.0.1:8000/", "{opened}");
    assert_eq!(opened["cdp_forward_port"], 9223, "{opened}");
    // Chromium's first start under TCG takes a while.
    let mut seen = 0;
    wait_until("the page's green on the screen", Duration::from_secs(300), || {
        seen = green_pixels(&screenshot(atoll, name, &[]));
        seen > 200_000
    });
    assert!(before < 1000, "green before the page opened: {before}");

    // CDP from the host: publish the forwarder's port; /json/version names the browser's
    // WebSocket (what Playwright's connect_over_cdp reads); the page's title comes back.
    let published = atoll.json(&["port", "publish", name, "9223"]);
    let addr = published["url"].as_str().unwrap().trim_start_matches("http://").to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut page = loop {
        match cdp::Browser::attach(&addr, "http://127.0.0.1:8000/") {
            Ok(page) => break page,
            Err(e) if std::time::Instant::now() > deadline => panic!("the browser's DevTools at {addr}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_secs(1)),
        }
    };
    assert_eq!(page.eval("document.title"), "atoll browser page");
    // Driven from the host: the page turns blue on the guest's screen.
    page.eval("document.body.style.background = '#0000ff'");
    wait_until("the page turned blue on the screen", Duration::from_secs(60), || {
        let shot = screenshot(atoll, name, &[]);
        shot.2.chunks_exact(3).filter(|p| *p == [0, 0, 255]).count() > 200_000
    });
    drop(page);
    atoll.sh(name, "pkill -x chromium; i=0; while pgrep -x chromium >/dev/null && [ $i -lt 300 ]; do i=$((i+1)); sleep 0.1; done");
    wait_until("the browser's window gone", Duration::from_secs(60), || {
        let shot = screenshot(atoll, name, &[]);
        shot.2.chunks_exact(3).filter(|p| *p == [0, 0, 255]).count() < 200_000
    });
}
