"""Bad inputs and starved resources met during a run: a broken data file, a model builder
that raises, a memory limit below what the process holds, a tiny /dev/shm. Each ends with
the one line that says what was wrong (exit 2 for the user's mistakes) and a recorded result
(result.json and a results.jsonl line) carrying that line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scaleprobe.core import results as res
from scaleprobe.core.errors import DataError
from scaleprobe.data.formats import open_lfw_people, write_dataset
from tests import cliserver

pytestmark = pytest.mark.timeout(240)

QUICK = ("--steps", 2, "--warmup-steps", 1, "--loader", "naive", "--no-progress")


def _user_error(p, *needles: str) -> str:
    """Exit 2, stderr one line carrying every needle, no traceback."""
    assert p.returncode == 2, (p.returncode, p.stdout[-1000:], p.stderr[-2000:])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("scaleprobe: error: "), p.stderr[-2000:]
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0][len("scaleprobe: error: "):]


def _recorded(out_dir: Path, error: str) -> dict:
    """The one run record, failed with ``error``, in results.jsonl and in its result.json."""
    (rec,) = res.read_jsonl(out_dir / res.RESULTS_FILE)
    assert rec["status"] == "failed" and rec["error"] == error
    assert json.loads((Path(rec["paths"]["dir"]) / "result.json").read_text()) == rec
    return rec


# ------------------------------------------------------------------ broken LFW pairs file

@pytest.fixture(scope="module")
def lfw(tmp_path_factory) -> Path:
    return write_dataset("lfw", tmp_path_factory.mktemp("faces") / "lfw", count=80,
                         size=(32, 32))


@pytest.fixture
def lfw_copy(lfw, tmp_path) -> Path:
    root = tmp_path / "lfw"
    shutil.copytree(lfw, root)
    return root


def _break_pairs(root: Path, how: str) -> tuple[Path, int]:
    """Break pairsDevTrain.txt ``how``; returns the file and the line (1-based) now wrong."""
    f = root / "lfw-py" / "pairsDevTrain.txt"
    lines = f.read_text().splitlines()
    if how == "header":
        lines[0], bad = "pairs: many", 1
    elif how == "short line":
        lines[3], bad = lines[3].split("\t")[0], 4
    elif how == "unknown name":
        lines[2], bad = lines[2].replace(lines[2].split("\t")[0], "Nobody_Here", 1), 3
    else:  # a line more than the header announces
        lines.append(lines[1])
        bad = len(lines)
    f.write_text("\n".join(lines) + "\n")
    return f, bad


@pytest.mark.parametrize("how", ["header", "short line", "unknown name", "extra line"])
def test_broken_train_pairs_file_names_file_and_line(lfw_copy, how):
    """Catches a broken pairsDevTrain.txt going unnoticed: the face data of the train split
    opened without ever reading its pairs file."""
    f, bad = _break_pairs(lfw_copy, how)
    with pytest.raises(DataError, match=f"{f} line {bad}: "):
        open_lfw_people(lfw_copy, "train")


def test_data_error_in_a_run_is_recorded_with_its_message(cli, lfw_copy, out_dir):
    """Catches a data error (exit 2) leaving a run folder whose result says only
    "configuration or data error" and no results.jsonl line."""
    f, bad = _break_pairs(lfw_copy, "unknown name")
    p = cli("run", "--task", "face", "--dataset", "lfw", "--data-dir", lfw_copy,
            "--image-size", 32, "--batch-size", 8, *QUICK, "--out", out_dir)
    error = _user_error(p, f"{f} line {bad}", "Nobody_Here")
    _recorded(out_dir, error)


# ------------------------------------------------------------------ a model builder that raises

BUILDER = """import torch

def _layers(n):
    raise ValueError(f"no head for {n} classes")

def build(num_classes):
    return _layers(num_classes)
"""


def test_model_builder_that_raises_names_the_users_file_and_line(cli, tmp_path, out_dir):
    """Catches a user's builder raising ending in exit 1 and a traceback instead of exit 2 and
    the line in the user's file that raised."""
    f = tmp_path / "mymodel.py"
    f.write_text(BUILDER)
    p = cli("run", "--model", f"{f}:build", *QUICK, "--out", out_dir)
    error = _user_error(p, f"{f}:4", "ValueError: no head for 10 classes")
    _recorded(out_dir, error)


def test_user_error_in_a_sweep_point_is_recorded_once(cli, tmp_path, out_dir):
    """Catches a point whose run recorded its user error being recorded a second time by the
    point process (two failed lines for one attempt, counted twice by reports)."""
    f = tmp_path / "mymodel.py"
    f.write_text(BUILDER)
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[sweep]\nid = "s"\nrepeats = 1\n[base]\nmodel = "{f}:build"\nsteps = 2\n'
                    'warmup_steps = 1\nloader = "naive"\n[grid]\nbatch_size = [8]\n')
    p = cli("sweep", spec, "--out", out_dir, "--no-progress")
    assert p.returncode == 1, p.stderr[-2000:]  # every point failed
    runs = res.runs(res.read_jsonl(out_dir / res.RESULTS_FILE))
    assert len(runs) == 1, [r["error"] for r in runs]
    assert f"{f}:4" in runs[0]["error"] and "no head for 10 classes" in runs[0]["error"]


# ------------------------------------------------------------------ --memory-limit too small

def test_memory_limit_below_what_the_process_holds(cli, out_dir):
    """Catches `--memory-limit 10MiB` ending in a 31-line traceback from environment
    collection (the limit stayed on after the run failed) and no result."""
    p = cli("run", "--model", "linear", "--memory-limit", "10MiB", *QUICK, "--out", out_dir)
    error = _user_error(p, "--memory-limit 10MiB", "MiB this process already holds")
    _recorded(out_dir, error)


# ------------------------------------------------------------------ a tiny /dev/shm

# What torch raised in a run with 2 loader workers and a 512 KiB /dev/shm (paths shortened):
# the cause is the last line, past the first 1,000 characters the result used to keep.
SHM_TRACEBACK = """RuntimeError: Caught RuntimeError in DataLoader worker process 0.
Original Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 375, in _worker_loop
    data = fetcher.fetch(index)  # type: ignore[possibly-undefined]
           ^^^^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", line 57, in fetch
    return self.collate_fn(data)
           ^^^^^^^^^^^^^^^^^^^^^
  File "/src/scaleprobe/data/loader.py", line 68, in collate_indexed
    return default_collate(list(xs)), default_collate(list(ys)), torch.tensor(idx), bad
           ^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/collate.py", line 401, in default_collate
    return collate(batch, collate_fn_map=default_collate_fn_map)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/collate.py", line 159, in collate
    return collate_fn_map[collate_type](
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/collate.py", line 273, in collate_tensor_fn
    storage = elem._typed_storage()._new_shared(numel, device=elem.device)
              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/torch/storage.py", line 1220, in _new_shared
    untyped_storage = torch.UntypedStorage._new_shared(
                      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/torch/storage.py", line 423, in _new_shared
    return cls._new_using_fd_cpu(size)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^
RuntimeError: unable to allocate shared memory(shm) for file </torch_7272_2923374372_0>: No space left on device (28)
"""
SHM_CAUSE = ("unable to allocate shared memory(shm) for file </torch_7272_2923374372_0>: "
             "No space left on device (28)")
FIX = "use --loader naive, fewer --workers or a larger /dev/shm"


def test_shm_cause_and_fix_are_extracted_from_the_worker_traceback(monkeypatch):
    """Catches the recorded error being the start of the worker's traceback, cut before its
    cause, with no word of what to do."""
    from scaleprobe.measure import env
    from scaleprobe.run import failure as runner

    monkeypatch.setattr(env, "shm_bytes", lambda: 512 << 10)
    line = runner.failure_line(SHM_TRACEBACK)
    assert "\n" not in line
    assert line.startswith("RuntimeError: Caught RuntimeError in DataLoader worker process 0")
    assert SHM_CAUSE in line and line.endswith(f"/dev/shm has 512 KiB; {FIX}")
    # a worker's other errors keep their cause too, without the /dev/shm advice
    other = SHM_TRACEBACK.replace(SHM_TRACEBACK.splitlines()[-1],
                                  "ValueError: image 12 has 2 channels")
    line = runner.failure_line(other)
    assert line.endswith(": ValueError: image 12 has 2 channels") and "/dev/shm" not in line


@pytest.mark.slow
@pytest.mark.root
def test_run_with_loader_workers_on_a_tiny_dev_shm(tmp_path, out_dir):
    """A real run with 2 loader workers in a private mount namespace whose /dev/shm is a
    512 KiB tmpfs: the result and the summary carry the cause and the fix, in one line."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a private /dev/shm")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace: {probe.stderr.decode().strip()}")
    cmd = (f"mount -t tmpfs -o size=512k tmpfs /dev/shm && exec {sys.executable} -m scaleprobe"
           " run --model linear --steps 3 --warmup-steps 1 --loader pipelined --workers 2"
           f" --batch-size 256 --image-size 64 --no-progress --out {out_dir}")
    # piped, no COLUMNS (pytest may export one): the summary keeps each line whole for a log
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    p = subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True,
                       timeout=180, env=env)
    assert p.returncode == 1, p.stderr[-2000:]
    (rec,) = res.read_jsonl(out_dir / res.RESULTS_FILE)
    assert rec["status"] == "failed"
    assert "unable to allocate shared memory" in rec["error"]
    assert rec["error"].endswith(f"/dev/shm has 512 KiB; {FIX}")
    first = p.stdout.splitlines()[0]
    assert "status: failed" in first and FIX in first
    assert "Traceback" not in p.stdout + p.stderr
    left = cliserver.running_descendants()
    assert not left, [" ".join(c.cmdline())[:200] for c in left]
