"""The report's opening section "What this says" and the grouped per-run findings."""

from __future__ import annotations

import re

from scaleprobe.report import build_report
from scaleprobe.report.findings import headline as H
from scaleprobe.report.findings import verdicts_experiments as VE
from scaleprobe.report.findings import verdicts_settings as VS
from scaleprobe.report.render.build_report import compose, lead_section
from scaleprobe.report.render.doc import Table, Text
from tests.unit.report.factory import GIB, breakdown, run, with_, write_results


def _point(eid: str, repeat: int, **point) -> dict:
    return {"id": eid, "kind": "sweep", "point": point, "repeat": repeat}


def _batch(eid: str, noise: list[float], epochs: dict[int, float], oom: int | None = None,
           **kw) -> list[dict]:
    """A batch sweep with ``len(noise)`` repeats, interleaved; repeat i's epoch times are
    scaled by noise[i] at the smaller batch and by 1 / noise[i] at the larger, so noise
    moves the two apart (the paired interval sees it)."""
    recs = []
    sizes = sorted(epochs)
    for i, k in enumerate(noise):
        for j, bs in enumerate(sizes):
            f = k if j == 0 else 1 / k
            recs.append(run(f"{eid}{bs}r{i}", batch=bs, epoch_s=epochs[bs] * f,
                            sps=bs * 10.0 / f, host_mem=int((1 + bs / 64) * GIB),
                            experiment=_point(eid, i, batch_size=bs), **kw))
    if oom is not None:
        recs.append(run(f"{eid}{oom}", status="oom", batch=oom, error="out of memory",
                        experiment=_point(eid, 0, batch_size=oom)))
    return recs


def _headline(recs: list[dict], tmp_path) -> tuple[list[list[str]], list[str]]:
    """The verdict rows and the notes of the opening section."""
    write_results(tmp_path, recs)
    from scaleprobe.report.reading import records as R

    lead = lead_section(R.load_records(tmp_path))  # the report's first section, alone
    assert lead is not None and lead.title == H.TITLE and lead.lead
    rows = next((b.rows for b in lead.blocks if isinstance(b, Table)), [])
    notes = [b.text for b in lead.blocks if isinstance(b, Text)]
    return rows, notes


def test_the_lead_section_alone_is_the_reports_first_section(tmp_path):
    """The tests here build the opening section alone (``lead_section``), not the whole
    report: it must be the section the report opens with, row for row."""
    from scaleprobe.report.reading import records as R

    write_results(tmp_path, _batch("bs", [1.0, 1.02, 0.99], {16: 100.0, 32: 52.0}, oom=64))
    recs = R.load_records(tmp_path)
    first = compose(recs, [tmp_path])[1][0]
    alone = lead_section(recs)
    assert alone is not None and first.title == alone.title == H.TITLE
    assert [vars(b) for b in first.blocks] == [vars(b) for b in alone.blocks]


def test_a_decided_batch_verdict_has_its_number_interval_and_command(tmp_path):
    """Catches a headline that states the fastest batch size without the interval that
    supports it, or without the command to use it."""
    recs = _batch("bs", [1.0, 1.02, 0.99], {16: 100.0, 32: 52.0}, oom=64)
    rows, _ = _headline(recs, tmp_path)
    row = next(r for r in rows if "(bs)" in r[1])
    assert row[1] == "Batch 32 gives the shortest epoch (bs)"
    assert "epoch 52.0 s" in row[2] and "batch 64 ran out of memory" in row[2]
    assert re.search(r"batch 16: \d\.\d\dx \[\d\.\d\d, \d\.\d\d\], 3 repeats", row[3])
    assert "--set train.batch_size=32" in row[4] and row[4].count("`") == 2
    # running out of memory while probing batch sizes is the batch verdict's, not an error row
    assert not any(r[1].lower().startswith("out of memory") for r in rows)


def test_an_inconclusive_verdict_says_which_repeats_would_decide(tmp_path):
    """Catches an undecided comparison stated as a verdict, or an "inconclusive" that leaves
    the user without the repeats (and the command) that would decide it."""
    recs = _batch("bs", [1.0, 1.04, 0.96], {16: 100.0, 32: 90.0})
    rows, _ = _headline(recs, tmp_path)
    row = next(r for r in rows if "(bs)" in r[1])
    assert row[1].startswith("Fastest batch size (bs): inconclusive")
    m = re.search(r"^about (\d+) repeats would decide it: `scaleprobe sweep", row[4])
    assert m, row[4]
    need = int(m.group(1))
    assert need > 3
    assert f"--repeats {need}" in row[4] and "scaleprobe sweep" in row[4]
    # one recommendation per verdict: the interval column holds the interval alone
    assert "repeats would" not in row[3] and len(re.findall(r"\d+ repeats", row[4])) == 1


def test_the_largest_batch_worth_its_memory_is_a_verdict_of_its_own(tmp_path):
    """Memory +20% a step (1.25 -> 1.5 -> 1.75 GiB): the bar is 0.80x (and 0.83x). 16 -> 32
    halves the epoch (pays), 32 -> 48 saves 5% (does not): batch 32 is the largest worth its
    memory, decided, with the step that stopped it, its interval and the command to use it.
    With the last step paying too, the largest measured is named and a larger one suggested;
    with noise across the bar, inconclusive with the repeats that would decide."""
    rows, _ = _headline(_batch("w", [1.0, 1.02, 0.99], {16: 100.0, 32: 52.0, 48: 49.4}),
                        tmp_path / "a")
    row = next(r for r in rows if "worth its memory" in r[1])
    assert row[1] == "Batch 32 is the largest worth its memory (w): 32 -> 48 does not pay"
    assert row[2].startswith("32 -> 48: epoch time -5%, memory +17%")
    assert re.search(r"epoch-time ratio 0\.9\dx \[0\.\d\d, 0\.\d\d\], 3 repeats; pays below "
                     r"1 - memory growth = 0\.83x", row[3]), row[3]
    assert "--set train.batch_size=32" in row[4]
    rows, _ = _headline(_batch("p", [1.0, 1.02, 0.99], {16: 100.0, 32: 52.0}), tmp_path / "b")
    row = next(r for r in rows if "(p)" in r[1] and "paid" in r[1])
    assert row[1] == "Every step up paid (p): batch 32, the largest measured, is worth its memory"
    assert re.search(r"epoch-time ratio 0\.5\dx \[0\.\d\d, 0\.\d\d\], 3 repeats; pays below", row[3])
    rows, _ = _headline(_batch("n", [1.0, 1.3, 0.75], {16: 100.0, 32: 80.0}), tmp_path / "c")
    row = next(r for r in rows if "worth its memory" in r[1])
    assert row[1] == "Batch size worth its memory (n): inconclusive at 16 -> 32"
    assert "repeats would decide it" in row[4] or "noise" in row[4]


def test_one_repeat_clear_of_one_is_not_decided_never_not_told_apart(tmp_path):
    """One repeat, batch 32 about twice as fast: the interval lies clear of 1, yet one repeat
    decides nothing. Catches a headline that said "not told apart from" beside it."""
    rows, _ = _headline(_batch("bs", [1.0], {16: 100.0, 32: 52.0}), tmp_path)
    row = next(r for r in rows if "(bs)" in r[1])
    assert row[1] == "Fastest batch size (bs): inconclusive, batch 32 is not decided against " \
                     "(1 repeat) batch 16", row
    assert "1 repeat" in row[3]
    # with repeats whose intervals cross 1, "not told apart" stays
    rows, _ = _headline(_batch("bs2", [1.0, 1.04, 0.96], {16: 100.0, 32: 90.0}), tmp_path)
    assert "is not told apart from batch 16" in next(r for r in rows if "(bs2)" in r[1])[1]


def test_at_most_five_verdicts_failures_first_the_rest_named(tmp_path):
    """Catches a headline that lists every finding (the old report opened with 36 per-run
    rows) or buries a failed run under notes."""
    recs = _batch("a", [1.0, 1.02, 0.99], {16: 100.0, 32: 52.0})
    recs += _batch("b", [1.0, 1.04, 0.96], {16: 100.0, 32: 90.0})
    recs += [run(f"slow{i}", bd=breakdown(0.1, data=0.3 + i / 100)) for i in range(4)]
    recs += [run("straggly", straggler={"slowest_rank": 1, "slowest_vs_median": 1.5}),
             run("crashed", status="failed", error="worker exited with code -9")]
    rows, notes = _headline(recs, tmp_path)
    assert len(rows) == H.MOST
    assert rows[0][1].startswith("Failed")
    assert [r[0] for r in rows] == ["1", "2", "3", "4", "5"]
    decided = next(i for i, r in enumerate(rows) if r[1].startswith("Batch 32"))
    undecided = next(i for i, r in enumerate(rows) if "inconclusive" in r[1])
    assert decided < undecided
    more = next(n for n in notes if "more below" in n)
    assert re.match(r"\d+ more below", more)


def test_per_run_warnings_with_one_next_step_are_one_finding(tmp_path):
    """Catches the per-run table that repeated the same long next step once per run (11
    rows for 9 demo runs): runs that share a verdict and its advice are one row, naming the
    runs and the range of the figure behind the verdict."""
    recs = [run(f"r{i}", bd=breakdown(0.1, data=d), experiment=_point("w", i, batch_size=16))
            for i, d in enumerate([0.2, 0.25, 0.3])]
    md, _ = build_report(write_results(tmp_path, recs), tmp_path / "out")
    text = md.read_text()
    per_run = text.split("**Per run**", 1)[1]
    input_rows = [line for line in per_run.splitlines() if "| input-bound |" in line]
    assert len(input_rows) == 1
    row = input_rows[0]
    assert "3 runs: repeat 1; repeat 2; repeat 3" in row
    assert "data wait 20%-30% of each step" in row
    assert row.count("raise loader workers") == 1


def test_runs_under_load_are_one_caveat_not_a_verdict(tmp_path):
    """Catches a headline that spends a verdict on "measured under load", or forgets to say
    that the figures behind every verdict were measured on a busy machine."""
    recs = _batch("bs", [1.0, 1.02, 0.99], {16: 100.0, 32: 52.0})
    recs[0] = with_(recs[0], "metrics.outside_cpu_cores", 1.2)
    rows, notes = _headline(recs, tmp_path)
    assert not any("under load" in r[1] for r in rows)
    assert any(n.startswith("Caveat: 1 of 6 runs were measured under load") for n in notes)


def test_the_report_opens_with_the_headline(mixed_report):
    """Catches a report whose answer sits below the intro and the findings tables."""
    md_text, html_text, _ = mixed_report
    assert md_text.index("## What this says") < md_text.index("Source: ")
    assert md_text.index("## What this says") < md_text.index("## Findings")
    body = html_text.split("<body>", 1)[1]
    assert body.index('<section class="lead" id="what-this-says">') < body.index("<nav>")
    assert body.index("</section>") < body.index("<p>Source: ")


def test_no_literal_backticks_or_none_in_the_page(mixed_report):
    """Catches `commands` shown with their backticks in HTML, and "None" leaking into
    cells (Growth of a first row, a figure that was not measured)."""
    md_text, html_text, _ = mixed_report
    html_text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", html_text)
    assert "`" not in html_text
    assert "<code><span>scaleprobe</span> <span>sweep</span></code>" in html_text
    assert "`scaleprobe sweep`" in md_text  # Markdown keeps them: they render as code
    for text in (md_text, html_text):
        assert not re.search(r"\bNone\b", text)


def test_an_inconclusive_sweep_names_its_own_spec_file_in_the_rerun_command(tmp_path):
    """Catches a rerun command that says SPEC.toml when the sweep recorded the file it ran
    from: the user would have to find the spec again. A sweep without a recorded spec (older
    results, a dict spec) still says SPEC.toml."""
    recs = _batch("bs", [1.0, 1.04, 0.96], {16: 100.0, 32: 90.0})
    spec = tmp_path / "my specs" / "batch.toml"
    recs.append({"schema": 4, "kind": "sweep", "experiment": {"id": "bs", "kind": "sweep"},
                 "spec_path": str(spec)})
    rows, _ = _headline(recs, tmp_path)
    row = next(r for r in rows if "(bs)" in r[1])
    assert f"scaleprobe sweep '{spec}' --out {tmp_path}" in row[4], row[4]
    assert "SPEC.toml" not in row[4]
    rows, _ = _headline(recs[:-1], tmp_path / "older")
    row = next(r for r in rows if "(bs)" in r[1])
    assert "does not name the spec file" in row[4] and "SPEC.toml" not in row[4]


def test_report_findings_in_the_terminal_are_grouped_as_in_the_report(tmp_path, capsys):
    """Catches `report --findings` printing one block per run (the same long next step three
    times) while report.md groups them: the terminal names the runs and the figure's range
    once, like the report's Per run table."""
    import argparse

    from scaleprobe.commands import report as cmd

    recs = [run(f"r{i}", bd=breakdown(0.1, data=d), experiment=_point("w", i, batch_size=16))
            for i, d in enumerate([0.2, 0.25, 0.3])]
    write_results(tmp_path / "res", recs)
    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    assert cmd.run(parser.parse_args([str(tmp_path / "res"), "--out", str(tmp_path / "o"),
                                      "--findings"])) == 0
    out = capsys.readouterr().out
    assert out.count("input-bound") == 1, out
    assert "Per run:" in out and "(3 runs: repeat 1; repeat 2; repeat 3)" in out
    assert "data wait 20%-30% of each step" in out
    assert out.count("raise loader workers") == 1


def test_below_the_noise_a_quiet_machine_is_not_blamed(tmp_path):
    """Epoch times 1% apart under 20% noise: no number of repeats decides. On a machine where
    no run saw outside load, "measure on a quiet machine" is advice the user already took
    (the quiet demo said it); the row says the two are equal at this noise instead. With a
    run measured under load, a quiet machine comes first."""
    recs = _batch("bs", [1.0, 1.2, 0.85], {16: 100.0, 32: 99.0})
    for r in recs:
        r["metrics"]["outside_cpu_cores"] = 0.01  # measured: quiet
    rows, _ = _headline(recs, tmp_path / "quiet")
    row = next(r for r in rows if "(bs)" in r[1])
    assert "repeats would" not in row[3], row[3]  # the advice is the next column's, once
    assert row[4].startswith("the difference is within this machine's run-to-run noise (no "
                             "run measured under load): either will do"), row[4]
    assert "quiet machine" not in row[4]
    recs[0] = with_(recs[0], "metrics.outside_cpu_cores", 1.2)
    rows, _ = _headline(recs, tmp_path / "loaded")
    row = next(r for r in rows if "(bs)" in r[1])
    assert row[4].startswith("the noise is larger than the difference and runs were measured "
                             "under load: measure on a quiet machine, e.g. `scaleprobe"), row[4]


def test_below_the_noise_with_the_load_unmeasured_claims_neither(tmp_path):
    """Records without a load measurement (older ones): "no run measured under load" would be
    a claim nothing supports. Bug caught: an unmeasured load read as a quiet machine."""
    recs = _batch("bs", [1.0, 1.2, 0.85], {16: 100.0, 32: 99.0})
    for r in recs:
        r["metrics"]["outside_cpu_cores"] = None
        r["load"] = None
    rows, _ = _headline(recs, tmp_path)
    row = next(r for r in rows if "(bs)" in r[1])
    assert row[4].startswith("the noise is larger than the difference (whether other "
                             "programs used the machine was not measured)"), row[4]
    assert "either will do" not in row[4]


def test_below_a_runs_own_spread_the_machine_is_not_blamed(tmp_path):
    """Three repeats that agree to the digit, each run's median step uncertain by +/-40%
    (the H100 batch search: waits at every epoch start inside each run): the width is the
    runs' own, and "this machine's run-to-run noise" would be a false reason. Bug caught:
    that sentence, and its "either will do", on such an interval."""
    recs = _batch("bs", [1.0, 1.0, 1.0], {16: 100.0, 32: 99.0}, rel_ci=0.4)
    for r in recs:
        r["metrics"]["outside_cpu_cores"] = 0.01  # measured: quiet
    rows, _ = _headline(recs, tmp_path)
    row = next(r for r in rows if "(bs)" in r[1])
    assert row[4].startswith("the runs' own step times vary more than the difference (their "
                             "spread alone leaves the ratio uncertain by a factor of"), row[4]
    assert "run-to-run noise" not in row[4] and "either will do" not in row[4]
    from scaleprobe.report.reading import repeats as P
    from scaleprobe.report.tables import batch, batch_rule
    from tests.unit.report.factory import typed_module

    B = typed_module(batch)
    fast = typed_module(batch_rule).recommend_batch(recs)["fastest"]
    other = next(r for r in B.batch_table(recs) if r["batch_size"] != fast["batch_size"])
    iv = P.interval(fast["record"], other["record"], B.EPOCH_BASES[fast["epoch_basis"]])
    assert iv.within_run_bound and iv.log_sd < 1e-9  # the width is the runs' own


def test_intervals_too_wide_to_mean_anything_are_never_printed_as_numbers(tmp_path):
    """Bug (the demo on a loaded 2-core machine, 2 repeats): the report printed "+204%
    [-62.5%, +2395.4%]", "0.87x [0.02, 46.24]" and a bar of "-22.95x to 1.62x", and one
    verdict carried "about 3 repeats", "more than 30 repeats" and "--repeats 30"."""
    recs = []
    for i, (k, mem) in enumerate([(0.15, 1.0), (6.0, 10.0)]):  # two wildly different repeats
        for bs, f, m in ((32, k, 1.0), (128, 1 / k, mem)):
            recs.append(run(f"b{bs}r{i}", batch=bs, epoch_s=12.0 * f, sps=bs * 10.0 / f,
                            host_mem=int(0.5 * GIB * m * (bs / 32)),
                            experiment=_point("bs", i, batch_size=bs)))
    md, html = build_report(write_results(tmp_path, recs), tmp_path / "out")
    text = md.read_text()
    assert "spread too large" in text
    # (the What if section's predictions are the step model's, narrow by construction here)
    text = re.sub(r"\n## What if.*?(?=\n## )", "\n", text, flags=re.S)
    # no bracketed bound of a ratio, and no ratio at or below zero, anywhere
    assert not re.search(r"\[[-+]?\d+(\.\d+)?(x|%)?, [-+]?\d+(\.\d+)?(x|%)?\]", text), \
        re.findall(r".{60}\[[-+]?\d[^\]]*\].{20}", text)
    assert not re.search(r"(?<![\w.])-\d+\.\d\dx", text)
    rows, _ = _headline(recs, tmp_path / "h")
    row = next(r for r in rows if "(bs)" in r[1])
    assert "inconclusive: 2 repeats, spread too large" in row[3], row[3]
    assert "repeats would" not in row[3]
    assert len(set(re.findall(r"(\d+) repeats", row[4]))) <= 1, row[4]


def test_the_scaling_verdict_speaks_the_claims_words():
    """One repeat: 'inconclusive (1 repeat)' against the 80% bar, never a decided word; two
    repeats whose efficiency interval holds 80% (ratios 1.5 and 1.7 on 2 processes: 75% and
    85%): 'not resolved'. A baseline run under load puts its caveat on the number."""
    from scaleprobe.core.thresholds import DEFAULT
    from tests.unit.report.factory import loaded as typed
    from tests.unit.report.factory import scale_point

    def recs(pairs, loaded=False):
        out = []
        for i, (a, b) in enumerate(pairs):
            one = run(f"n1r{i}", nproc=1, sps=a, experiment={**scale_point("sc", 1), "repeat": i})
            if loaded:
                one["metrics"]["outside_cpu_cores"] = 1.6
                one["load"] = {"flag": True, "machine_cores": 4}
            out += [one, run(f"n2r{i}", strategy="ddp", nproc=2, sps=b,
                             experiment={**scale_point("sc", 2), "repeat": i})]
        return [typed(r) for r in out]

    (v,) = VE.scale_verdicts(recs([(100.0, 160.0)]), DEFAULT)
    assert v.claim == "Scaling (sc): inconclusive (1 repeat) against 80% efficiency"
    (v,) = VE.scale_verdicts(recs([(100.0, 150.0), (100.0, 170.0)], loaded=True), DEFAULT)
    assert v.claim == "Scaling (sc): not resolved against 80% efficiency"
    assert "measured under load: nproc=1 (repeat 1): 1.60 cores outside" in v.number


def test_worker_and_colocation_verdicts_carry_the_load_caveat():
    from scaleprobe.core.thresholds import DEFAULT
    from tests.unit.report.factory import colocate_record
    from tests.unit.report.factory import loaded as typed
    from tests.unit.report.tables.test_workers import _loader_sweep

    recs = _loader_sweep()
    busy = next(r for r in recs if r["name"] == "w1r0")
    busy["metrics"]["outside_cpu_cores"] = 1.5
    busy["load"] = {"flag": True, "machine_cores": 4}
    (v,) = VS.worker_verdicts("ld", typed(recs), DEFAULT)
    assert v.claim.startswith("Use 1 loader worker(s)")
    assert "measured under load: workers=1 (repeat 1): 1.50 cores outside" in v.number
    co = colocate_record()
    co["jobs"][1]["load_caveat"] = "measured under load: b alone (repeat 1): 1.20 cores outside"
    v = VE.colocate_verdict(typed(co), DEFAULT)
    assert v.number == ("a: 1.80x (slower together); b: measured under load: b alone (repeat "
                        "1): 1.20 cores outside")


def test_one_finished_loader_setting_is_not_a_verdict_and_the_advice_closes(tmp_path):
    """An interrupted demo: one loader setting and one batch size finished. Catches "Use 0
    loader worker(s)" stated as a verdict from one point ("no other setting to compare"),
    and advice with an unclosed parenthesis."""
    recs = [run("lw0", workers=0, loader="naive", transform="heavy", dataset="jpeg-synth",
                experiment=_point("demo-loader-transform", 0, workers=0, transform="heavy")),
            run("bs32", batch=32, epoch_s=52.0,
                experiment=_point("demo-batch-size", 0, batch_size=32))]
    rows, notes = _headline(recs, tmp_path)
    loader = [r for r in rows if "demo-loader-transform" in r[1]]
    assert loader, rows
    assert not any(r[1].startswith("Use ") for r in loader), loader
    assert "inconclusive" in loader[0][1]
    assert "no other setting to compare it with" in loader[0][3]
    assert "scaleprobe demo" in loader[0][4]
    batch = next(r for r in rows if "demo-batch-size" in r[1])
    assert batch[1] == "Batch size (demo-batch-size): inconclusive, only batch 32 finished"
    assert "scaleprobe demo" in batch[4]
    for cell in [c for r in rows for c in r] + notes:
        assert cell.count("(") == cell.count(")"), cell


def test_every_grouped_verdict_leads_with_a_figure_or_says_what_it_counts():
    """Catches "CPU-starved (8 runs) | 8 runs" in the demo's lead: a verdict standing for
    several runs showed their count where its figure belonged. Every verdict the findings
    can give has a key figure (its range over the runs is the lead's Number), or is an event
    counted, with what happened."""
    import pathlib

    from scaleprobe.report.findings import grouped as G

    per_run = pathlib.Path(G.__file__).with_name("diagnose.py")  # a run's own findings
    said = set(re.findall(r'Finding\(\s*"([^"]+)"', per_run.read_text()))
    assert {"CPU-starved", "not compute-bound", "input-bound"} <= said  # the scan finds them
    said |= {"out of memory", "failed", "communication-bound", "synchronisation overhead",
             "invariant broken: steps add up"}  # the verdicts diagnose.py names in variables
    missing = sorted(v for v in said if v not in G.KEY_FIGURES and G.counted(v) is None)
    assert not missing, f"verdicts with neither a key figure nor a count: {missing}"


def test_cpu_starved_runs_lead_with_their_cpu_use(tmp_path):
    recs = [with_(run(f"r{i}", cpu=cpu, cores=4, threads=2, bd=breakdown(0.1, data=0.001),
                      experiment=_point("w", i, batch_size=16)), "metrics.mfu", 0.01)
            for i, cpu in enumerate([12.0, 20.0, 24.0])]
    rows, _ = _headline(recs, tmp_path)
    (row,) = [r for r in rows if r[1].startswith("CPU-starved")]
    assert row[1] == "CPU-starved (3 runs)"
    assert row[2] == "CPU use 12%-24% of all cores by the run's processes", row


def test_one_repeat_below_the_assumed_noise_is_never_either_will_do(tmp_path):
    """Bug caught: one repeat a side, batch 32's epoch 1% shorter, every run quiet: no
    number of repeats decided (``repeats_to_decide`` assumes one run's +/-10% noise, so an
    estimate within about 5% of 1 gives None even at one repeat) and the row said "the
    difference is within this machine's run-to-run noise ... either will do", a claim one
    repeat cannot make: it never sees the drift between runs. It asks for repeats."""
    recs = _batch("bs", [1.0], {16: 100.0, 32: 99.0})
    for r in recs:
        r["metrics"]["outside_cpu_cores"] = 0.01  # measured: quiet
    rows, _ = _headline(recs, tmp_path)
    row = next(r for r in rows if r[1].startswith("Fastest batch size (bs)"))
    assert "1 repeat" in row[3], row[3]
    assert row[4].startswith("inconclusive (1 repeat): one repeat cannot see the drift "
                             "between runs, so it says neither that the two differ nor that "
                             "they are equal"), row[4]
    assert "either will do" not in row[4] and "run-to-run noise" not in row[4]
    assert "--repeats 3" in row[4]


def test_to_decide_says_either_will_do_only_from_repeats_that_measured_the_noise():
    """``to_decide`` with no count that would decide, every run quiet. Three repeats whose
    spread puts even 30 repeats' interval around 1 (1.01x, a log sd of 0.03): the difference
    is inside the noise the repeats measured, and the two are equal at it. One repeat with
    the same estimate: the noise was assumed, not measured, and nothing is claimed; a run
    under load asks for a quiet machine too."""
    import math

    from scaleprobe.core import metrics as M
    from scaleprobe.report.findings.verdict import to_decide as _to_decide
    from tests.unit.report.factory import typed_api

    to_decide = typed_api(_to_decide)
    quiet = [with_(run(f"q{i}"), "metrics.outside_cpu_cores", 0.01) for i in range(2)]

    def cmd(k: int) -> str:
        return f"`again --repeats {k}`"

    h = M.t_quantile(2) * 0.03 / math.sqrt(3)
    three = M.Interval(1.01, 1.01 * math.exp(-h), 1.01 * math.exp(h), 3, "paired t", 0.03,
                       0.001)
    assert M.repeats_to_decide(three, 1.0) is None and not three.within_run_bound
    assert to_decide(None, three, cmd, quiet).startswith(
        "the difference is within this machine's run-to-run noise (no run measured under "
        "load): either will do")
    one = M.Interval(1.01, 0.92, 1.11, 1, "one repeat", None, 0.01)
    assert M.repeats_to_decide(one, 1.0) is None and not one.within_run_bound
    text = to_decide(None, one, cmd, quiet)
    assert text == ("inconclusive (1 repeat): one repeat cannot see the drift between runs, "
                    "so it says neither that the two differ nor that they are equal: measure "
                    "the noise between runs with repeats, e.g. `again --repeats 3`"), text
    busy = [with_(quiet[0], "metrics.outside_cpu_cores", 3.0), quiet[1]]
    assert "with repeats on a quiet machine (runs were measured under load)" in to_decide(
        None, one, cmd, busy)


def test_a_scaling_verdict_below_the_bar_names_what_its_lost_to_leaves():
    """The headline's "lost to" is the row's, its remainder named: 2 processes at 60%
    efficiency whose breakdown explains 16% of the step (communication) leave 24 points of
    the 40-point gap to other/unexplained, which the shares alone read as complete."""
    from scaleprobe.core.thresholds import DEFAULT
    from tests.unit.report.factory import loaded as typed
    from tests.unit.report.factory import scale_point

    def bd(data, comm, compute):
        return {"data": data, "h2d": 0.0, "forward": compute / 3, "backward": 2 * compute / 3,
                "optimizer": 0.0, "comm": comm}

    out = []
    for i, k in enumerate((1.0, 1.02, 0.98)):
        out += [run(f"n1r{i}", nproc=1, sps=100.0 * k, bd=bd(0.005, 0.0, 0.095),
                    experiment={**scale_point("sc", 1), "repeat": i}),
                run(f"n2r{i}", strategy="ddp", nproc=2, sps=120.0 * k, bd=bd(0.005, 0.02, 0.1),
                    experiment={**scale_point("sc", 2), "repeat": i})]
    (v,) = VE.scale_verdicts([typed(r) for r in out], DEFAULT)
    assert v.claim.startswith("2 processes scale below 80% efficiency (sc); lost to "), v.claim
    shares = [int(x) for x in re.findall(r"(-?\d+)%", v.claim.split("lost to ")[1])]
    assert "other/unexplained" in v.claim and sum(shares) == 100 - 60, v.claim
