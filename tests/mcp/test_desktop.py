"""Computer use through the official MCP SDK on one real `desktop` sandbox made with
sandbox_create: computer_screenshot returns PNG image content of the size it says
(scaled when asked); computer_action with the computer-use action names clicks the
button of a Tk program the test starts (tests/desktop/app.py), with coordinates given in
a half-size screenshot's pixels and mapped back; cursor_position answers in the same
scaled pixels; typing and keys reach a field; browser_open shows a page served in the
guest in the guest's Chromium (its green in the screenshot), and Playwright on the host
drives that browser over CDP through the published relay port; bad actions, a URL that is
not http(s) and a sandbox without a screen are tool errors that say what to do."""

from __future__ import annotations

import base64
import json
import os
import struct
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest

from conftest import REPO, call_err, call_ok, data_dir, mcp_session

pytestmark = pytest.mark.anyio

APP = (REPO / "tests" / "desktop" / "app.py").read_text()


def png_size(block) -> tuple[int, int]:
    """Width and height from a PNG image content block's IHDR."""
    assert block.type == "image" and block.mime_type == "image/png", block
    data = base64.b64decode(block.data)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def playwright_turns_blue(endpoint: str) -> str:
    """Playwright's connect_over_cdp to the guest's Chromium at `endpoint` (no browser of
    its own is downloaded or started): finds the guest's page, turns it blue, returns its
    title."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(endpoint, timeout=120_000)
        pages = [page for context in browser.contexts for page in context.pages]
        page = next(page for page in pages if page.url == "http://127.0.0.1:8000/")
        title = page.title()
        page.evaluate("document.body.style.background = '#0000ff'")
        browser.close()
        return title


def colour_pixels(block, rgb: bytes) -> int:
    """How many pixels of a PNG image content block are exactly `rgb` (decoded with the
    standard library: zlib and the PNG filters)."""
    import zlib

    data = base64.b64decode(block.data)
    width, height = struct.unpack(">II", data[16:24])
    depth, colour = data[24], data[25]
    assert (depth, colour) == (8, 2), (depth, colour)
    pos, idat = 8, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * 3
    prev = bytearray(stride)
    count = 0
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - 3] if i >= 3 else 0
            b = prev[i]
            c = prev[i - 3] if i >= 3 else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        count += sum(1 for x in range(0, stride, 3) if line[x : x + 3] == rgb)
        prev = line
    return count


async def sh(session, sid: str, command: str) -> str:
    out = await call_ok(session, "sandbox_exec", command=command, sandbox_id=sid, timeout_ms=60000)
    assert out["exit_code"] == 0, out
    return out["stdout"]


async def guest_file_until(session, sid: str, path: str, done) -> str:
    with anyio.fail_after(30):
        while True:
            text = await sh(session, sid, f"cat {path} 2>/dev/null || true")
            if done(text):
                return text
            await anyio.sleep(0.3)


@pytest.mark.timeout(900)  # a desktop boot and Chromium's first start, under TCG
async def test_computer_use_of_a_desktop_sandbox(state_dir: Path) -> None:
    if not (data_dir() / "templates" / "desktop" / "template.json").exists():
        hint = "the `desktop` template is not built (rootfs/setup.sh --with-desktop)"
        if os.environ.get("ATOLL_TEST_SKIP_DESKTOP"):
            pytest.skip(f"ATOLL_TEST_SKIP_DESKTOP is set: {hint}")
        pytest.fail(f"{hint}, or set ATOLL_TEST_SKIP_DESKTOP=1 to skip")
    async with mcp_session(env={"ATOLL_STATE_DIR": str(state_dir)}) as session:
        text = await call_err(session, "sandbox_create", template="desktop", display="10x10")
        assert "out of range; give 640x480 to 2560x1600" in text, text
        created = await call_ok(
            session, "sandbox_create", template="desktop", name="mcpdesk", memory_mib=1024, boot_timeout_s=300
        )
        sid = created["id"]
        try:
            # A screenshot: image content plus its size and scale.
            result = await session.call_tool("computer_screenshot", {"sandbox_id": sid})
            assert not result.is_error, result
            images = [b for b in result.content if b.type == "image"]
            assert len(images) == 1 and png_size(images[0]) == (1280, 800)
            shape = result.structured_content
            assert shape["width"] == 1280 and shape["screen_height"] == 800 and shape["scale"] == 1.0, shape
            result = await session.call_tool("computer_screenshot", {"sandbox_id": sid, "scale": 640})
            assert png_size([b for b in result.content if b.type == "image"][0]) == (640, 400)
            assert result.structured_content["scale"] == 0.5

            # The test's program; its widgets' screen geometry.
            await call_ok(session, "sandbox_files_write", path="/tmp/app.py", content=APP, sandbox_id=sid)
            await call_ok(
                session,
                "sandbox_exec_background",
                command="chmod 644 /tmp/app.py && su user -c 'DISPLAY=:0 python3 /tmp/app.py'",
                sandbox_id=sid,
            )
            layout = json.loads(await guest_file_until(session, sid, "/tmp/layout.json", lambda t: "canvas" in t))
            bx, by = layout["button"][0] + 20, layout["button"][1] + 10

            # A left click in half-size screenshot pixels lands on the button.
            done = await call_ok(
                session, "computer_action", sandbox_id=sid, action="left_click", coordinate=[bx // 2, by // 2], scale=640
            )
            assert done["action"] == "left_click" and done["screen_width"] == 1280, done
            assert await guest_file_until(session, sid, "/tmp/clicks", bool) == "click\n"

            # mouse_move and cursor_position in the same scaled space.
            await call_ok(session, "computer_action", sandbox_id=sid, action="mouse_move", coordinate=[100, 50], scale=640)
            where = await call_ok(session, "computer_action", sandbox_id=sid, action="cursor_position", scale=640)
            assert where["coordinate"] == [100, 50], where
            where = await call_ok(session, "computer_action", sandbox_id=sid, action="cursor_position")
            assert where["coordinate"] == [200, 100], where

            # Typing and keys; a screenshot after the action when asked.
            e2x, e2y = layout["e2"][0] + 10, layout["e2"][1] + 5
            await call_ok(session, "computer_action", sandbox_id=sid, action="left_click", coordinate=[e2x, e2y])
            # Mouse and keyboard are two devices; a key right after a click can overtake it.
            await call_ok(session, "computer_action", sandbox_id=sid, action="wait", duration=1)
            await call_ok(session, "computer_action", sandbox_id=sid, action="type", text="typed by MCP")
            result = await session.call_tool(
                "computer_action", {"sandbox_id": sid, "action": "key", "text": "Return", "screenshot": True}
            )
            assert not result.is_error, result
            assert png_size([b for b in result.content if b.type == "image"][0]) == (1280, 800)
            assert result.structured_content["screenshot"]["width"] == 1280
            assert await guest_file_until(session, sid, "/tmp/entries", bool) == "|typed by MCP"

            # Bad actions: tool errors naming what to do.
            for args, words in [
                ({"action": "left_click", "coordinate": [1280, 0]}, "off the screen, which is 1280x800"),
                ({"action": "left_click", "coordinate": [640, 0], "scale": 640}, "off the screen"),
                ({"action": "key", "text": "ctrl+bogus"}, "unknown key `bogus`"),
                ({"action": "type", "text": "€"}, "cannot type '€'"),
                ({"action": "type"}, "action `type` needs `text`"),
                ({"action": "teleport"}, "unknown action `teleport`; use one of: key, type"),
                ({"action": "scroll", "coordinate": [5, 5], "scroll_direction": "left"}, "give up or down"),
                ({"action": "wait", "duration": 999}, "seconds from 0 to 30"),
            ]:
                text = await call_err(session, "computer_action", sandbox_id=sid, **args)
                assert words in text, (args, text)
            assert await sh(session, sid, "cat /tmp/entries") == "|typed by MCP"

            # A live view: its page loads with the token, not without.
            view = await call_ok(session, "computer_stream_url", sandbox_id=sid, view_only=True)
            assert view["url"].startswith("http://127.0.0.1:") and "view_only=1" in view["url"], view
            page = view["url"].split("?")[0]
            with urllib.request.urlopen(page, timeout=10) as response:
                assert response.status == 200 and b"noVNC" in response.read()
            token = page.split("/")[3]
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(page.replace(token, token[::-1]), timeout=10)
            assert refused.value.code == 404

            # The desktop's browser: a page served in the guest, opened with browser_open,
            # is on the screen (Chromium's first start under TCG takes a minute or two).
            await sh(
                session,
                sid,
                "mkdir -p /tmp/site && echo \"<title>atoll page</title>"
                "<body style='margin:0;background:#00ff00;height:100vh'>\" "
                "> /tmp/site/index.html",
            )
            await call_ok(
                session,
                "sandbox_exec_background",
                sandbox_id=sid,
                command="python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/site",
            )
            for url, words in [
                ("file:///etc/passwd", "only http:// and https://"),
                ("javascript:alert(1)", "only http:// and https://"),
            ]:
                text = await call_err(session, "browser_open", sandbox_id=sid, url=url)
                assert words in text, (url, text)
            opened = await call_ok(session, "browser_open", sandbox_id=sid, url="http://127.0.0.1:8000/")
            assert opened["url"] == "http://127.0.0.1:8000/" and opened["cdp_forward_port"] == 9223, opened
            with anyio.fail_after(300):
                while True:
                    shot = await session.call_tool("computer_screenshot", {"sandbox_id": sid, "scale": 640})
                    if colour_pixels(shot.content[0], b"\x00\xff\x00") > 50_000:
                        break
                    await anyio.sleep(2)

            # Playwright on the host drives that browser over CDP through the published
            # relay port (guest 9223): the page's title, and a change seen on the screen.
            preview = await call_ok(session, "sandbox_preview_url", sandbox_id=sid, port=9223)
            title = await anyio.to_thread.run_sync(playwright_turns_blue, preview["url"])
            assert title == "atoll page", title
            with anyio.fail_after(120):
                while True:
                    shot = await session.call_tool("computer_screenshot", {"sandbox_id": sid, "scale": 640})
                    if colour_pixels(shot.content[0], b"\x00\x00\xff") > 50_000:
                        break
                    await anyio.sleep(2)

            # A sandbox without a screen.
            plain = await call_ok(session, "sandbox_create", name="mcpplain", boot_timeout_s=300)
            text = await call_err(session, "computer_screenshot", sandbox_id=plain["id"])
            assert "sandbox `mcpplain` has no screen" in text and "--template desktop" in text, text
            text = await call_err(session, "computer_action", sandbox_id=plain["id"], action="screenshot")
            assert "has no screen" in text, text
            text = await call_err(session, "browser_open", sandbox_id=plain["id"], url="http://127.0.0.1/")
            assert "has no screen" in text, text

            # The desktop's X server killed: screenshots and actions say so.
            await call_ok(session, "sandbox_exec", sandbox_id=sid, command="pkill -9 -x Xorg; sleep 1")
            text = await call_err(session, "computer_screenshot", sandbox_id=sid)
            assert "X server is not running" in text and "create it again" in text, text
            text = await call_err(session, "computer_action", sandbox_id=sid, action="left_click", coordinate=[5, 5])
            assert "X server is not running" in text, text
        finally:
            await session.call_tool("sandbox_kill", {"sandbox_id": sid})
            await session.call_tool("sandbox_kill", {"sandbox_id": "mcpplain"})
