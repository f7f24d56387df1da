"""`scaleprobe predict` and the comm command's validation, in-process (no workers)."""

import json

import pytest

from scaleprobe.cli import main
from scaleprobe.commands.predict import compute_from_result as _compute_from_result
from scaleprobe.results import RunResult


def compute_from_result(rec):
    return _compute_from_result(RunResult.from_dict(rec))


def _result(tmp_path, **metrics):
    rec = {"kind": "run", "config": {"model": {"name": "resnet18"}},
           "metrics": {"breakdown_s": {}, **metrics}, "comm": None}
    path = tmp_path / "result.json"
    path.write_text(json.dumps(rec))
    return rec, path


def test_compute_time_from_breakdown_or_step_minus_comm(tmp_path):
    rec, _ = _result(tmp_path, breakdown_s={"forward": 0.1, "backward": 0.2, "optimizer": 0.05,
                                            "comm": 0.3}, step_time_s={"median": 0.9})
    assert compute_from_result(rec)[0] == pytest.approx(0.35)
    rec["config"]["dist"] = {"strategy": "ddp"}
    rec["comm"] = {"exposed_s": 0.05}
    # the breakdown already moved DDP's exposed comm out of backward: subtracting it again
    # (as predict once did) under-counted compute by the exposed time
    assert compute_from_result(rec)[0] == pytest.approx(0.35)
    rec, _ = _result(tmp_path, breakdown_s={"forward": None}, step_time_s={"median": 0.9})
    rec["comm"] = {"exposed_s": 0.4}
    assert compute_from_result(rec)[0] == pytest.approx(0.5)


def test_predict_json_from_result_uses_param_count(tmp_path, capsys):
    _, path = _result(tmp_path, breakdown_s={"forward": 0.1, "backward": 0.2, "optimizer": 0.1},
                      param_count=1_000_000)
    assert main(["predict", "--from", str(path), "--nproc", "4", "--link", "1gbit",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["inputs"]["params"] == 1_000_000
    preds = {p["strategy"]: p for p in out["predictions"]}
    assert set(preds) == {"allreduce", "ps", "localsgd", "fsdp"}
    # 4e6 bytes, n = 4, 1 Gbit/s = 1.25e8 B/s, 50 us per hop
    assert preds["allreduce"]["comm_s"] == pytest.approx(6 * 50e-6 + 1.5 * 4e6 / 1.25e8)
    assert preds["fsdp"]["comm_s"] == pytest.approx(9 * 50e-6 + 2.25 * 4e6 / 1.25e8)
    assert preds["allreduce"]["efficiency"] == pytest.approx(0.4 / (0.4 + 0.0483))
    assert preds["localsgd"]["average_every"] == 4


def test_predict_table(capsys):
    assert main(["predict", "--params", "25e6", "--nproc", "2", "--nnodes", "2",
                 "--compute-time", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "10gbit" in out and "allreduce" in out and "Gbit/s" in out


@pytest.mark.parametrize("argv,msg", [
    (["predict", "--nproc", "2"], "give the model size"),
    (["predict", "--params", "1e6", "--nproc", "2", "--link", "fast"], "unknown link"),
    (["predict", "--params", "1e6", "--nproc", "0"], "at least 1"),
    (["predict", "--params", "1e6", "--nproc", "2", "--from", "/nonexistent.json"],
     "not found"),
    (["predict", "--params", "1e6", "--nproc", "2", "--compute-time", "-1"], "positive"),
    (["comm", "--nproc", "1"], "at least 2 processes"),
    (["comm", "--sizes", "1Q"], "cannot read message size"),
    (["comm", "--ops", "allgather"], "did you mean all_gather"),
    (["comm", "--nnodes", "2", "--nproc", "1"], "rdzv-endpoint"),
    (["comm", "--nnodes", "2", "--executor", "slurm", "--rdzv-endpoint", "h:1"],
     "--executor slurm places the hosts itself"),
    (["comm", "--partition", "gpu"], "--partition is a Slurm option"),
])
def test_user_mistakes_are_one_line(argv, msg, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1


def _run_comm(link="loopback", world=2):
    return {"link": link, "world_size": world, "strategy": "ddp", "exposed_s": 0.025,
            "transfer_s": 0.0004, "sync_overhead_s": 0.0246, "standalone_s": 0.0004}


def test_run_is_compared_only_with_the_prediction_for_its_own_link():
    """Catches a network table that set a run measured on loopback against a 1gbit
    prediction (0.13x): a run is compared only on its own link and world size."""
    from scaleprobe.comm.model import predict_for_run
    from scaleprobe.commands.predict import measured_line

    loop = [predict_for_run(s, 2, 1, 266920, 0.05, "loopback") for s in ("ddp", "ps")]
    line = measured_line(_run_comm(), loop)
    assert "standalone collective 0.4 ms" in line and "allreduce prediction" in line
    assert "sync overhead 24.6 ms (not the network)" in line
    gbit = [predict_for_run("ddp", 2, 1, 266920, 0.05, "1gbit")]
    line = measured_line(_run_comm(), gbit)
    assert line.startswith("not compared") and "measured on loopback" in line
    assert "not compared" in measured_line(_run_comm(world=4), loop)
