"""The report's figures: axes from zero, labels that are whole and tell bars apart, small
multiples instead of tangled lines, figures that show what the table beside them shows."""

from __future__ import annotations

from scaleprobe.report.render import labels, plots
from scaleprobe.report.render.labels import wrap
from scaleprobe.report.tables import batch
from tests.unit.report.factory import (
    GIB,
    breakdown,
    run,
    typed_api,
    typed_module,
    write_monitor_csv,
)

B = typed_module(batch)
distinct_labels = typed_api(labels.distinct_labels)


def _point(eid: str, repeat: int = 0, **point) -> dict:
    return {"id": eid, "kind": "sweep", "point": point, "repeat": repeat}


def _sweep() -> list[dict]:
    """Peak memory 1.00 -> 1.09 GiB: the +9% that an axis starting at 1 GiB made look steep."""
    recs = []
    for i, k in enumerate([1.0, 1.03, 0.98]):
        for bs, mem, epoch in ((16, 1.00, 100.0), (32, 1.05, 60.0), (64, 1.09, 55.0)):
            recs.append(run(f"b{bs}r{i}", batch=bs, epoch_s=epoch * k, sps=bs * 10 / k,
                            device_mem=int(mem * GIB), gpu=80.0,
                            experiment=_point("bs", i, batch_size=bs)))
    return recs


def _inside(box, meta, tol=1.0) -> bool:
    x0, y0, x1, y1 = box
    return x0 >= -tol and y0 >= -tol and x1 <= meta["width"] + tol and y1 <= meta["height"] + tol


def _apart(boxes, tol=1.0) -> bool:
    """No two tick labels overlap side by side."""
    boxes = sorted(boxes)
    return all(a[2] <= b[0] + tol for a, b in zip(boxes, boxes[1:], strict=False))


def test_batch_figure_axes_from_zero_and_labels_as_in_the_table():
    """Catches the peak-memory axis that started at 1.00 GiB (+9% looked steep), and a
    throughput figure labelled with throughput growth beside a table of epoch-time growth."""
    rows = B.batch_table(_sweep())
    plot = plots.batch_plot(rows, "Batch size: bs")
    epoch, memory = plot.meta["axes"]
    assert memory["ylim"][0] == 0 and epoch["ylim"][0] == 0
    assert memory["ylim"][1] > 1.09  # the whole range is shown, from zero
    cells = [B.batch_cells(r) for r in rows]
    assert memory["points"] == [c[3] for c in cells if c[3] != "-"]
    assert epoch["points"] == [c[5].split(";")[0].split(" [")[0] for c in cells if c[5] != "-"]
    assert epoch["ylabel"].startswith("epoch time") and "Growth" in epoch["title"]


def test_breakdown_bars_are_labelled_with_what_varies_never_cut_or_alike():
    """Catches bars labelled "loader=pipelined, transform=" twice: the labels were the whole
    description cut at 28 characters, so two bars could not be told apart."""
    recs = [run(f"{ld}-{tf}", loader=ld, transform=tf, bd=breakdown(0.1, data=0.1),
                experiment=_point("demo-loader-transform", loader=ld, transform=tf))
            for ld in ("naive", "pipelined") for tf in ("light", "heavy")]
    labels = distinct_labels(recs, with_repeat=False)
    assert labels == ["loader=naive, transform=light", "loader=naive, transform=heavy",
                      "loader=pipelined, transform=light", "loader=pipelined, transform=heavy"]
    plot = plots.breakdown_plot(labels, [r["metrics"]["breakdown_s"] for r in recs])
    ax = plot.meta["axes"][0]
    assert ax["xticklabels"] == [wrap(lab) for lab in labels]
    assert [t.replace("\n", ", ") for t in ax["xticklabels"]] == labels  # nothing dropped
    assert _inside(plot.meta["content"], plot.meta) and _inside(ax["bbox"], plot.meta)
    assert _apart(ax["xtickboxes"])
    assert "median step" in ax["title"].lower() and "(ms)" in ax["title"]
    assert ax["ylim"][0] == 0


def test_many_bars_with_long_labels_stay_inside_the_figure():
    """Catches labels cut at the figure's edge, or run into each other, when there are many
    bars with long names."""
    recs = [run(f"r{i}", bd=breakdown(0.1), experiment=_point(
        "a-long-experiment-name", transform=f"transform-number-{i}-with-a-long-name"))
        for i in range(30)]
    labels = distinct_labels(recs)
    plot = plots.breakdown_plot(labels, [r["metrics"]["breakdown_s"] for r in recs])
    ax = plot.meta["axes"][0]
    assert len(set(ax["xticklabels"])) == 30
    assert _inside(plot.meta["content"], plot.meta) and _inside(ax["bbox"], plot.meta)
    assert _apart(ax["xtickboxes"])


def test_labels_keep_only_what_varies_and_never_collide():
    """Catches labels that repeat what every run shares and hide what differs, and two runs
    that look alike."""
    recs = [run("a", experiment=_point("sw", 0, batch_size=16)),
            run("b", experiment=_point("sw", 1, batch_size=16)),
            run("c", experiment=_point("sw", 0, batch_size=32)),
            run("d", experiment={"id": "other", "kind": "sweep", "point": {"batch_size": 16},
                                 "repeat": 0})]
    assert distinct_labels(recs) == ["sw, batch_size=16 (repeat 1)",
                                     "sw, batch_size=16 (repeat 2)",
                                     "sw, batch_size=32 (repeat 1)",
                                     "other, batch_size=16 (repeat 1)"]
    assert distinct_labels(recs[:3]) == ["batch_size=16 (repeat 1)", "batch_size=16 (repeat 2)",
                                         "batch_size=32 (repeat 1)"]
    same = [run("x"), run("x")]
    assert distinct_labels(same) == ["x", "x (2)"]


def test_utilisation_is_small_multiples_not_nine_tangled_lines(tmp_path):
    """Catches nine runs drawn as nine lines in one panel with a nine-entry legend."""
    series = []
    for i in range(9):
        path = write_monitor_csv(tmp_path / f"r{i}" / "monitor.csv", gpu=(i == 0))
        series.append((f"batch_size={2 ** (i + 4)}", plots.read_monitor_csv(path)))
    plot = plots.utilisation_plot(series)
    axes = plot.meta["axes"]
    assert len(axes) == 9
    assert [a["title"] for a in axes] == [name for name, _ in series]
    assert all(a["ylim"] == [0.0, 105.0] for a in axes)
    assert all(_inside(a["bbox"], plot.meta) for a in axes)


def test_every_figure_of_the_report_is_whole(mixed_report):
    """Catches any figure of a full report (every section) with text outside its edges."""
    from scaleprobe.report.reading import records as R
    from scaleprobe.report.render.build_report import compose
    from scaleprobe.report.render.doc import Image

    folder = mixed_report[2]  # the session's records of every kind, built into a report once
    _, sections = compose(R.load_records(folder), [folder])
    images = [b for s in sections for b in s.blocks if isinstance(b, Image)]
    assert len(images) >= 8
    for img in images:
        meta = img.meta
        assert _inside(meta["content"], meta), (img.name, meta["content"])
        for ax in meta["axes"]:
            assert _inside(ax["bbox"], meta), (img.name, ax["title"])
            assert len(set(ax["xticklabels"])) == len(ax["xticklabels"]), img.name
            assert _apart(ax["xtickboxes"]), (img.name, ax["xticklabels"])
    assert (folder / "report_files" / "utilisation.png").is_file()
    assert (folder / "report.md").is_file()


def _scale_runs(eid: str, sps: dict[int, list[float]]) -> list[dict]:
    out = []
    for n, vals in sps.items():
        for r, v in enumerate(vals):
            out.append(run(f"{eid}n{n}r{r}", strategy="ddp", nproc=n, sps=v,
                           experiment={"id": eid, "kind": "scale", "point": {"nproc": n},
                                       "repeat": r}))
    return out


def test_scale_figure_names_its_speedup_as_the_table_does_and_marks_load():
    """Bug caught: the figure drew the paired speedup (the geometric mean of the repeats'
    ratios) under the label "speedup", while the table's Speedup column is the ratio of
    the Samples/s shown (here 2.00x against a paired 1.95x); and a point whose runs were
    measured under load looked like any other. The axis now says "paired speedup", as the
    table's Paired speedup column, each point labelled with the Paired efficiency cell, and
    a loaded point is hollow with a legend entry."""
    from scaleprobe.report.tables import scale as _scale

    S = typed_module(_scale)
    recs = _scale_runs("sc", {1: [100.0, 70.0, 130.0], 2: [200.0, 126.0, 250.0]})
    rows = S.scale_table(recs)
    assert rows[1]["column_speedup"] != rows[1]["speedup"]
    ax = plots.scale_plot(rows).meta["axes"][0]
    assert ax["ylabel"].startswith("paired speedup")
    cells = [dict(zip(_scale.SCALE_HEADERS, S.scale_cells(r), strict=True)) for r in rows]
    assert ax["points"] == [c["Paired efficiency"].split(" [")[0] for c in cells]
    assert "measured under load" not in ax["legend"]
    recs[4]["load"] = {"flag": True, "machine_cores": 4}  # 2 processes, repeat 1
    ax = plots.scale_plot(S.scale_table(recs)).meta["axes"][0]
    assert "measured under load" in ax["legend"]


def test_loader_figure_labels_each_bar_with_the_share_it_draws():
    """Bug caught: the label "wait 20%" was the median data-wait fraction of the step, whose
    step holds communication too, on a bar of data wait over data wait + compute (29%)."""
    from scaleprobe.report.tables import workers as _workers

    recs = [run(f"w{w}r{i}", workers=w, bd=breakdown(0.1, data=0.2, comm=0.3),
                experiment=_point("ld", i, workers=w)) for w in (0, 2) for i in range(2)]
    rows = typed_module(_workers).loader_table(recs)
    ax = plots.loader_plot(rows).meta["axes"][0]
    share = 0.02 / (0.02 + 0.05)
    assert ax["points"] == [f"wait {share * 100:.0f}% of bar"] * 2
    assert "data wait / (data wait + compute)" in ax["title"]
