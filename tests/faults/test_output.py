"""Output folders that cannot take the results: read-only, no permission, full. Each ends in
exit 2 and one line naming the path, leaves no temporary file, loses nothing recorded before,
and a results.jsonl line is written whole or not at all.

Read-only and full folders are small tmpfs mounts when the tests run as root (chmod does not
stop root); otherwise the read-only folder is a chmod 0555 one and the full-disk tests skip.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from scaleprobe.core import results as res
from scaleprobe.core.errors import OutputError
from tests.unit.report.factory import run as run_record

pytestmark = pytest.mark.timeout(240)

RUN = ("run", "--model", "linear", "--steps", 2, "--warmup-steps", 1, "--loader", "naive",
       "--no-progress")
SPEC = """
[sweep]
id = "ro"
repeats = 1
[base]
model = "linear"
steps = 2
warmup_steps = 1
loader = "naive"
[grid]
batch_size = [8, 16]
"""


def _mount(path: Path, opts: str) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], check=True,
                   capture_output=True)


def _can_mount(tmp_path: Path) -> str | None:
    """None when a tmpfs can be mounted here, else why not."""
    if os.geteuid() != 0:
        return "not root: a small tmpfs needs root to mount"
    probe = tmp_path / "probe"
    probe.mkdir()
    try:
        _mount(probe, "size=64k")
    except (OSError, subprocess.CalledProcessError) as e:
        return f"cannot mount a tmpfs ({e})"
    subprocess.run(["umount", str(probe)], check=True)
    return None


@pytest.fixture
def small_fs(tmp_path):
    """``make(size_kib)`` -> a fresh tmpfs of that size; unmounted afterwards."""
    mounted: list[Path] = []
    why = _can_mount(tmp_path)

    def make(size_kib: int) -> Path:
        if why:
            pytest.skip(why)
        d = tmp_path / f"fs{len(mounted)}"
        d.mkdir()
        _mount(d, f"size={size_kib}k")
        mounted.append(d)
        return d

    yield make
    for d in reversed(mounted):
        subprocess.run(["umount", "-l", str(d)], check=False)


def _seed(folder: Path) -> bytes:
    """A results.jsonl with one earlier run, as a folder that already holds results has."""
    res.append_jsonl(folder / res.RESULTS_FILE, run_record("earlier"))
    return (folder / res.RESULTS_FILE).read_bytes()


@pytest.fixture
def read_only(tmp_path, small_fs):
    """A read-only folder holding an earlier result: a remounted tmpfs as root, a chmod 0555
    folder otherwise. Yields (folder, the results.jsonl bytes before)."""
    if os.geteuid() == 0:
        d = small_fs(1024)
        before = _seed(d)
        subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        yield d, before
    else:
        d = tmp_path / "ro"
        d.mkdir()
        before = _seed(d)
        d.chmod(0o555)
        yield d, before
        d.chmod(0o755)


def _fill(folder: Path) -> None:
    """Write until the file system is full."""
    with (folder / "filler").open("wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC
    assert res.free_bytes(folder) == 0


def _one_error_line(p, path: Path, *words: str) -> str:
    """The command's stderr is one line, ``scaleprobe: error: ...``, naming ``path``."""
    assert p.returncode == 2, (p.returncode, p.stdout[-1000:], p.stderr[-2000:])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("scaleprobe: error: "), p.stderr[-2000:]
    assert str(path) in lines[0], lines[0]
    assert any(w in lines[0] for w in words), lines[0]
    return lines[0]


def _no_temp_files(folder: Path) -> None:
    left = [p for p in folder.rglob("*") if p.name.endswith(".tmp")]
    assert not left, left


READ_ONLY = ("read-only file system", "permission denied")


@pytest.mark.parametrize("where", ["new", "existing"])
def test_run_into_read_only_folder(cli, read_only, where):
    """Catches `run --out` on a read-only mount ending in an OSError traceback (exit 1):
    a new folder under it, and the folder itself holding earlier results."""
    folder, before = read_only
    out = folder / "out" if where == "new" else folder
    p = cli(*RUN, "--out", out)
    _one_error_line(p, out, *READ_ONLY)
    assert (folder / res.RESULTS_FILE).read_bytes() == before


def test_sweep_report_and_demo_into_read_only_folder(cli, read_only, tmp_path):
    """Catches sweep, report and demo ending in a traceback on a read-only output folder."""
    folder, before = read_only
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    _one_error_line(cli("sweep", spec, "--out", folder / "sweep"), folder / "sweep", *READ_ONLY)
    _one_error_line(cli("report", folder), folder, *READ_ONLY)  # beside the results
    _one_error_line(cli("demo", "--quick", "--out", folder / "demo"), folder / "demo",
                    *READ_ONLY)
    assert (folder / res.RESULTS_FILE).read_bytes() == before


def test_full_disk_is_found_before_the_run(cli, small_fs, tmp_path):
    """Catches runs and sweeps starting on a full disk and failing at their first write with
    OSError 28 (exit 1), leaving .config.json.<pid>.tmp files behind."""
    folder = small_fs(64)
    before = _seed(folder)
    _fill(folder)
    line = _one_error_line(cli(*RUN, "--out", folder), folder, "not enough free space")
    assert "KiB free" in line
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    _one_error_line(cli("sweep", spec, "--out", folder), folder, "not enough free space")
    assert (folder / res.RESULTS_FILE).read_bytes() == before
    _no_temp_files(folder)


def test_report_on_full_disk_fails_at_the_write_and_leaves_no_partial_file(cli, small_fs):
    """Catches a report on a full disk leaving a truncated report.md (or its temporary file)
    and a traceback: the write fails, is named, and nothing half-written stays."""
    folder = small_fs(256)
    _seed(folder)
    _fill(folder)
    p = cli("report", folder)
    _one_error_line(p, folder, "no space left on device")
    assert not (folder / "report.md").exists() and not (folder / "report.html").exists()
    _no_temp_files(folder)


def test_run_whose_disk_fills_after_the_preflight(small_fs, monkeypatch, capsys):
    """Catches a write that fails mid-run (the disk filled after the free-space check) ending
    in a traceback with the temporary file and an empty run folder left behind."""
    from scaleprobe.cli import main
    from scaleprobe.run import driver

    folder = small_fs(64)
    before = _seed(folder)
    _fill(folder)
    monkeypatch.setattr(driver, "RUN_OUTPUT_BYTES", 0)  # the preflight saw room
    code = main([*map(str, RUN), "--out", str(folder)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "no space left on device" in err and str(folder) in err
    assert "Traceback" not in err
    _no_temp_files(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["filler", res.RESULTS_FILE]
    assert (folder / res.RESULTS_FILE).read_bytes() == before


# ------------------------------------------------------------------ whole-line appends

def _lines(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_bytes().splitlines() if ln.strip()]


@pytest.fixture
def results(tmp_path):
    path = tmp_path / res.RESULTS_FILE
    res.append_jsonl(path, {"kind": "run", "n": 1})
    return path


def test_short_write_is_cut_back(results, monkeypatch):
    """Catches the 117-byte partial line a full disk once left in results.jsonl (while
    result.json said ok): a short write is truncated back, the file keeps its whole lines."""
    before = results.read_bytes()
    real_write = os.write

    def short(fd, data):
        return real_write(fd, data[: len(data) // 2])

    monkeypatch.setattr(res.os, "write", short)
    with pytest.raises(OutputError, match=f"cannot write {results}: no space left"):
        res.append_jsonl(results, {"kind": "run", "n": 2, "pad": "x" * 300})
    assert results.read_bytes() == before
    monkeypatch.setattr(res.os, "write", real_write)
    res.append_jsonl(results, {"kind": "run", "n": 3})
    assert [r["n"] for r in _lines(results)] == [1, 3]


def test_enospc_at_the_write_and_after_a_torn_line(results, monkeypatch):
    """Catches an ENOSPC from write or fsync leaving bytes behind, including the newline
    added to end a torn line left by a writer killed earlier."""
    with results.open("ab") as fh:
        fh.write(b'{"kind":"run","n":')  # torn by an earlier writer
    before = results.read_bytes()
    real_write = os.write

    def write_then_fail(fd, data):
        real_write(fd, data[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(res.os, "write", write_then_fail)
    with pytest.raises(OutputError, match="no space left"):
        res.append_jsonl(results, {"kind": "run", "n": 2})
    assert results.read_bytes() == before
    monkeypatch.setattr(res.os, "write", real_write)
    monkeypatch.setattr(res.os, "fsync", lambda fd: (_ for _ in ()).throw(
        OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(OutputError):
        res.append_jsonl(results, {"kind": "run", "n": 2})
    assert results.read_bytes() == before


def test_no_room_for_the_line_writes_nothing(results, monkeypatch):
    """Catches an append started without room for the whole line (the free-space check)."""
    before = results.read_bytes()
    calls = []
    monkeypatch.setattr(res, "free_bytes", lambda folder: 50)
    monkeypatch.setattr(res.os, "write", lambda fd, data: calls.append(data) or len(data))
    with pytest.raises(OutputError, match="no space left"):
        res.append_jsonl(results, {"kind": "run", "n": 2, "pad": "x" * 100})
    assert not calls and results.read_bytes() == before


def test_atomic_json_write_failure_removes_its_temporary_file(tmp_path, monkeypatch):
    """Catches .result.json.<pid>.tmp files left behind by a failed write, and a failed write
    replacing the previous result.json."""
    target = tmp_path / "result.json"
    res.write_json_atomic(target, {"status": "failed"})
    monkeypatch.setattr(res.os, "fsync", lambda fd: (_ for _ in ()).throw(
        OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(OutputError, match=f"cannot write {target}: no space left"):
        res.write_json_atomic(target, {"status": "ok"})
    assert json.loads(target.read_text()) == {"status": "failed"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


# ------------------------------------------------------------------ one sweep per folder

HELD_MODEL = """
import pathlib, time
from scaleprobe.models.small import Linear
def build(num_classes, image_size):
    gate = pathlib.Path(__file__).with_suffix(".go")
    t0 = time.time()
    while not gate.exists() and time.time() - t0 < 120:  # held until the test says go
        time.sleep(0.05)
    return Linear(num_classes, image_size)
"""


def test_second_sweep_into_the_same_folder_refuses(cli, tmp_path, out_dir):
    """Catches two identical sweeps started at once into one --out both running every point
    (each saw no finished runs): the second refuses in one line naming the folder and the
    PID of the first, which then runs each point once."""
    import time

    model = tmp_path / "held.py"
    model.write_text(HELD_MODEL)
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.replace('model = "linear"', f'model = "{model}:build"')
                    .replace("[8, 16]", "[8]"))
    from tests.conftest import start_cli

    first, _, err_f = start_cli(tmp_path, "sweep", spec, "--out", out_dir, "--no-progress")
    try:
        lock = out_dir / ".sweep.lock"
        deadline = time.monotonic() + 120
        while not (lock.exists() and lock.read_text().strip() == str(first.pid)):
            assert first.poll() is None and time.monotonic() < deadline, err_f.read_text()
            time.sleep(0.1)
        t0 = time.monotonic()
        second = cli("sweep", spec, "--out", out_dir, "--no-progress", timeout=120)
        took = time.monotonic() - t0
        print(f"second sweep refused after {took:.1f} s")
        line = _one_error_line(second, out_dir, "another sweep")
        assert f"PID {first.pid}" in line
        # it refused at once (measured 1.0 s at load average 4), not after a point ran
        assert took < 60, took
    finally:
        model.with_suffix(".go").touch()
        first.wait(timeout=180)
    assert first.returncode == 0, err_f.read_text()[-2000:]
    recs = res.read_jsonl(out_dir / res.RESULTS_FILE)
    assert [r["kind"] for r in recs] == ["run", "sweep"]  # the point ran once
    assert recs[0]["status"] == "ok"


@pytest.mark.parametrize("where", ["/proc/nope/x.md", "/proc/x.md", "FOLDER", "FILE/x.md",
                                   "READ_ONLY/x.md"])
def test_an_unwritable_compare_markdown_path_is_one_line_before_comparing(
        tmp_path, capsys, read_only, where):
    """Bug: `compare A B --md /proc/nope/x.md` printed the comparison, then a 19-line
    FileNotFoundError traceback, exit 1."""
    from scaleprobe.cli import main
    from tests.unit.report.factory import write_results

    a = write_results(tmp_path / "a", [run_record("a", step_s=0.1)])
    b = write_results(tmp_path / "b", [run_record("b", step_s=0.1)])
    (tmp_path / "f").write_text("a file, not a folder")
    md = (where.replace("FOLDER", str(tmp_path)).replace("FILE", str(tmp_path / "f"))
          .replace("READ_ONLY", str(read_only[0])))
    assert main(["compare", str(a), str(b), "--md", md]) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("scaleprobe: error: "), err
    assert str(Path(md).parent) in err or md in err, err
    assert "samples/s" not in cap.out  # found before the comparison was printed
    assert not Path(md).is_file()


@pytest.mark.parametrize("where", ["/proc/nope", "FILE"])
def test_an_unwritable_report_folder_is_one_line(tmp_path, capsys, where):
    from scaleprobe.cli import main
    from tests.unit.report.factory import write_results

    a = write_results(tmp_path / "a", [run_record("a", step_s=0.1)])
    (tmp_path / "f").write_text("a file, not a folder")
    out = where.replace("FILE", str(tmp_path / "f"))
    assert main(["report", str(a), "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("scaleprobe: error: ") and out in err
