"""`scaleprobe colocate` with no verdict (a job not measured alone and together): exit 1, the
table on stdout, and the reason in one line on stderr."""

import argparse

from scaleprobe.commands import colocate
from scaleprobe.core.experiment_records import ColocateRecord


def _args(tmp_path):
    return argparse.Namespace(spec=str(tmp_path / "s.toml"), out=str(tmp_path / "o"),
                              placement="shared", repeats=2, progress=False, opt_set=[])


def test_no_verdict_is_exit_1_with_its_reason_on_stderr(monkeypatch, tmp_path, capsys):
    why = ("no samples/s alone and together for: cnn-b32; cnn-b32 repeat 1 left out: only\n"
           "57% of its timed window had every job running (below 60%)")
    rec = ColocateRecord(verdict="not measured", evidence=why)
    monkeypatch.setattr("scaleprobe.experiments.colocate.run_colocate", lambda *a, **k: rec)
    monkeypatch.setattr(colocate, "render_colocate", lambda r: "| job | table |")
    monkeypatch.setattr(colocate.sweep_command, "terminate_as_interrupt", lambda: None)
    assert colocate.run(_args(tmp_path)) == 1
    out, err = capsys.readouterr()
    assert out.strip() == "| job | table |"
    assert err.splitlines() == [
        "scaleprobe: colocate: not measured: no samples/s alone and together for: cnn-b32; "
        "cnn-b32 repeat 1 left out: only 57% of its timed window had every job running "
        "(below 60%)"]
    rec.verdict, rec.evidence = "slower together", "x"
    assert colocate.run(_args(tmp_path)) == 0 and capsys.readouterr().err == ""
