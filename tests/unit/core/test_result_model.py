"""The typed result model (results.py): every record reads and writes the JSON schema without
losing a figure, old and damaged files read as "not measured", and a result is made by one
pure function (assemble.build_result)."""

import copy
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scaleprobe.config import runconfig as C
from scaleprobe.config.sections import DataConfig, RunConfig
from scaleprobe.core import results as R
from scaleprobe.core.experiment_records import CommBenchRecord, Other, ParityRecord
from scaleprobe.core.rank_record import RankRecord
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.run_metrics import BREAKDOWN_PHASES
from scaleprobe.core.run_parts import Comm
from scaleprobe.run.assemble import build_result
from tests.unit.run.test_assemble import raw


def _filled_run() -> dict:
    """A run record with every block filled, plus a task metric and a field this version does
    not know (a newer file): both must survive a read and a write."""
    cfg = C.build({"strategy": "ddp", "nproc": 2, "link": "1gbit"})
    rec = R.new_run_record(cfg.to_dict(), "id", "n", "k")
    rec.update(status="ok", batch={"per_device": 4, "per_process": 4, "global": 8,
                                   "world_size": 2, "training_ranks": 2},
               audit={"ok": False, "duplicate_samples": 8, "missing_samples": 0,
                      "same_order_across_epochs": False, "unique_fraction": 0.5,
                      "detail": "x", "world_size": 2},
               experiment={"id": "sw", "kind": "sweep", "point": {"batch_size": 4},
                           "repeat": 1},
               future_block={"a": [1, 2]})
    rec["metrics"].update(samples_per_s=80.0, map50=0.42,
                          step_time_s={"median": 0.1, "p95": 0.12, "mean": 0.1, "min": 0.09,
                                       "max": 0.2, "n": 10, "rel_ci": 0.02})
    rec["metrics"]["peak_mem_bytes"]["host"] = 123
    return rec


def test_a_run_record_reads_and_writes_back_unchanged():
    """Bug caught: a field dropped or renamed on the way through the model (``global`` is a
    Python keyword; a task's own metric or a newer file's block is not declared)."""
    rec = _filled_run()
    back = RunResult.from_dict(copy.deepcopy(rec)).to_dict()
    assert back == rec
    r = RunResult.from_dict(rec)
    assert r.batch.global_ == 8 and r.metrics.step_time_s.median == 0.1
    assert r.metrics.extra == {"map50": 0.42} and r.extra["future_block"] == {"a": [1, 2]}
    assert r.audit.unique_fraction == 0.5 and r.experiment.repeat == 1
    assert json.loads(json.dumps(back)) == rec  # plain JSON, nothing else


def test_schema_1_and_damaged_records_read_as_not_measured():
    """Bug caught: a report that raises on an old file (no load, invariants, comm split) or
    on a damaged block (a list where an object belongs) instead of reading it as missing."""
    old = {"kind": "run", "schema": 1, "status": "ok", "metrics": {"samples_per_s": 5.0}}
    r = RunResult.from_dict(old)
    assert r.schema == 1 and r.load is None and r.invariants is None
    assert r.metrics.samples_per_s == 5.0 and r.metrics.step_time_s is None
    assert r.metrics.breakdown_s.phases() == dict.fromkeys(BREAKDOWN_PHASES)
    bad = RunResult.from_dict({"kind": "run", "metrics": [1, 2], "batch": "x",
                                 "ranks": {"0": 1}, "comm": 3})
    assert bad.metrics.samples_per_s is None and bad.batch.global_ is None
    assert bad.ranks == [] and bad.comm is None
    with pytest.raises(TypeError):
        RunResult.from_dict([1, 2])


def test_the_config_reads_typed_and_an_older_or_damaged_one_as_it_was_written():
    """Bug caught: an older record's missing key read as today's default (a run before
    ``data.loader`` existed is not a naive-loader run), a key of a newer version or a damaged
    value dropped on the way back to disk."""
    rec = _filled_run()
    r = RunResult.from_dict(rec)
    assert isinstance(r.config, RunConfig) and r.config.dist.nproc == 2
    assert r.cfg("dist.link") == "1gbit" and r.cfg("dist")["strategy"] == "ddp"
    old = copy.deepcopy(rec)
    del old["config"]["data"]["loader"], old["config"]["script"]
    old["config"]["dist"].update(nproc="two", future_knob=7)
    r = RunResult.from_dict(copy.deepcopy(old))
    assert r.cfg("data.loader") is None and r.cfg("script.path", "-") == "-"
    assert r.config.data.loader == DataConfig.loader  # typed: what this version runs
    assert r.cfg("dist.nproc") == "two" and r.config.dist.nproc == 1
    assert r.cfg("dist.future_knob") == 7 and r.to_dict() == old
    r.config = dataclasses.replace(r.config, name="renamed")  # changed: written as typed
    assert r.cfg("name") == "renamed" and r.to_dict()["config"] == r.config.to_dict()
    assert RunResult.from_dict({"kind": "run", "config": {}}).config is None
    assert RunResult().to_dict()["config"] == {} and RunResult().to_dict()["env"] == {}


def test_a_record_is_read_typed_in_a_process_that_imported_only_the_record():
    """Bug caught: the config's reader installed only where something had imported
    config/runconfig.py (a test reading a result.json raised AttributeError: no codec)."""
    code = ("from scaleprobe.core.result_model import RunResult as R; "
            "print(R.from_dict({'config': {'dist': {'nproc': 3}}}).config.dist.nproc)")
    src = str(Path(C.__file__).parents[2])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": src}, check=True)
    assert out.stdout.strip() == "3"


def test_records_by_kind_and_unknown_kinds_kept():
    assert isinstance(R.typed({"kind": "run"}), RunResult)
    assert isinstance(R.typed({"kind": "parity"}), ParityRecord)
    assert isinstance(R.typed({"kind": "comm"}), CommBenchRecord)
    other = {"kind": "future-kind", "ops": {"all_reduce": [1.0]}}
    assert isinstance(R.typed(other), Other) and R.typed(other).to_dict() == other


def test_a_parity_record_is_written_through_its_type():
    """Bug caught: a parity figure written outside its record type (undeclared, untyped) or
    lost on a read and write."""
    from scaleprobe.experiments.parity import parity_record
    from tests.unit.report.factory import run

    ones = [run(f"a{i}", accuracy=0.80 + i / 100, nproc=1) for i in range(3)]
    twos = [run(f"b{i}", accuracy=0.81 + i / 100, nproc=2) for i in range(3)]
    for r in ones + twos:
        r["config"]["train"]["global_batch"] = 8
        r["metrics"]["steps_done"] = 20  # both sides saw the same samples: like for like
    rec = parity_record([RunResult.from_dict(r) for r in ones],
                        [RunResult.from_dict(r) for r in twos], "par", 0.01).to_dict()
    assert rec["accuracy_1"] == pytest.approx(0.81)
    typed = ParityRecord.from_dict(rec)
    assert typed.extra == {}, f"undeclared: {sorted(typed.extra)}"
    assert typed.to_dict() == rec


def test_build_result_is_pure_and_repeatable(tmp_path, monkeypatch):
    """Bug caught: assembling a result that writes files, reads the clock or mutates the
    ranks' records (a second call on the same input would then differ)."""
    monkeypatch.chdir(tmp_path)
    cfg = C.build({"strategy": "ddp", "nproc": 2, "link": "1gbit", "out": str(tmp_path / "o")})
    ranks = [RankRecord.from_dict(raw(0, indices=[[0, 1, 2, 3]])),
             RankRecord.from_dict(raw(1, indices=[[4, 5, 6, 7]]))]
    before = [r.to_dict() for r in ranks]

    def once():
        base = RunResult.from_dict(R.new_run_record(cfg.to_dict(), "r", "r", "k"))
        base.status, base.started_at = "ok", "t"
        return build_result(base, cfg, ranks, {"cpu_util_pct": 50.0}, None).to_dict()

    a, b = once(), once()
    assert a == b
    assert [r.to_dict() for r in ranks] == before
    assert list(tmp_path.iterdir()) == []  # nothing written
    assert a["metrics"]["samples_per_s"] == pytest.approx(80.0)  # 2 ranks x 4 / 0.1 s
    assert a["batch"]["global"] == 8 and a["audit"]["ok"] is True
    assert a["null_reasons"]["outside_cpu_s"].startswith("not measured")


@pytest.mark.parametrize("status", ["absent", None, 5])
def test_a_run_record_without_a_readable_status_is_unknown_not_failed(status):
    rec = _filled_run()
    if status == "absent":
        del rec["status"]
    else:
        rec["status"] = status
    r = RunResult.from_dict(rec)
    assert r.status == "unknown" and r.status_text == "unknown (older record without a status)"
    assert RunResult.from_dict(_filled_run()).status == "ok"
    assert RunResult().status == "failed"  # a run being written is failed until it ends


def test_a_rank_record_crosses_as_json_with_its_parts_typed():
    """wrap's ranks hand their record over as JSON (wrap/handoff.py). Bug it guards: a part
    read back as a plain dict (assemble then fails on ``.flops_per_step``), or a rank-only
    comm field (the standalone collective) leaking into the run's ``comm`` block, or written
    null where the rank had none."""
    rec = RankRecord.from_dict({
        **raw(0), "clock_window": None,  # a tuple comes back a list: not what this checks
        "comm": {"method": "hook", "models_timed": 1, "transfer_reason": "none under wrap",
                 "transfer": {"per_step_s": 0.004, "method": "timed"}, "newer": 3},
        "flops": {"flops_per_step": 2e9, "method": "count",
                  "peak": {"flops_per_s": 1e12, "dtype": "fp32"}},
        "compile": {"method": "callbacks", "reason": None, "events": [],
                    "eager": {"fwd_bwd_s": [0.1, 0.2], "reason": None}},
        "target": {"metric": "accuracy", "value": 0.9,
                   "points": [{"step": 5, "train_wall_s": 1.0, "eval_s": 0.1, "value": 0.5}]},
        "observed": {"traces": ["t.json"]},
        "memory_pass": {"bytes": 1024, "warm_s_per_byte": 1e-9}})
    back = RankRecord.from_dict(json.loads(json.dumps(rec.to_dict())))
    assert back == rec
    assert back.flops.peak.flops_per_s == 1e12 and back.compile.eager.fwd_bwd_s == [0.1, 0.2]
    assert back.target.points[0].value == 0.5 and back.memory_pass.bytes == 1024
    assert back.observed.to_dict() == {"traces": ["t.json"]}  # no null tensorboard, top_ops
    run = back.comm.run_part().to_dict()
    assert "transfer" not in run and run["method"] == "hook"
    assert (run["models_timed"], run["transfer_reason"], run["newer"]) == (1, "none under wrap", 3)
    assert Comm.from_dict(run).extra == {"models_timed": 1, "transfer_reason": "none under wrap",
                                           "newer": 3}


@pytest.mark.parametrize(("dataset", "loader", "workers"), [
    ("synthetic", "pipelined", 0), ("tokens-synthetic", "pipelined", 0),
    ("synthetic-loader", "pipelined", 3), ("digits", "naive", 0)])
def test_loader_workers_are_those_that_ran(dataset, loader, workers):
    """A dataset made once on the device has no loader: --workers 3 (or the default 2)
    started no process, and the report's CPU demand, oversubscription and advice must not
    count them."""
    from tests.unit.report.factory import run

    rec = RunResult.from_dict(run("x", dataset=dataset, loader=loader, workers=3))
    assert rec.loader_workers == workers
