"""scale re-measures an implausible point once: the point and its baseline get one more
repeat each, nothing else runs again."""

from scaleprobe.core.result_model import Experiment, RunResult
from scaleprobe.experiments import scale as X


def row(nproc, implausible=None, nnodes=None, base=None):
    point = {"nproc": nproc, **({"nnodes": nnodes} if nnodes else {})}
    n = nproc * (nnodes or 1)
    return {"nproc": n, "implausible": implausible, "experiment": "s",
            "is_base": n == 1 if base is None else base,
            "record": RunResult(experiment=Experiment(point=point))}


def test_implausible_point_is_measured_once_more(monkeypatch, tmp_path):
    """Catches a scale that prints an impossible speedup without a second look, or one that
    re-measures forever."""
    calls = []
    tables = [[row(1), row(2), row(4, "above 4 x 1.1")],
              [row(1), row(2), row(4, "above 4 x 1.1")]]
    monkeypatch.setattr("scaleprobe.experiments.sweep.run_sweep",
                        lambda spec, out, **kw: calls.append((spec["grid"], kw["repeats"])))
    views = X.ScaleViews(rows=lambda folder, sid: tables.pop(0))
    spec = {"sweep": {"id": "s", "kind": "scale", "repeats": 3},
            "base": {"model": "linear", "dist.strategy": "ddp"}, "grid": {"nproc": [1, 2, 4]}}
    rows = X.run_scale(spec, str(tmp_path), views, progress=False)
    assert calls == [({"nproc": [1, 2, 4]}, None), ({"nproc": [1, 4]}, 4)]
    assert rows[2]["implausible"]  # still implausible: stays marked, no third try
    assert tables == []


def test_plausible_points_are_not_measured_again(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr("scaleprobe.experiments.sweep.run_sweep",
                        lambda spec, out, **kw: calls.append(spec["grid"]))
    views = X.ScaleViews(rows=lambda folder, sid: [{"nproc": 2, "implausible": None}])
    spec = {"sweep": {"id": "s", "kind": "scale"}, "base": {"model": "linear"},
            "grid": {"nproc": [1, 2]}}
    X.run_scale(spec, str(tmp_path), views, progress=False, repeats=2)
    assert calls == [{"nproc": [1, 2]}]


def test_an_implausible_point_over_nodes_is_measured_by_its_own_axes(monkeypatch, tmp_path):
    """``scale --nnodes 1,2``: the point 2 nodes x 2 processes is re-measured as such (nproc 2,
    nnodes 2), not as a 4-process point on one node, which the grid never had."""
    calls = []
    tables = [[row(1, nnodes=1), row(2, nnodes=2, implausible="above 4 x 1.1")],
              [row(1, nnodes=1), row(2, nnodes=2)]]
    monkeypatch.setattr("scaleprobe.experiments.sweep.run_sweep",
                        lambda spec, out, **kw: calls.append((spec["grid"], kw["repeats"])))
    views = X.ScaleViews(rows=lambda folder, sid: tables.pop(0))
    spec = {"sweep": {"id": "s", "kind": "scale", "repeats": 1}, "base": {"model": "linear"},
            "grid": {"nproc": [1, 2], "nnodes": [1, 2]}}
    X.run_scale(spec, str(tmp_path), views, progress=False)
    assert calls[1] == ({"nproc": [1, 2], "nnodes": [1, 2]}, 2)


def test_without_a_1_process_point_the_baseline_measured_again_is_its_own(monkeypatch,
                                                                           tmp_path):
    """``scale --nproc 2 --nnodes 1,2``: an implausible 2 x 2 point is measured again beside
    the experiment's own baseline (2 processes on one node), not beside a 1-process point the
    grid never had."""
    calls = []
    tables = [[row(2, nnodes=1, base=True), row(2, nnodes=2, implausible="above 4/2 x 1.1")],
              [row(2, nnodes=1, base=True), row(2, nnodes=2)]]
    monkeypatch.setattr("scaleprobe.experiments.sweep.run_sweep",
                        lambda spec, out, **kw: calls.append((spec["grid"], kw["repeats"])))
    views = X.ScaleViews(rows=lambda folder, sid: tables.pop(0))
    spec = {"sweep": {"id": "s", "kind": "scale", "repeats": 1}, "base": {"model": "linear"},
            "grid": {"nproc": [2], "nnodes": [1, 2]}}
    X.run_scale(spec, str(tmp_path), views, progress=False)
    assert calls[1] == ({"nproc": [2], "nnodes": [1, 2]}, 2)
