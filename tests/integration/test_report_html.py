"""Open report.html in real headless Chromium and check what a reader sees: the report
opens with its answer ("What this says"), no memory axis starts above zero, no label of a
figure is cut and no two bars are labelled alike, no "None" and no literal backtick on the
page, every image loads with no console error. A screenshot goes to the test's temporary
folder (its path is printed), never into the repository.

The browser is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
commands in on fd 3, replies out on fd 4, each message NUL-terminated JSON), which needs no
network port and no extra Python package. The report itself contains no script; the checks
run as DevTools ``Runtime.evaluate`` calls from outside the page, and read what each figure
says it shows from its ``data-plot`` attribute (report/render/plots.py ``_meta``).

No test installs a browser: ``make test`` does that first, as its visible ``browser`` step
(scripts/ensure-chromium.sh). Without Chromium ($CHROMIUM, or chromium / chromium-browser /
google-chrome on PATH) these tests skip and say why. Chromium runs with a temporary HOME and
cache, so nothing is left in the user's cache.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
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
PAGE_CHECK = """JSON.stringify((() => {
  const lead = document.querySelector('section.lead');
  const blocks = Array.from(document.body.querySelectorAll('h2, table, figure, p'));
  const cells = t => t ? Array.from(t.querySelectorAll('tr')).map(
      r => Array.from(r.children).map(c => c.innerText)) : null;
  return {
    h2: Array.from(document.querySelectorAll('h2')).map(h => h.textContent),
    leadFirst: lead !== null && blocks.length > 0 && lead.contains(blocks[0]),
    lead: cells(lead && lead.querySelector('table')),
    breakdown: cells(document.querySelector('#breakdown ~ .scroll table')),
    batch: cells(document.querySelector('#sweeps ~ .scroll table')),
    runs: (() => { const t = document.querySelector('#runs ~ .scroll table');
                   return t ? [t.scrollWidth, t.parentElement.clientWidth] : null; })(),
    details: document.querySelectorAll('details').length,
    figures: Array.from(document.querySelectorAll('figure')).map(f => {
      const img = f.querySelector('img');
      return {name: f.dataset.name, plot: f.dataset.plot ? JSON.parse(f.dataset.plot) : null,
              complete: img.complete, w: img.naturalWidth, h: img.naturalHeight,
              src: img.src.slice(0, 22)};
    }),
    text: document.body.innerText,
    backtick: document.documentElement.outerHTML.includes('`'),
  };
})())"""


def find_browser() -> str | None:
    env = os.environ.get("CHROMIUM")
    if env and os.access(env, os.X_OK):
        return env
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


@pytest.fixture(scope="module")
def browser() -> str:
    found = find_browser()
    if found is None:
        reason = ("no headless Chromium ($CHROMIUM, or chromium / chromium-browser / "
                  "google-chrome on PATH): run `make browser` (scripts/ensure-chromium.sh)")
        print(f"skipping: {reason}")
        pytest.skip(reason)
    return found


class DevTools:
    """A minimal DevTools protocol client over Chromium's debugging pipe."""

    def __init__(self, binary: str, home: Path) -> None:
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
                "--hide-scrollbars", "--mute-audio", f"--user-data-dir={home / 'profile'}",
                f"--disk-cache-dir={home / 'cache' / 'chromium'}",
                "--remote-debugging-pipe", "about:blank"]
        # everything Chromium keeps (profile, caches, fontconfig) goes under ``home``
        env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"),
               "XDG_CONFIG_HOME": str(home / "config"), "XDG_DATA_HOME": str(home / "data")}
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, close_fds=False,
                                     preexec_fn=place_fds, env=env)
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


def inspect(binary: str, html: Path, also: str | None = None
            ) -> tuple[dict[str, Any], list[str], bytes]:
    """Load the page in a fresh Chromium whose HOME and caches live in a temporary folder
    (removed afterwards); returns the page check, console errors and a screenshot. ``also``:
    one more expression evaluated on the same page, its JSON value under the check's "also"."""
    with tempfile.TemporaryDirectory(prefix="scaleprobe-chromium-") as home:
        dt = DevTools(binary, Path(home))
        try:
            target = dt.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            sid = dt.call("Target.attachToTarget", {"targetId": target,
                                                    "flatten": True})["sessionId"]
            for method in ("Page.enable", "Runtime.enable", "Log.enable"):
                dt.call(method, session=sid)
            dt.call("Emulation.setDeviceMetricsOverride",
                    {"width": 1280, "height": 2000, "deviceScaleFactor": 1, "mobile": False},
                    session=sid)
            dt.events.clear()
            dt.call("Page.navigate", {"url": html.as_uri()}, session=sid)
            _wait_loaded(dt, sid, html.as_uri())
            checked = {}
            for key, expr in (("page", PAGE_CHECK), ("also", also)):
                if expr is not None:
                    checked[key] = json.loads(dt.call(
                        "Runtime.evaluate", {"expression": expr, "returnByValue": True},
                        session=sid)["result"]["value"])
            shot = dt.call("Page.captureScreenshot", {"format": "png"}, session=sid)["data"]
            page = checked["page"] if also is None else {**checked["page"],
                                                         "also": checked["also"]}
            return page, _console_errors(dt.events), base64.b64decode(shot)
        finally:
            dt.close()


def _user_cache() -> set[str]:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return {p.name for p in cache.iterdir()} if cache.is_dir() else set()


def _inside(box: list[float], width: float, height: float, tol: float = 1.0) -> bool:
    x0, y0, x1, y1 = box
    return x0 >= -tol and y0 >= -tol and x1 <= width + tol and y1 <= height + tol


def _flat(text: str) -> str:
    return re.sub(r"[\s,]", "", text)


def check_page(page: dict[str, Any], errors: list[str]) -> None:
    """What every report page must hold, whatever its records."""
    # the answer first: "What this says" is the first heading and holds the first block
    assert page["h2"][0] == "What this says", page["h2"][:3]
    assert page["leadFirst"]
    assert page["lead"] is not None and 2 <= len(page["lead"]) <= 6  # header + 1..5 verdicts
    for row in page["lead"][1:]:
        assert all(cell.strip() for cell in row[1:]), row  # verdict, number, interval, command
    # no "None", no literal backtick (a `command` is a <code> element)
    assert not re.search(r"\bNone\b", page["text"]), re.findall(r".{40}\bNone\b.{20}",
                                                                  page["text"])
    assert not page["backtick"]
    assert errors == []
    for fig in page["figures"]:
        assert fig["complete"] and fig["w"] > 0, fig["name"]
        assert fig["src"].startswith("data:image/png;base64")
        meta = fig["plot"]
        assert meta is not None, fig["name"]
        # the PNG is the whole figure, and everything drawn lies inside it: no label is cut
        assert (fig["w"], fig["h"]) == (meta["width"], meta["height"]), fig["name"]
        assert _inside(meta["content"], meta["width"], meta["height"]), (fig["name"], meta)
        for ax in meta["axes"]:
            assert _inside(ax["bbox"], meta["width"], meta["height"]), (fig["name"], ax)
            if "memory" in ax["ylabel"] or "time" in ax["ylabel"]:
                assert ax["ylim"][0] == 0, (fig["name"], ax["ylabel"], ax["ylim"])
            ticks = ax["xticklabels"]
            assert len(set(ticks)) == len(ticks), (fig["name"], ticks)  # no two bars alike
            boxes = sorted(ax["xtickboxes"])  # and none runs into the next
            assert all(a[2] <= b[0] + 1 for a, b in zip(boxes, boxes[1:], strict=False)), (
                fig["name"], ticks)


def _shoot(png: bytes, folder: Path) -> Path:
    assert png.startswith(b"\x89PNG")
    shot = folder / "report.png"
    shot.write_bytes(png)
    print(f"screenshot: {shot}")
    return shot


@pytest.mark.timeout(120)
def test_mixed_report_renders_in_headless_chromium(browser, tmp_path):
    """Every kind of record (sweeps, scaling, co-location, communication, parity, failed
    runs): each section's figures load, carry their description, and none is cut."""
    write_mixed(tmp_path / "results")
    _, html = build_report(tmp_path / "results", tmp_path / "report")
    before = _user_cache()
    page, errors, png = inspect(browser, html)
    assert _user_cache() == before  # Chromium's caches went to its temporary HOME
    assert len(page["figures"]) >= 6
    check_page(page, errors)
    shot = _shoot(png, html.parent)
    assert tmp_path in shot.parents and REPO not in shot.parents


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_real_sweep_report_in_headless_chromium(browser, tmp_path, quickstart_sweep):
    """A real sweep (digits, batch 16 and 64, 2 repeats each) as a new user's first report:
    the headline verdict on batch size comes first with its interval and a command; the
    memory and epoch-time axes start at zero; the epoch-time figure is labelled with the
    Growth the table beside it shows; the breakdown's bars carry the table's run labels in
    full, each different."""
    _, out, p = quickstart_sweep
    assert p.returncode == 0, p.stderr[-2000:]
    _, html = build_report(out, tmp_path / "report")
    page, errors, png = inspect(browser, html)
    check_page(page, errors)
    head = " ".join(" ".join(row) for row in page["lead"][1:])
    assert "(quickstart)" in head  # the sweep's batch-size verdict is among them
    assert "repeats" in head  # every batch verdict carries the repeats behind its interval

    batch = next(f["plot"] for f in page["figures"] if f["name"].startswith("batch-"))
    epoch, memory = batch["axes"]
    assert epoch["ylabel"].startswith("epoch time") and memory["ylabel"].startswith("peak")
    assert memory["ylim"][0] == 0 and epoch["ylim"][0] == 0
    header, *rows = page["batch"]
    growth_col = [i for i, h in enumerate(header) if h == "Growth"][1]  # the epoch time's
    # the figure beside its interval, or beside "(spread too large, 2 repeats)"; the cell
    # opens with the ratio of the epoch cells shown ("-25%; paired -26%" where they differ)
    table_growth = [re.split(r" [\[(]|; ", r[growth_col])[0] for r in rows
                    if r[growth_col] != "-"]
    assert epoch["points"] == table_growth

    breakdown = next(f["plot"] for f in page["figures"] if f["name"] == "breakdown")
    bars = breakdown["axes"][0]["xticklabels"]
    runs = [r[0] for r in page["breakdown"][1:]]
    assert [_flat(b) for b in bars] == [_flat(r) for r in runs]  # the full label, wrapped
    assert "median step" in breakdown["axes"][0]["title"].lower()
    assert "ms" in breakdown["axes"][0]["title"]
    shot = _shoot(png, html.parent)
    assert tmp_path in shot.parents and REPO not in shot.parents


@pytest.mark.timeout(120)
def test_a_sweep_s_runs_table_fits_the_page(browser, tmp_path):
    """Bug: the runs table of the demo had 20 columns and was cut at 1300 px (after MFU at
    900 px) while model, dataset, strategy and world never changed. Now those stand above it
    and the table fits a 1280 px window; an evidence cell of many runs opens in <details>."""
    from tests.unit.report.factory import run, write_results

    recs = [run(f"b{bs}r{i}", batch=bs, step_s=0.05 * bs / 16, model="digits_cnn",
                dataset="digits", cpu=40.0 + i, host_mem=(600 + bs) << 20,
                experiment={"id": "demo-batch-size", "kind": "sweep",
                            "point": {"batch_size": bs}, "repeat": i},
                bd={"data": 0.01, "h2d": 0.0, "forward": 0.02 * bs / 16,
                    "backward": 0.03 * bs / 16, "optimizer": 0.001, "comm": 0.0},
                rel_ci=0.01)
            for i in range(3) for bs in (16, 32, 64, 128, 256)]
    _, html = build_report(write_results(tmp_path / "results", recs), tmp_path / "report")
    page, errors, _png = inspect(browser, html)
    check_page(page, errors)
    width, room = page["runs"]
    assert width <= room, f"the runs table is {width} px wide in {room} px"
    assert "All runs: model digits_cnn, dataset digits" in page["text"]


WIDE_CHECK = """JSON.stringify((() => {
  const wide = Array.from(document.querySelectorAll('div.scroll')).filter(
      d => d.scrollWidth > d.clientWidth + 1).map(d => d.querySelector('table').rows[0].innerText);
  const findings = [];
  for (let el = document.getElementById('findings').nextElementSibling;
       el && el.tagName !== 'H2'; el = el.nextElementSibling) {
    if (el.classList.contains('scroll')) findings.push(el.querySelector('table'));
  }
  const steps = findings.flatMap(
      t => Array.from(t.querySelectorAll('tbody tr')).map(r => {
          const cell = r.lastElementChild;
          const line = parseFloat(getComputedStyle(cell).lineHeight);
          const shown = cell.querySelector('summary') || cell;
          return shown.getBoundingClientRect().height / line; }));
  return {wide: wide, nextStepLines: steps};
})())"""


@pytest.mark.timeout(120)
def test_a_runs_table_with_every_column_fits_and_next_steps_are_one_line(browser, tmp_path):
    """Bugs caught: at 1300 px the runs table lost CPU, Outside load, Accuracy and Status
    (out of sight, behind a horizontal scroll) when every column varied; "Next step" cells
    held 9-line paragraphs. Twenty columns, long model names, runs under load: every table
    fits a 1280 px window; each "Next step" shows one line, the rest behind <details>."""
    from tests.unit.report.factory import run, write_results

    recs = []
    for i, (model, ds, strat, n) in enumerate([
            ("resnet18", "synthetic", "ddp", 2), ("mobilenet_v3_small", "cifar10", "fsdp", 4),
            ("digits_cnn", "digits", "single", 1), ("gpt_tiny", "text", "localsgd", 2)]):
        for bs in (16, 256):
            r = run(f"{model}-b{bs}", model=model, dataset=ds, strategy=strat, nproc=n,
                    batch=bs, step_s=0.05 * bs / 16 + i * 0.013, host_mem=(600 + bs) << 20,
                    device_mem=(3 + i) << 30, gpu=40.0 + i, cpu=50.0 + 7 * i,
                    accuracy=0.81 + i / 100, rel_ci=0.059,
                    experiment={"id": f"exp-{model}", "kind": "sweep",
                                "point": {"batch_size": bs}, "repeat": 1})
            r["metrics"].update(outside_cpu_cores=1.66 + i / 10, mfu=0.0123 + i / 1000,
                                data_wait_fraction=0.02 + i / 50, comm_fraction=0.1 + i / 40)
            recs.append(r)
    recs[-1]["status"] = "interrupted"
    _, html = build_report(write_results(tmp_path / "results", recs), tmp_path / "report")
    page, errors, _png = inspect(browser, html, also=WIDE_CHECK)
    check_page(page, errors)
    runs, got = page["runs"], page["also"]
    assert runs[0] <= runs[1], f"the runs table is {runs[0]} px wide in {runs[1]} px"
    assert got["wide"] == [], f"tables wider than the page: {got['wide']}"
    assert got["nextStepLines"] and max(got["nextStepLines"]) < 1.6, got["nextStepLines"]
