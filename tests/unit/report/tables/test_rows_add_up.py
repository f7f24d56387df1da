"""Every table row adds up: each row is built from one basis, the timed
window of the same runs, so samples/s x epoch time = samples per epoch (within 1%: the cells
are rounded), the slowdowns by samples/s and by epoch time agree, and the speedup column is
the ratio of the samples/s columns shown. The tables of a demo-like batch sweep, a scale, a
colocation and a language-model run are walked cell by cell: a future column that does not
multiply out fails here. Every record is built by hand; nothing trains.

The records' epoch times are deliberately off the window's basis (a measured 10.0 s or 99.0 s
epoch, the median step's projection): a row that showed them would not add up."""

from __future__ import annotations

import re

import pytest

from scaleprobe.core.result_model import RunResult
from tests.unit.report.factory import run, scale_point, sweep_point, typed_api

TOL = 0.01  # the cells' rounding: a rate to 3 figures, a time to 3


def cell_number(cell: str) -> float:
    """The first number of a cell: ``~1,234.5 s`` -> 1234.5, ``82.3 ms`` -> 0.0823."""
    m = re.search(r"(-?[\d,]+(?:\.\d+)?)\s*(ms|s|x)?", cell)
    assert m, cell
    v = float(m.group(1).replace(",", ""))
    return v / 1000 if m.group(2) == "ms" else v


def _with_epoch(rec: dict, samples: int, epoch_s: float = 10.0) -> dict:
    """``samples`` per epoch (steps per epoch x the global batch); the record's own epoch
    time (measured, not projected) set to ``epoch_s``, off the window's basis."""
    g = rec["batch"]["global"]
    assert samples % g == 0
    rec["metrics"]["steps_per_epoch"] = samples // g
    rec["metrics"]["epoch_time_s"] = epoch_s
    rec["metrics"]["epoch_time_projected"] = False
    return rec


def _demo_batch(repeats: int) -> list[dict]:
    """A demo-like batch sweep, 3 batch sizes, noisy samples/s per repeat."""
    noise = [1.0, 1.07, 0.94, 1.03][:repeats]
    recs = []
    for j, (bs, sps) in enumerate(((32, 310.0), (64, 555.0), (128, 705.0))):
        for i, k in enumerate(noise):
            # the noise grows with the batch size: the paired ratios are not the ratio of
            # the medians, so a paired figure in a column a reader divides would show
            recs.append(_with_epoch(run(f"b{bs}r{i}", batch=bs, sps=sps * k ** (1 + 2 * j),
                                        step_s=0.05,
                                        experiment=sweep_point("demo-batch-size", i,
                                                               batch_size=bs)), 2048))
    return recs


@pytest.mark.parametrize("repeats", [1, 2, 3, 4])
def test_the_batch_tables_rows_multiply_out(repeats):
    """Samples/s x Epoch time = 2,048 samples per epoch in every row of the report's, sweep.md's
    and the terminal's batch table, for odd and even repeats (an even count's median of
    samples/s is the mean of the middle two; the epoch beside it must follow it)."""
    from scaleprobe.report.tables.batch import batch_table as _table
    from scaleprobe.report.tables.batch import batch_table_parts as _parts

    rows = typed_api(_table)(_demo_batch(repeats))
    headers, cells = typed_api(_parts)(rows)
    sps, ep = headers.index("Samples/s"), headers.index("Epoch time")
    growth = ep + 1  # the Growth beside the epoch time
    assert headers[growth] == "Growth"
    assert len(cells) == 3
    for c in cells:
        assert c[ep].startswith("~"), c  # projected from the window: said so
        assert cell_number(c[sps]) * cell_number(c[ep].lstrip("~")) == \
            pytest.approx(2048, rel=TOL), c
    for prev, c in zip(cells, cells[1:], strict=False):
        # the Growth cell opens with the ratio of the two epoch cells (a paired estimate,
        # where it prints otherwise, follows under its own name)
        ratio = cell_number(c[ep].lstrip("~")) / cell_number(prev[ep].lstrip("~")) - 1
        assert cell_number(c[growth]) / 100 == pytest.approx(ratio, abs=0.006), c
        assert ";" not in c[growth] or "; paired " in c[growth]


def test_the_sweep_points_table_multiplies_out():
    from scaleprobe.report.render.sweep_tables import points_table

    recs = [RunResult.from_dict(r) for r in _demo_batch(1)]
    table = points_table(recs, [], ["batch_size"])
    h = table["headers"]
    for row in table["rows"]:
        sps, ep = row[h.index("samples/s")], row[h.index("epoch time")]
        assert ep.startswith("~")
        assert cell_number(sps) * cell_number(ep.lstrip("~")) == pytest.approx(2048, rel=TOL)


def _scale(noise: list[float]) -> list[dict]:
    recs = []
    for i, k in enumerate(noise):
        for n, sps in ((1, 300.0), (2, 470.0 * k)):
            recs.append(_with_epoch(run(f"n{n}r{i}", strategy="ddp", nproc=n, sps=sps * (1 + i / 50),
                                        threads=1, experiment={**scale_point("sc", n),
                                                               "repeat": i}), 4096))
    return recs


@pytest.mark.parametrize("noise", [[1.0], [0.8, 1.3], [1.0, 0.7, 1.25]])
def test_the_scale_tables_speedup_is_the_ratio_of_its_samples_per_s_column(noise):
    """The Speedup column = the row's Samples/s / the baseline row's, as a reader divides
    them (bug caught: 1.08x beside 111 / 98.1 = 1.13x); the paired speedup has its own
    column. Here the repeats' ratios differ (0.8, 1.3), so the two figures differ too."""
    from scaleprobe.report.tables import scale as S
    from scaleprobe.report.tables.time_to_target import table_parts

    rows = typed_api(S.scale_table)(_scale(noise))
    headers, cells = table_parts(S.SCALE_HEADERS, rows, S.scale_cells)
    sps, sp = headers.index("Samples/s"), headers.index("Speedup")
    assert "Paired speedup" in headers
    base, two = cells
    assert base[sp] == "1.00x (baseline)"
    assert cell_number(two[sp]) == pytest.approx(cell_number(two[sps]) / cell_number(base[sps]),
                                                 abs=0.006)  # a ratio to 2 decimals


@pytest.mark.parametrize("noise", [[1.0], [0.8, 1.3], [1.0, 0.7, 1.25]])
def test_the_sweep_points_tables_speedup_is_the_ratio_of_its_samples_per_s_column(noise):
    """A sweep over nproc: its points table's ``speedup`` = the row's samples/s / the
    1-process row's, as shown (bug caught: the paired figure under that header, 1.08x
    beside 111 / 98.1); the paired one has its own column."""
    from scaleprobe.report.render.sweep_tables import points_table

    recs = [RunResult.from_dict(r) for r in _scale(noise)]
    table = points_table(recs, [], ["nproc"])
    h = table["headers"]
    assert "paired speedup" in h
    rows = {str(row[h.index("nproc")]): row for row in table["rows"]}
    sps, sp = h.index("samples/s"), h.index("speedup")
    assert rows["1"][sp] == "1.00x (baseline)"
    assert cell_number(rows["2"][sp]) == pytest.approx(
        cell_number(rows["2"][sps]) / cell_number(rows["1"][sps]), abs=0.006)


@pytest.mark.parametrize("noise", [[1.0], [0.8, 1.3], [1.0, 0.7, 1.25]])
def test_the_scale_tables_lost_to_adds_up_to_its_efficiency_gap(noise):
    """"Lost to" splits the gap of the efficiency shown beside it: its shares, with the
    remainder it names (other/unexplained), add up to 100% - that efficiency."""
    import re

    from scaleprobe.report.tables import scale as S
    from scaleprobe.report.tables.time_to_target import table_parts

    rows = typed_api(S.scale_table)(_scale(noise))
    headers, cells = table_parts(S.SCALE_HEADERS, rows, S.scale_cells)
    eff, lost = headers.index("Paired efficiency"), headers.index("Lost to")
    two = cells[1]
    shown = cell_number(two[eff])
    if shown >= 100 or two[lost] in ("-", ""):
        return
    shares = [int(x) for x in re.findall(r"(-?\d+)%", two[lost])]
    assert sum(shares) == 100 - round(shown), two


def test_the_colocation_table_adds_up_and_its_slowdowns_agree():
    """colocate.md's job row: samples/s x epoch time = samples per epoch alone and together,
    and the slowdown (alone / together samples/s) equals epoch together / epoch alone (bug
    caught: 1.45x by samples/s, 1.81x by epoch time). Job a: 400 then 270 samples/s alone
    and 250 then 180 together over two repeats, 3,200 samples per epoch; its record's epoch
    times (a measured 10 s and 99 s) are off the window's basis."""
    from scaleprobe.experiments.colocate import _figures
    from scaleprobe.report.render.colocate import HEADERS, job_rows

    def rec(name: str, sps: float, epoch: float) -> RunResult:
        return RunResult.from_dict(_with_epoch(run(name, sps=sps), 3200, epoch))

    alone = [rec("a0", 400.0, 10.0), rec("a1", 270.0, 99.0)]
    together = [rec("t0", 250.0, 99.0), rec("t1", 180.0, 10.0)]
    job = _figures("a", alone, together).to_dict()
    (row,) = job_rows([job])
    h = list(HEADERS)
    a_sps, t_sps = cell_number(row[1]), cell_number(row[2])
    a_ep, t_ep = cell_number(row[h.index("epoch time alone (projected)")]), \
        cell_number(row[h.index("epoch time together (projected)")])
    assert a_sps * a_ep == pytest.approx(3200, rel=TOL)
    assert t_sps * t_ep == pytest.approx(3200, rel=TOL)
    slow = cell_number(row[h.index("slowdown")])
    # geometric means: alone sqrt(400 x 270) = 328.6, together sqrt(250 x 180) = 212.1
    assert slow == pytest.approx((400 * 270) ** 0.5 / (250 * 180) ** 0.5, abs=0.006)
    assert slow == pytest.approx(t_ep / a_ep, rel=TOL)


def test_the_lm_summary_multiplies_out():
    """The terminal's figures of an LM run: samples/s x epoch time = samples per epoch, and
    tokens/s = samples/s x 64 tokens per sample."""
    from scaleprobe.commands.run_summary import _figures

    r = _with_epoch(run("lm", model="gpt_tiny", dataset="tokens", batch=16, sps=37.5), 4096,
                    99.0)
    r["metrics"]["tokens_per_s"] = 37.5 * 64
    r["metrics"]["unigram_entropy_nats"] = 3.1
    r["batch"]["tokens_per_sample"] = 64
    figs = dict(_figures(RunResult.from_dict(r)))
    sps, ep = cell_number(figs["samples/s"]), cell_number(figs["epoch time"])
    assert "(projected)" in figs["epoch time"]
    assert sps * ep == pytest.approx(4096, rel=TOL)
    assert cell_number(figs["tokens/s"]) == pytest.approx(sps * 64, rel=TOL)
    assert "measured over whole epochs 99" in figs["epoch time"]  # its own figure, named
