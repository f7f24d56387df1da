"""Runs are identified by folder + experiment id + point (+ repeat), never by display name;
a report lists every folder it read and keeps experiments that share an id apart."""

from __future__ import annotations

from scaleprobe.report import build_report
from scaleprobe.report.findings.diagnose import diagnose_experiment as _diagnose_experiment
from scaleprobe.report.reading import records as R
from tests.unit.report.factory import (
    breakdown,
    loaded,
    run,
    scale_point,
    sweep_point,
    typed_api,
    write_results,
)

diagnose_experiment = typed_api(_diagnose_experiment)


def _sweep(eid: str, sps_scale: float) -> list[dict]:
    recs = [run(f"bs{bs}", batch=bs, sps=bs * 10 * sps_scale, epoch_s=1000 / (bs * sps_scale),
                experiment=sweep_point(eid, batch_size=bs)) for bs in (16, 32)]
    for r in recs:  # each run has its own id, as real runs do
        r["run_id"] = f"{r['run_id']}-{sps_scale}"
    return recs


def test_two_folders_with_one_experiment_id_are_both_kept_and_labelled(tmp_path):
    """Catches observation 5: the later folder's sweep silently hid the earlier one (same
    experiment id, same point keys), and the report did not say so."""
    write_results(tmp_path / "monday", _sweep("sw", 1.0))
    write_results(tmp_path / "tuesday", _sweep("sw", 2.0))
    records = R.load_records(tmp_path)
    groups = R.by_experiment(records, "sweep")
    mon, tue = f"sw ({tmp_path / 'monday'})", f"sw ({tmp_path / 'tuesday'})"
    assert set(groups) == {mon, tue}
    assert {len(R.latest_per_point(g)) for g in groups.values()} == {2}
    md = build_report(tmp_path)[0].read_text()
    assert f"### Sweep {mon}" in md and f"### Sweep {tue}" in md
    assert "Note: experiment id sw is in 2 folders" in md
    assert "## Sources" in md
    assert f"| {tmp_path / 'monday'} | sw (sweep) | 2 | 0 |" in md
    assert f"| {tmp_path / 'tuesday'} | sw (sweep) | 2 | 0 |" in md


def test_sources_lists_every_folder_even_without_a_clash(tmp_path):
    """Catches a report that does not say which folders it read."""
    write_results(tmp_path / "a", _sweep("sw-a", 1.0))
    write_results(tmp_path / "b", [run("solo")])
    md = build_report(tmp_path)[0].read_text()
    assert f"| {tmp_path / 'a'} | sw-a (sweep) | 2 | 0 |" in md
    assert f"| {tmp_path / 'b'} | - | 1 | 0 |" in md
    assert "Note: experiment id" not in md


def _scale(eid: str, model: str, batch: int, bucket_mb: float) -> list[dict]:
    """1 and 2 processes, two repeats (a verdict needs two)."""
    out = []
    for i, k in enumerate((1.0, 1.02)):
        one = run("nproc=1", model=model, nproc=1, batch=batch, sps=100.0,
                  experiment={**scale_point(eid, 1), "repeat": i})
        two = run("nproc=2", model=model, strategy="ddp", nproc=2, batch=batch, sps=110.0 * k,
                  bd=breakdown(0.2, comm=0.35), experiment={**scale_point(eid, 2), "repeat": i})
        for r in (one, two):  # like for like: the same bucket size at both counts
            r["config"]["dist"]["bucket_cap_mb"] = bucket_mb
            r["run_id"] += f"-{eid}-{i}"
        exposed = two["metrics"]["breakdown_s"]["comm"]  # most of it the network's transfer
        two["comm"] = {"exposed_s": exposed, "transfer_s": 0.8 * exposed,
                       "sync_overhead_s": 0.2 * exposed}
        out += [one, two]
    return out


def test_scaling_advice_comes_from_the_rows_own_experiment():
    """Catches observation 5: every scale point is named "nproc=2", so the advice for one
    model's scaling loss was built from another experiment's run (its batch and bucket
    size)."""
    recs = _scale("sc-resnet", "resnet18", 32, 25.0) + _scale("sc-mlp", "mlp", 128, 100.0)
    found = {f.subject: f for f in diagnose_experiment(recs) if f.verdict == "scaling loss"}
    assert "batch to 64" in found["sc-resnet"].recommendation
    assert "--bucket-cap-mb 50 and 12.5" in found["sc-resnet"].recommendation
    assert "batch to 256" in found["sc-mlp"].recommendation
    assert "--bucket-cap-mb 200 and 50" in found["sc-mlp"].recommendation


def test_repeats_of_a_point_are_kept_apart():
    """Catches repeats of one point collapsing to one run (only the last repeat counted)."""
    reps = []
    for i in range(3):
        r = run(f"bs16-r{i}", experiment=sweep_point("sw", batch_size=16))
        r["experiment"]["repeat"] = i
        reps.append(r)
    assert len(R.latest_per_point(loaded(reps))) == 3
    # a resumed sweep that appended the same repeat twice still gives one run
    assert len(R.latest_per_point(loaded(reps + [reps[0]]))) == 3


def test_identity_never_uses_the_display_name():
    """Catches two runs told apart (or merged) by their display name."""
    a = run("same-name", experiment=scale_point("x", 2))
    b = run("same-name", experiment=scale_point("y", 2))
    c = run("other-name", experiment=scale_point("x", 2))
    a, b, c = loaded([a, b, c])
    assert a.identity != b.identity
    assert a.identity == c.identity
