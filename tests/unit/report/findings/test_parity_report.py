"""The report's accuracy parity: the mean accuracies beside the difference are over the seeds
the difference pairs, the claim counts those pairs, and the load of its runs rides on it."""

import pytest

from scaleprobe.core.experiment_records import ParityRecord
from scaleprobe.report.findings.verdicts_experiments import parity_means, parity_verdict
from scaleprobe.report.render.sections_exp import parity_section
from tests.unit.report.factory import loaded, run


def _record(**over):
    """Seed 1 failed on 2 processes; the means as a record of before wrote them, over every
    seed with a value on its own side (0.9233 on 1 process)."""
    rec = {"kind": "parity", "schema": 1, "experiment": {"id": "par-x", "kind": "parity"},
           "nproc": 2, "repeats": 3, "seeds": [0, 1, 2], "global_batch": 64,
           "samples_seen_repeats": [[6400, 6400], [6400, None], [6400, 6400]],
           "accuracies_1": [0.90, 0.96, 0.91], "accuracies_n": [0.895, None, 0.905],
           "accuracy_1": (0.90 + 0.96 + 0.91) / 3, "accuracy_n": 0.90,
           "difference": -0.005,
           "difference_interval": {"estimate": -0.005, "lo": -0.006, "hi": -0.004},
           "tolerance": 0.02, "verdict": "parity holds", "verdict_text": "...",
           "runs": ["a0", "b0", "a1", "b1", "a2", "b2"]}
    rec.update(over)
    return ParityRecord.from_dict(rec)


def test_the_means_beside_the_difference_are_over_the_paired_seeds():
    """Bug caught: "accuracy 0.923 on 1 process vs 0.900 on 2" (a 0.023 gap, outside the
    +/-0.02) beside "difference -0.0050 ... parity holds": the 1-process mean took seed 1,
    whose 2-process run failed. Both means now stand on the paired seeds, which are named."""
    a1, an, paired, left = parity_means(_record())
    assert (a1, an) == (pytest.approx(0.905), pytest.approx(0.900))
    assert paired == [0, 2] and left == [(1, "no accuracy on 2 processes")]
    v = parity_verdict(_record())
    assert "accuracy 0.905 on 1 process vs 0.900 on 2" in v.number
    assert "0.923" not in v.number
    assert "means over the 2 paired seeds" in v.number and "seed 1 left out" in v.number
    # the claim counts the pairs, not the repeats
    assert "2 repeats" in v.interval and "3 repeats" not in v.interval


def test_one_pair_says_one_repeat_not_the_records_repeats():
    """Bug caught: the claim was given n = repeats (3) where only one seed had a partner,
    so an interval over one pair decided a verdict."""
    rec = _record(accuracies_n=[0.895, None, None],
                  samples_seen_repeats=[[6400, 6400], [6400, None], [6400, None]])
    v = parity_verdict(rec)
    assert "inconclusive (1 repeat)" in v.claim


def test_the_section_shows_the_paired_means_and_counts_pairs():
    s = parity_section([_record()])
    table = s.blocks[0]
    row = dict(zip(table.headers, table.rows[0], strict=True))
    assert row["Accuracy (1 process)"] == "0.905" and row["Accuracy (N)"] == "0.900"
    assert row["Paired seeds"] == "2 of 3"
    text = "\n".join(getattr(b, "text", "") for b in s.blocks)
    assert "seed 1 left out: no accuracy on 2 processes" in text


def test_a_run_under_load_puts_the_caveat_on_the_parity_verdict():
    runs = {}
    for i, rid in enumerate(["a0", "b0", "a2", "b2"]):
        r = run(rid, accuracy=0.9)
        r["run_id"] = rid
        if i == 1:
            r["load"] = {"flag": True, "machine_cores": 4}
        runs[rid] = loaded(r)
    v = parity_verdict(_record(), runs)
    assert "measured under load: " in v.number and "(1 of 4 source runs)" in v.number
    s = parity_section([_record(), *runs.values()])
    row = dict(zip(s.blocks[0].headers, s.blocks[0].rows[0], strict=True))
    assert row["Difference"].endswith("under load")
