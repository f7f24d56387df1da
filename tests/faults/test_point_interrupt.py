"""Ctrl+C reaching a point process at the worst moment, inside an import, still leaves an
"interrupted" record and exit status 130.

The signal is placed deterministically: a ``sitecustomize`` module on the point's
PYTHONPATH wraps ``__import__`` and sends the process SIGINT when the named module is first
imported, so the KeyboardInterrupt is raised inside the import of a library that imports it.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from scaleprobe.config import runconfig as C
from scaleprobe.core import results as res

from ..conftest import ROOT

pytestmark = pytest.mark.timeout(120)

HOOK = """
import builtins, os, signal
_import, _target, _fired = builtins.__import__, os.environ["INTERRUPT_AT_IMPORT"], []
def _hooked(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and name == _target and not _fired:
        _fired.append(name)
        os.kill(os.getpid(), signal.SIGINT)
    return _import(name, globals, locals, fromlist, level)
builtins.__import__ = _hooked
"""


def _point(tmp_path, module: str) -> tuple[subprocess.CompletedProcess, dict | None, float]:
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(HOOK)
    out = tmp_path / "out"
    cfg = C.build({"model": "linear", "loader": "naive", "warmup_steps": 1, "steps": 10**6,
                   "out": str(out), "progress": False})
    exp = {"id": "s", "kind": "sweep", "point": {}, "attempt": "a1"}
    spec = tmp_path / "point.json"
    spec.write_text(json.dumps({"config": cfg.to_dict(), "experiment": exp}))
    env = {**os.environ, "INTERRUPT_AT_IMPORT": module, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "hook"), str(ROOT / "src"),
                                          os.environ.get("PYTHONPATH", "")])}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "scaleprobe.experiments.point", str(spec)],
                          capture_output=True, text=True, timeout=90, env=env)
    recs = res.read_jsonl(out / "results.jsonl", warn=False) if out.exists() else []
    return proc, (recs[-1] if recs else None), time.monotonic() - t0


# numpy.linalg: imported lazily by torch._dynamo while torchvision is being imported; a
# KeyboardInterrupt there left numpy half-imported, the result's environment (which imports
# torchvision again) raised RecursionError, and the interrupted point was recorded "failed".
# scaleprobe.data.digits: imported while the run builds its dataset, after the training
# imports (it is always imported there; scikit-learn only when the digits are not cached yet).
@pytest.mark.parametrize("module", ["numpy.linalg", "scaleprobe.data.digits"])
def test_interrupt_inside_an_import_is_recorded_interrupted(tmp_path, module):
    """Bug caught: an interrupted point recorded as failed (with an unrelated error), or a
    point that ignored the interrupt and trained on (it then never ends: the timeout)."""
    proc, rec, wall_s = _point(tmp_path, module)
    assert "sitecustomize" not in proc.stderr, proc.stderr[-2000:]
    assert rec is not None, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (rec["status"], rec["error"]) == ("interrupted", "interrupted by the user (Ctrl+C)"), (
        proc.stdout[-2000:] + proc.stderr[-2000:])
    assert proc.returncode == 130
    assert rec["experiment"]["attempt"] == "a1"
    print(f"{module}: stopped {wall_s:.1f} s after the start")
