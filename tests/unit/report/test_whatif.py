"""The report's What if section (report/whatif.py): predicted speedup per link and device
count from a folder's one-rank run, and how its predictions held against measured runs."""

from scaleprobe.report.whatif import whatif_section
from tests.unit.comm.test_check import _t, measured
from tests.unit.comm.test_stepmodel import THIRDS, one_rank_run


def test_what_if_from_a_one_rank_run_and_how_it_held(tmp_path):
    """The hand-computed case of test_stepmodel: on the measured link (0.4 Gbit/s, 20 ms per
    bucket) two devices take 85 ms a step against 45 ms: speedup 2 x 45 / 85 = 1.06, 53%.
    The measured 2-rank run took 85 ms: predicted / measured 1.00."""
    base = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS, started=_t(0))
    run = measured("two", _t(1))
    s = whatif_section([base, run])
    assert s is not None and s.title == "What if"
    table = next(b for b in s.blocks if getattr(b, "headers", None)
                 and b.headers[0] == "Link")
    rows = {r[0]: r for r in table.rows}
    assert list(rows) == ["slow=0.4,0", "1gbit", "10gbit", "100gbit"]
    assert rows["slow=0.4,0"][2] == "1.06 [1.06, 1.06] (53%)"
    assert rows["10gbit"][1].endswith("(nominal)") and rows["slow=0.4,0"][1].endswith("(given)")
    held = next(b for b in s.blocks if getattr(b, "headers", None)
                and b.headers[0] == "Run")
    (row,) = held.rows
    assert row[-1].startswith("1.00")


def test_no_one_rank_run_no_section(tmp_path):
    assert whatif_section([measured("two", _t(1))]) is None
