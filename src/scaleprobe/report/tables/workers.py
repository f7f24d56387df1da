"""Loader-setting analysis of sweep runs, usable outside the report: ``loader_table`` gives
one row per loader setting (workers, prefetch, transform, loader), ``recommend_workers`` the
fewest loader workers shown to reach ``Thresholds.workers_within`` of the best samples/s, or
"inconclusive" with the interval that did not decide it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scaleprobe.core import claim as CL
from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import RunResult, point_key
from scaleprobe.core.thresholds import DEFAULT, Thresholds
from scaleprobe.report.reading import machine_load as L
from scaleprobe.report.reading import records as R
from scaleprobe.report.reading import repeats as P
from scaleprobe.report.tables.rows import LoaderRow, WorkersPick
from scaleprobe.report.tables.sweep_points import point_groups, sweep_runs

LOADER_HEADERS = ("Setting", "Workers", "Data wait", "Compute/step", "Step median",
                  "Samples/s", "CPU util", "Status")


def loader_table(records: Sequence[Record]) -> list[LoaderRow]:
    """One row per loader setting of sweeps that varied workers / prefetch / transform /
    loader, grouped by the other axes, in order of loader workers."""
    runs = [r for r in sweep_runs(records) if any(k in R.LOADER_AXES for k in r.point)]
    rows: list[LoaderRow] = []
    for label, recs in point_groups(runs, R.LOADER_AXES).items():
        recs = sorted(recs, key=lambda r: (r.loader_workers or 0, point_key(r.point)))
        for r in recs:
            setting = {k: v for k, v in r.point.items() if k in R.LOADER_AXES}
            ok = r.status == "ok"

            def med(fig: Any, r: RunResult = r, ok: bool = ok) -> Any:
                # every figure the median over the point's repeats, as the batch table's and
                # the verdicts' are (bug caught: one repeat's 79.2 ms compute in the table,
                # the repeats' median 76.1 ms in the verdict beside it)
                return P.median_of(r, fig) if ok else fig(r)

            rows.append({
                "group": label, "run": r.label, "point": r.point,
                "setting": fmt.describe_point(setting), "workers": r.loader_workers,
                "prefetch": r.cfg("data.prefetch"), "transform": r.cfg("data.transform"),
                "record": r, "repeats": len(P.repeats_of(r)),
                "loader": r.cfg("data.loader"), "status": r.status,
                "data_wait_fraction": med(lambda x: x.metrics.data_wait_fraction),
                "data_s": med(lambda x: x.metrics.breakdown_s.data),
                "compute_s": med(lambda x: x.metrics.breakdown_s.compute_s()),
                "step_median_s": med(lambda x: x.step_median_s),
                "samples_per_s": med(P.sps_of),
                "cpu_util_pct": med(lambda x: x.metrics.cpu_util_pct),
            })
    return rows


def loader_cells(row: LoaderRow) -> list[str]:
    return [row["setting"], fmt.num(row["workers"], "d"), fmt.pct(row["data_wait_fraction"]),
            fmt.duration(row["compute_s"]), fmt.duration(row["step_median_s"]),
            fmt.rate(row["samples_per_s"]), fmt.pct_value(row["cpu_util_pct"]),
            "ok" if row["status"] == "ok" else str(row["status"])]


def recommend_workers(records: Sequence[Record], th: Thresholds = DEFAULT) -> WorkersPick:
    """The fewest loader workers within ``th.workers_within`` of the best samples/s (in the
    group of the best setting). Returns ``{"workers", "prefetch", "setting", "samples_per_s",
    "best_samples_per_s", "best_setting", "group", "text"}``; workers None when nothing ran.

    The transform is the workload, not a knob, and the sweep's other axes (strategy=ps,
    strategy=single) are other workloads too: each group and each transform gets its own
    recommendation (``by_group``, keyed and worded by the group's axes and the transform),
    and ``text`` holds one sentence per group; the top-level fields are those of the group of
    the overall best setting."""
    ok = [r for r in loader_table(records)
          if r["status"] == "ok" and (r["samples_per_s"] or 0) > 0 and r["workers"] is not None]
    if not ok:
        return {"workers": None, "text": "No loader setting finished, nothing to recommend."}
    groups = sorted({_group_name(r) for r in ok})
    transforms = sorted({str(r["transform"]) for r in ok})
    if len(transforms) < 2 and len(groups) < 2:
        return _recommend(ok, th)
    # each group (the sweep's other axes: strategy=ps, strategy=single) and each transform
    # gets its own comparison, named: a verdict of one group printed under another's table
    # with no name said nothing about either
    per: dict[str, WorkersPick] = {}
    for g in groups:
        for t in transforms:
            part = [r for r in ok if _group_name(r) == g and str(r["transform"]) == t]
            if not part:
                continue
            key = " ".join(x for x in (g if len(groups) > 1 else "",
                                       f"transform={t}" if len(transforms) > 1 else "") if x)
            lead = ", ".join(x for x in (g if len(groups) > 1 else "",
                                         f"transform {t}" if len(transforms) > 1 else "") if x)
            per[key] = _recommend(part, th, f"{lead}: ")
    best = max(ok, key=lambda r: r["samples_per_s"] or 0.0)
    top = next(p for p in per.values() if p.get("group") == best["group"]
               and p.get("best_setting") == best["setting"])
    return {**top, "by_group": per, "text": " ".join(p.get("text", "") for p in per.values())}


def _group_name(row: LoaderRow) -> str:
    """The row's group by the sweep's axes other than the input pipeline's (``strategy=ps``);
    the table's group label when the point has none."""
    others = {k: v for k, v in (row.get("point") or {}).items() if k not in R.LOADER_AXES}
    return fmt.describe_point(others) or str(row["group"])


def _challenged(pick: LoaderRow, best: LoaderRow, ok: list[LoaderRow],
                floor: float, lead: str) -> tuple[WorkersPick | None, list[str]]:
    """The pick must also be shown within reach of every other setting of its group: the
    best was chosen by its point estimate, and a setting the noise ranks below it may be
    faster by more than the margin (the demo's "use 0 workers" beside a pipelined loader
    whose interval ran up to 1.00x). Returns (the undecided recommendation, or None; every
    other setting's samples/s / the pick's)."""
    vs: list[str] = []
    for other in (r for r in ok if r["group"] == best["group"] and r is not pick):
        oiv = P.interval(pick["record"], other["record"], P.sps_of)
        if oiv is not None:
            vs.append(f"{other['setting']} {oiv.text()}")
        if oiv is None or not oiv.below(1.0 / floor):
            what = f"{other['setting']} / {pick['setting']} samples/s"
            need = M.repeats_to_decide(oiv, 1.0 / floor) if oiv else None
            return {"prefetch": pick["prefetch"], "setting": pick["setting"],
                    "need": need, "ref": 1.0 / floor, "compared": what,
                    "samples_per_s": pick["samples_per_s"],
                    "best_samples_per_s": best["samples_per_s"],
                    "best_setting": best["setting"], "group": best["group"],
                    "interval": oiv.to_dict() if oiv else None, "workers": None,
                    "decided": False,
                    "text": (f"{lead}Loader workers: {pick['workers']} worker(s) "
                             f"({pick['setting']}) would do, unless "
                             f"{other['setting']} is faster by more than "
                             f"{1.0 / floor - 1.0:.0%}: "
                             f"{CL.undecided(oiv, 1.0 / floor, what, need)}.")}, vs
    return None, vs


def _recommend(ok: list[LoaderRow], th: Thresholds, lead: str = "") -> WorkersPick:
    """``_pick``'s recommendation, with the load caveat (core/claim.py) of the settings it
    compared when one of their runs was measured under load."""
    got = _pick(ok, th, lead)
    best = max(ok, key=lambda r: r["samples_per_s"] or 0.0)
    caveat = CL.load_caveat(L.sources([r["record"] for r in ok if r["group"] == best["group"]]))
    # both keys in every record, so its shape does not depend on the machine's load
    got["under_load"], got["load_caveat"] = False, None
    if caveat and got.get("text"):
        got["text"] = got["text"].rstrip(".") + f"; {caveat}."
        got["under_load"], got["load_caveat"] = True, caveat
    return got


def _pick(ok: list[LoaderRow], th: Thresholds, lead: str = "") -> WorkersPick:
    """The fewest workers shown to reach ``1 - workers_within`` of the best setting's
    samples/s. Like for like: only settings of the best one's group (every axis but the
    input pipeline's equal; ``recommend_workers`` has already split by transform) are
    candidates. Fewest first, each candidate's ratio to
    the best is either shown within reach (use it), shown short (more workers pay), or
    undecided (the recommendation is inconclusive, with the interval)."""
    best = max(ok, key=lambda r: r["samples_per_s"] or 0.0)
    if sum(1 for r in ok if r["group"] == best["group"]) < 2:
        # bug caught: an interrupted demo with one loader setting finished said "Use 0
        # loader worker(s)" as a verdict, with "no other setting to compare" as its margin
        alone = (f"only {best['setting']} finished in its group: no other setting to "
                 "compare it with")
        return {"prefetch": best["prefetch"], "setting": best["setting"],
                "samples_per_s": best["samples_per_s"],
                "best_samples_per_s": best["samples_per_s"], "best_setting": best["setting"],
                "group": best["group"], "interval": None, "workers": None, "decided": False,
                "unexplained": alone, "alone": True,
                "text": f"{lead}Loader workers: {CL.INCONCLUSIVE}: {alone}."}
    floor = 1.0 - th.workers_within
    peers = sorted((r for r in ok if r["group"] == best["group"]
                    and (r["workers"] or 0) < (best["workers"] or 0)),
                   key=lambda r: r["workers"] or 0)
    pick, iv, undecided = best, None, None
    for cand in peers:
        civ = P.interval(best["record"], cand["record"], P.sps_of)
        if civ is not None and civ.above(floor):
            pick, iv = cand, civ
            break
        if civ is None or not civ.below(floor):
            undecided, iv = cand, civ
            break
    vs: list[str] = []  # every other setting's samples/s / the pick's
    if undecided is None:
        challenged, vs = _challenged(pick, best, ok, floor, lead)
        if challenged is not None:
            return challenged
    out: WorkersPick = {"prefetch": pick["prefetch"], "setting": pick["setting"],
           "samples_per_s": pick["samples_per_s"], "best_samples_per_s": best["samples_per_s"],
           "best_setting": best["setting"], "group": best["group"],
           "interval": iv.to_dict() if iv else None}
    if undecided is not None:
        what = f"{undecided['workers']} worker(s) / the best {best['workers']} worker(s)"
        need = M.repeats_to_decide(iv, floor) if iv else None
        text = (f"{lead}Loader workers: "
                f"{CL.undecided(iv, floor, what + ' samples/s', need)} (best: "
                f"{best['setting']}, {fmt.rate(best['samples_per_s'])} samples/s).")
        return {**out, "workers": None, "decided": False, "text": text, "need": need,
                "ref": floor, "compared": what + " samples/s"}
    unexplained = _gain_beyond_data_wait(pick, [r for r in ok if r["group"] == best["group"]])
    if unexplained:
        return {**out, "workers": None, "decided": False, "unexplained": unexplained,
                "text": f"{lead}Loader workers: {CL.INCONCLUSIVE}: {unexplained}."}
    if pick is best:
        why = ("every setting with fewer workers was slower by more than "
               f"{th.workers_within:.0%}" if peers else "no setting has fewer workers")
        why += (f", and no other setting is faster by more than {1.0 / floor - 1.0:.0%}"
                if len([r for r in ok if r["group"] == best["group"]]) > 1 else "")
        each = f" (each setting's samples/s / this one's: {'; '.join(vs)})" if vs else ""
        text = (f"{lead}Use {pick['workers']} loader worker(s) ({pick['setting']}): "
                f"{fmt.rate(pick['samples_per_s'])} samples/s; {why}{each}.")
    else:
        assert iv is not None  # a pick other than the best was shown within reach by it
        text = (f"{lead}Use {pick['workers']} loader worker(s) ({pick['setting']}): "
                f"{fmt.rate(pick['samples_per_s'])} samples/s, {iv.text()} of the best "
                f"{fmt.rate(best['samples_per_s'])} samples/s ({best['setting']}), within "
                f"{th.workers_within:.0%}; the fewest workers that reach it leave the cores to "
                "compute.")
    return {**out, "workers": pick["workers"], "decided": True, "text": text}


# the step-time gain more workers may show beyond the data wait they remove: the run-to-run
# noise of one step median (``metrics.SINGLE_REPEAT_NOISE_REL``)
GAIN_SLACK_REL = M.SINGLE_REPEAT_NOISE_REL


def _gain_beyond_data_wait(pick: LoaderRow, group: list[LoaderRow]) -> str | None:
    """Why the pick's gain over the fewest-workers setting of its group cannot come from the
    loader (None: it can). More workers can only remove the data wait the fewest-workers
    setting had (their loading moves off the training loop); a step that got shorter by more
    than that wait (plus a step's run-to-run noise) got faster for another reason, most often
    load on the machine that came and went between the runs, and says nothing about workers."""
    fewest = min(group, key=lambda r: r["workers"] or 0)
    if fewest is pick or (pick["workers"] or 0) <= (fewest["workers"] or 0):
        return None
    step_few, step_pick, wait = fewest["step_median_s"], pick["step_median_s"], fewest["data_s"]
    if step_few is None or step_pick is None or wait is None:
        return None
    gain = step_few - step_pick
    if gain <= wait + GAIN_SLACK_REL * step_few:
        return None
    return (f"{pick['workers']} worker(s) shortened the median step by {fmt.duration(gain)} "
            f"against {fewest['setting']}, but {fewest['setting']} waited only "
            f"{fmt.duration(wait)} per step for data, all that workers can remove: the runs "
            "differ by something other than the loader (load on the machine that came and "
            "went?); measure again with more repeats, interleaved")
