"""What an interrupted experiment says it kept (commands/interrupted.py)."""

from scaleprobe.commands.interrupted import say_interrupted
from scaleprobe.config import runconfig as C
from scaleprobe.core import results as res


def _rec(run_id, status, exp_id=None):
    cfg = C.build({})
    rec = res.new_run_record(cfg.to_dict(), run_id, "digits_cnn-digits-b64", cfg.key())
    rec["status"] = status
    if exp_id:
        rec["experiment"] = {"id": exp_id, "point": {"nproc": 1}, "repeat": 0}
    return rec


def test_an_interrupted_scale_counts_its_own_runs_not_the_folders(tmp_path, capsys):
    """`scale --nproc 1,2` into scaleprobe-out beside the demo and plain runs, Ctrl+C after
    3 of its runs. Bug caught: "Kept 16 finished runs in scaleprobe-out (demo-batch-size: 4,
    demo-loader-transform: 4, digits_cnn-digits-b64: 2, ...)"."""
    for i, (status, exp) in enumerate([("ok", "scale-digits_cnn-ddp"), ("ok", "scale-digits_cnn-ddp"),
                                       ("ok", "scale-digits_cnn-ddp"), ("interrupted", "scale-digits_cnn-ddp"),
                                       ("ok", "demo-batch-size"), ("ok", None)]):
        res.append_jsonl(tmp_path / "results.jsonl", _rec(f"r{i}", status, exp))
    assert say_interrupted(tmp_path, ids=("scale-digits_cnn-ddp",)) == 130
    err = capsys.readouterr().err
    assert "Kept 3 finished runs in" in err and "(scale-digits_cnn-ddp: 3)" in err, err
    say_interrupted(tmp_path)  # the demo's own folder: every run in it
    assert "Kept 5 finished runs" in capsys.readouterr().err
