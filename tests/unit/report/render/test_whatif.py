"""The report's What if section (report/render/whatif.py): predicted speedup per link and device
count from a folder's one-rank run, and how its predictions held against measured runs."""

from scaleprobe.report.render.whatif import whatif_section
from tests.unit.predict.test_check import _t, measured
from tests.unit.predict.test_stepmodel import THIRDS, one_rank_run


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
    # no spread in the steps: the interval is the model's own error (-10% and +5% on the
    # log scale for the speedup)
    assert rows["slow=0.4,0"][2] == "1.06 [0.96, 1.11] (53%)"
    assert rows["10gbit"][1].endswith("(nominal)") and rows["slow=0.4,0"][1].endswith("(given)")
    held = next(b for b in s.blocks if getattr(b, "headers", None)
                and b.headers[0] == "Run")
    (row,) = held.rows
    assert row[-1].startswith("1.00")
    # the papers' form under it: one point predicted exactly
    assert any("1 points, |error| mean 0.0%, median 0.0%, p90 0.0%, worst 0.0%"
               in str(getattr(b, "text", "")) for b in s.blocks)


def test_no_one_rank_run_no_section(tmp_path):
    assert whatif_section([measured("two", _t(1))]) is None


def test_a_run_under_load_puts_its_caveat_on_the_predictions(tmp_path):
    """Bug caught: the what-if table put a ceiling on 2 devices 'even on a link that
    costs nothing' from the step jitter of a run flagged under load, and did not say so."""
    import dataclasses

    from scaleprobe.core.run_parts import Load

    base = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS, started=_t(0))
    base.metrics.outside_cpu_cores = 1.6
    base.load = Load(flag=True, machine_cores=2)
    s = whatif_section([base])
    text = " ".join(getattr(b, "text", "") for b in s.blocks)
    assert "measured under load: r: 1.60 cores outside (1 of 1 source runs)" in text
    assert "even on a link that costs nothing" in text
    calm = dataclasses.replace(base, load=Load(flag=False, machine_cores=2))
    calm.metrics = dataclasses.replace(base.metrics, outside_cpu_cores=0.05)
    s = whatif_section([calm])
    assert "under load" not in " ".join(getattr(b, "text", "") for b in s.blocks)


def test_predict_from_json_carries_the_load_caveat(tmp_path):
    """`predict --from` writes the same caveat into its JSON as the report prints."""
    from scaleprobe.commands.predict_steps import _from_dict
    from scaleprobe.core.run_parts import Load
    from scaleprobe.predict import sample as S

    base = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS, started=_t(0))
    base.metrics.outside_cpu_cores = 1.6
    base.load = Load(flag=True, machine_cores=2)
    d = _from_dict(base, S.from_run(base))
    assert d["under_load"] is True
    assert d["load_caveat"].startswith("measured under load: r: 1.60 cores outside")


def test_predict_from_in_the_terminal_carries_the_load_caveat(tmp_path, capsys):
    """`predict --from` in the terminal: the run was under load, so the caveat follows the
    table, and a link that cannot reach the target reads "unreachable*"."""
    from scaleprobe.commands.predict_steps import print_rows
    from scaleprobe.core.run_parts import Load
    from scaleprobe.predict import sample as S
    from scaleprobe.predict import whatif as W

    base = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS, started=_t(0))
    base.metrics.outside_cpu_cores = 1.6
    base.load = Load(flag=True, machine_cores=2)
    sample = S.from_run(base)
    rows = W.plan(sample, W.Grid(["ddp"], [2, 8], [1], [None]), 0.9)
    print_rows(base, sample, rows, 0.9)
    out = " ".join(capsys.readouterr().out.split())  # rich wraps to the terminal's width
    assert "measured under load: r: 1.60 cores outside (1 of 1 source runs)" in out
    assert "each ceiling 'even on a link that costs nothing'" in out
    # 8 ranks: the link's fixed costs alone (latency, gloo's wake-up) keep 90% out of reach
    assert rows[0].needed_gbit_s is not None and rows[1].needed_gbit_s is None
    assert "unreachable*" in out and "* measured under load" in out
    assert "latency and its wake-up after compute (2.50 ms a collective)" in out


def test_the_report_prices_the_buffers_the_run_recorded_as_predict_does(tmp_path):
    """Bug caught (the demo, 2026-11-30): the report's What if built its scenarios without
    the run's recorded buffers, so it priced no DDP broadcast of digits_cnn's BatchNorm
    statistics and noted "the model's buffers were not recorded"; ``predict --from`` priced
    them. Both now take the run's setting from one place (``whatif.as_run``)."""
    from scaleprobe.core.run_metrics import MemoryFacts
    from scaleprobe.predict import sample as S
    from scaleprobe.predict import stepmodel as M
    from scaleprobe.predict import whatif as W

    base = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS, started=_t(0))
    base.metrics.memory_facts = MemoryFacts(buffer_bytes=[1280, 24])

    def text(run):
        return " ".join(str(getattr(b, "text", "")) for b in whatif_section([run]).blocks)

    assert "buffers broadcast from rank 0 before every forward" in text(base)
    # said once, not once per link and device count (12 times, each with its own figure)
    assert text(base).count("buffers broadcast from rank 0") == 1
    assert "more like it, with other figures: one per link and device count" in text(base)
    assert "buffers were not recorded" not in text(base)
    sc = W.scenario("ddp", 1, 2, "1gbit", **W.as_run(base))
    cli = M.predict(W.fresh(S.from_run(base)), sc)  # what predict --from does on this link
    assert any("buffers broadcast" in n for n in cli.notes)
    base.metrics.memory_facts = None  # an older record: said so, not priced
    assert "buffers were not recorded" in text(base)


def test_how_the_predictions_held_marks_every_measured_run_under_load(tmp_path):
    """Bug caught: a measured run under load stood unmarked in "How the predictions held"
    unless it was outside +-20%; one predicted exactly (1.00) read as the model matching
    the machine. Every loaded run is marked, whatever its error, and a note names it."""
    from dataclasses import replace

    from scaleprobe.core.run_parts import Load

    base = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS, started=_t(0))
    busy, quiet = measured("busy", _t(1)), measured("quiet", _t(2))
    busy.metrics = replace(busy.metrics, outside_cpu_cores=1.7)
    busy.load = Load(flag=True, outside_cpu_cores=1.7, machine_cores=2)
    quiet.metrics = replace(quiet.metrics, outside_cpu_cores=0.05)
    quiet.load = Load(flag=False, outside_cpu_cores=0.05, machine_cores=2)
    s = whatif_section([base, busy, quiet])
    held = next(b for b in s.blocks if getattr(b, "headers", None) and b.headers[0] == "Run")
    rows = {r[0]: dict(zip(held.headers, r, strict=True)) for r in held.rows}
    assert rows["busy"]["Predicted / measured"].startswith("1.00")  # within 10%: still marked
    assert rows["busy"]["Measured step"].endswith(", under load")
    assert "under load" not in " ".join(rows["quiet"].values())
    text = " ".join(str(getattr(b, "text", "")) for b in s.blocks)
    assert "Measured under load (1 of 2 points): busy (1.70 cores outside)" in text
