"""`scaleprobe predict` and the comm command's validation, in-process (no workers)."""

import json

import pytest

from scaleprobe.cli import main


def test_predict_json_closed_form(capsys):
    assert main(["predict", "--params", "1e6", "--nproc", "4", "--link", "1gbit",
                 "--compute-time", "0.4", "--json"]) == 0
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
    (["predict", "--nproc", "2", "--from", "/nonexistent.json"], "no such file"),
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
