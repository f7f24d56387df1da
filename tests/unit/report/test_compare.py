"""compare: noise-aware verdicts, sides given as files or folders, sweeps by point."""

from __future__ import annotations

import argparse
import json

import pytest

from scaleprobe.commands import compare as cmd
from scaleprobe.errors import ConfigError
from scaleprobe.report.compare import compare_paths, compare_runs, to_markdown, verdict
from tests.unit.report.factory import run, sweep_point, write_results


@pytest.mark.parametrize(("a_s", "b_s", "ci", "expected"), [
    (0.100, 0.101, 0.01, "no change"),   # 1% inside 2% spread
    (0.100, 0.080, 0.01, "faster"),      # -20%
    (0.100, 0.130, 0.01, "slower"),      # +30%
    (0.100, 0.115, 0.08, "no change"),   # +15% inside a 16% spread
    (0.100, 0.1015, 0.001, "no change"),  # 1.5% below the 2% floor
    (0.100, 0.103, 0.001, "slower"),     # 3% above the floor
])
def test_verdict_against_spread(a_s, b_s, ci, expected):
    pair = compare_runs(run("a", step_s=a_s, rel_ci=ci), run("b", step_s=b_s, rel_ci=ci))
    assert pair.verdict == expected
    assert pair.basis == "step median"
    assert pair.delta_rel == pytest.approx(b_s / a_s - 1)


def test_verdict_rule_directly():
    assert verdict(-0.05, 0.01, 0.02) == ("faster", 0.03)
    assert verdict(0.01, None, 0.01) == ("inconclusive", None)
    assert verdict(None, 0.01, 0.01)[0] == "not comparable"


def test_different_global_batch_compares_time_per_sample():
    pair = compare_runs(run("a", batch=32, step_s=0.1), run("b", batch=64, step_s=0.15))
    assert pair.basis == "time per sample"
    assert pair.verdict == "faster"
    assert pair.delta_rel == pytest.approx(320 / (64 / 0.15) - 1)


def test_failed_side_is_not_comparable():
    pair = compare_runs(run("a"), run("b", status="oom", error="oom"))
    assert pair.verdict.startswith("not comparable") and "out of memory" in pair.verdict


def test_sides_as_result_json_run_folder_and_jsonl(tmp_path):
    a_dir = tmp_path / "a" / "run-a"
    a_dir.mkdir(parents=True)
    (a_dir / "result.json").write_text(json.dumps(run("a", step_s=0.1)))
    b_jsonl = write_results(tmp_path / "b", [run("b", step_s=0.07)])
    cmp = compare_paths(a_dir, b_jsonl)
    assert cmp.pairs[0].verdict == "faster"
    cmp2 = compare_paths(a_dir / "result.json", tmp_path / "b")
    assert cmp2.pairs[0].verdict == "faster"
    md = to_markdown(cmp)
    assert "| Metric | A | B | Change |" in md and "faster" in md
    assert "| samples/s | 320 | 457 | +42.9% |" in md


def test_sweeps_matched_by_point(tmp_path):
    def sweep(scale: float) -> list[dict]:
        return [run(f"b{bs}", batch=bs, step_s=0.01 * bs * scale,
                    experiment=sweep_point("s", batch_size=bs)) for bs in (16, 32)]
    a = write_results(tmp_path / "a", sweep(1.0))
    b_recs = sweep(1.0)
    b_recs[1] = run("b32", batch=32, step_s=0.5, experiment=sweep_point("s", batch_size=32))
    b_recs.append(run("b64", batch=64, experiment=sweep_point("s", batch_size=64)))
    b = write_results(tmp_path / "b", b_recs)
    cmp = compare_paths(a, b)
    assert [p.label for p in cmp.pairs] == ["batch_size=16", "batch_size=32"]
    assert [p.verdict for p in cmp.pairs] == ["no change", "slower"]
    assert cmp.only_b == ["batch_size=64"]
    md = to_markdown(cmp)
    assert "| batch_size=32 |" in md and "Only in B: batch_size=64" in md


def test_many_plain_runs_are_refused(tmp_path):
    a = write_results(tmp_path / "a", [run("x"), run("y")])
    b = write_results(tmp_path / "b", [run("z")])
    with pytest.raises(ConfigError, match="not points of one sweep"):
        compare_paths(a, b)
    with pytest.raises(ConfigError, match="no such file"):
        compare_paths(tmp_path / "nope", b)


def test_command_prints_and_writes_markdown(tmp_path, capsys):
    a = write_results(tmp_path / "a", [run("a", step_s=0.1)])
    b = write_results(tmp_path / "b", [run("b", step_s=0.1)])
    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    md = tmp_path / "out" / "cmp.md"
    assert cmd.run(parser.parse_args([str(a), str(b), "--md", str(md)])) == 0
    out = capsys.readouterr().out
    assert "no change" in out and "samples/s" in out
    assert "no change" in md.read_text()


def test_two_sweeps_in_one_folder_are_kept_apart(tmp_path):
    def side(step_b: float) -> list[dict]:
        return [run("x16", batch=16, experiment=sweep_point("x", batch_size=16)),
                run("y16", batch=16, step_s=step_b, experiment=sweep_point("y", batch_size=16))]

    cmp = compare_paths(write_results(tmp_path / "a", side(0.1)),
                        write_results(tmp_path / "b", side(0.2)))
    verdicts = sorted(p.verdict for p in cmp.pairs)
    assert verdicts == ["no change", "slower"]  # y's point against y's, x's against x's
    renamed = compare_paths(write_results(tmp_path / "c", [
        run("z16", batch=16, experiment=sweep_point("z", batch_size=16))]),
        write_results(tmp_path / "d", [
            run("w16", batch=16, experiment=sweep_point("w", batch_size=16)),
            run("w32", batch=32, experiment=sweep_point("w", batch_size=32))]))
    assert len(renamed.pairs) == 1 and renamed.only_b == ["batch_size=32"]
