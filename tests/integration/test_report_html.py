"""Open report.html in headless Chromium: every image loads, no console errors, and a
screenshot is saved beside the report in the test's temporary folder (its path is printed).

The browser is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
commands in on fd 3, replies out on fd 4, each message NUL-terminated JSON), which needs no
network port and no extra Python package. The report itself contains no script; the checks
run as DevTools ``Runtime.evaluate`` calls from outside the page.

Without Chromium, scripts/ensure-chromium.sh tries to install it (root + apt-get only); if
that cannot work the test skips and says why.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from scaleprobe.report import build_report
from tests.unit.report.sample import write_mixed

REPO = Path(__file__).resolve().parents[2]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
IMAGE_CHECK = ("JSON.stringify(Array.from(document.images).map("
               "i => [i.complete, i.naturalWidth, i.src.slice(0, 22)]))")


def _find_browser() -> str | None:
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


@pytest.fixture(scope="module")
def browser() -> str:
    found = _find_browser()
    if found is None:
        script = REPO / "scripts" / "ensure-chromium.sh"
        try:
            out = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                                 timeout=280).stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            out = f"ensure-chromium.sh did not finish: {e}"
        found = _find_browser()
        if found is None:
            print(f"skipping: {out}")
            pytest.skip(f"no headless Chromium: {out}")
    return found


class DevTools:
    """A minimal DevTools protocol client over Chromium's debugging pipe."""

    def __init__(self, binary: str, profile: Path) -> None:
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()
        # move the child's ends out of the way of 3 and 4 before placing them there
        high_r = fcntl.fcntl(cmd_r, fcntl.F_DUPFD_CLOEXEC, 10)
        high_w = fcntl.fcntl(res_w, fcntl.F_DUPFD_CLOEXEC, 10)
        for fd in (cmd_r, res_w):
            os.close(fd)

        def place_fds() -> None:
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        args = [binary, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--no-default-browser-check",
                "--hide-scrollbars", "--mute-audio", f"--user-data-dir={profile}",
                "--remote-debugging-pipe", "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, close_fds=False,
                                     preexec_fn=place_fds)
        os.close(high_r)
        os.close(high_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from Chromium")
            ready, _, _ = select.select([self._res_r], [], [], left)
            if ready:
                chunk = os.read(self._res_r, 1 << 20)
                if not chunk:
                    raise RuntimeError("Chromium closed the debugging pipe")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout_s: float = 60.0) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout_s=5.0)
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for fd in (self._cmd_w, self._res_r):
            os.close(fd)


def _console_errors(events: list[dict[str, Any]]) -> list[str]:
    errors = []
    for ev in events:
        method, p = ev.get("method"), ev.get("params") or {}
        if method == "Runtime.exceptionThrown":
            errors.append(json.dumps(p.get("exceptionDetails"))[:300])
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append(json.dumps(p.get("args"))[:300])
        elif method == "Log.entryAdded" and (p.get("entry") or {}).get("level") == "error":
            errors.append(str(p["entry"].get("text"))[:300])
    return errors


def _wait_loaded(dt: DevTools, sid: str, url: str, timeout_s: float = 60.0) -> None:
    """Poll until the report (not the blank page before it) has finished loading."""
    deadline = time.monotonic() + timeout_s
    probe = {"expression": "document.readyState + ' ' + location.href", "returnByValue": True}
    while time.monotonic() < deadline:
        state = dt.call("Runtime.evaluate", probe, session=sid)["result"].get("value", "")
        if state == f"complete {url}":
            return
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not finish loading in {timeout_s:.0f} s")


def _inspect(binary: str, html: Path, profile: Path) -> tuple[list, list[str], bytes]:
    dt = DevTools(binary, profile)
    try:
        target = dt.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = dt.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for method in ("Page.enable", "Runtime.enable", "Log.enable"):
            dt.call(method, session=sid)
        dt.call("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 2000,
                                                       "deviceScaleFactor": 1, "mobile": False},
                session=sid)
        dt.events.clear()
        dt.call("Page.navigate", {"url": html.as_uri()}, session=sid)
        _wait_loaded(dt, sid, html.as_uri())
        value = dt.call("Runtime.evaluate", {"expression": IMAGE_CHECK, "returnByValue": True},
                        session=sid)["result"]["value"]
        shot = dt.call("Page.captureScreenshot", {"format": "png"}, session=sid)["data"]
        return json.loads(value), _console_errors(dt.events), base64.b64decode(shot)
    finally:
        dt.close()


@pytest.mark.timeout(120)
def test_report_renders_in_headless_chromium(browser, tmp_path):
    write_mixed(tmp_path / "results")
    _, html = build_report(tmp_path / "results", tmp_path / "report")
    with tempfile.TemporaryDirectory(prefix="scaleprobe-chromium-") as profile:
        images, errors, png = _inspect(browser, html, Path(profile))
    assert len(images) >= 6, images
    for complete, width, src in images:
        assert complete and width > 0, (complete, width, src)
        assert src.startswith("data:image/png;base64")
    assert errors == []
    assert png.startswith(b"\x89PNG")
    shot = html.parent / "report.png"  # in tmp_path, never in the repository
    shot.write_bytes(png)
    print(f"screenshot: {shot}")
