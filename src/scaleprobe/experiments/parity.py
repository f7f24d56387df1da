"""Accuracy parity: the same training on 1 process and on N, with the same global batch and
number of samples seen, over several seeds. Data-parallel training should not change what the
model learns; when it does (batch-norm statistics over smaller per-device batches, a sharding
bug), this shows it with both accuracies side by side, each the mean over the seeds the
difference pairs (``paired_repeats``: an accuracy on both sides after the same samples), so
the two means give the difference; a seed without a partner is named, with why.

    scaleprobe run --strategy ddp --nproc 2 --parity --epochs 3 --repeats 3
    scaleprobe run --strategy ddp --nproc 2 --parity --parity-tolerance 0.005

Repeat ``r`` uses seed ``seed + r`` for both runs, interleaved (1, N, 1, N, ...), each in its
own process. The verdict is an equivalence test (core/claim.py, an equivalence band): the
difference of accuracies (N - 1), paired by seed (``metrics.paired_difference_interval``),
against the user's ``--parity-tolerance``, never one derived from the measured noise.
docs/EXPERIMENTS.md ("Accuracy parity") gives why the learning rate is not scaled, why
communication calibration is off, and the verdicts.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaleprobe.config.runconfig import validate
from scaleprobe.config.sections import RunConfig
from scaleprobe.core import claim as CL
from scaleprobe.core import claim_kinds as CK
from scaleprobe.core import machine_load as ML
from scaleprobe.core import metrics
from scaleprobe.core import results as res
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.experiment_records import ParityRecord, pair_seeds
from scaleprobe.core.result_model import Experiment, RunResult
from scaleprobe.experiments.point import PointPayload
from scaleprobe.experiments.procs import ProcessSet, point_experiment, run_in_process

DEFAULT_REPEATS = 3
VERDICTS = (CL.PARITY_HOLDS, CL.PARITY_BROKEN, CL.INCONCLUSIVE, CL.NOT_MEASURED)
TOLERANCE_RULE = ("the user's (--parity-tolerance, default 0.01: one accuracy point, "
                  "absolute), never derived from the measured noise")


def parity_configs(cfg: RunConfig, repeat: int = 0) -> tuple[RunConfig, RunConfig]:
    """(one process, N processes) for repeat ``repeat``: the same global batch, seed
    (``seed + repeat``) and amount of training, everything else equal. An adaptive step count
    ("auto") would let the two sides see different numbers of samples, so it becomes one
    epoch."""
    gb = cfg.train.global_batch or cfg.train.batch_size * cfg.training_ranks
    steps, epochs = cfg.train.steps, cfg.train.epochs
    if epochs is None and (steps is None or steps == "auto"):
        steps, epochs = None, 1
    seed = cfg.train.seed + repeat
    train = dataclasses.replace(cfg.train, global_batch=gb, eval=True, seed=seed, steps=steps,
                                epochs=epochs)
    base = cfg.name or "parity"
    multi = dataclasses.replace(
        cfg, train=train, name=f"{base}-n{cfg.world_size}-seed{seed}",
        dist=dataclasses.replace(cfg.dist, parity=False, calibrate_comm=False),
        measure=dataclasses.replace(cfg.measure, progress=False))
    one_dist = dataclasses.replace(cfg.dist, strategy="single", nproc=1, nnodes=1, node_rank=0,
                                   rdzv_endpoint=None, parity=False, calibrate_comm=False)
    one = dataclasses.replace(multi, dist=one_dist, name=f"{base}-n1-seed{seed}")
    validate(one)
    validate(multi)
    return one, multi


# ---- the verdict (pure: hand-made accuracies in tests) -----------------------------------

# the record's verdict by the rule that decided the claim
_VERDICT_OF = {CL.RULE_INSIDE_BAND: CL.PARITY_HOLDS, CL.RULE_OUTSIDE_BAND: CL.PARITY_BROKEN,
               CL.RULE_NOT_MEASURED: CL.NOT_MEASURED}


@dataclass
class ParityVerdict:
    """The verdict on the seeds' paired accuracies against the user's tolerance."""

    tolerance: float
    pairs: int  # seeds with an accuracy on both sides
    verdict: str
    text: str
    difference: float | None = None  # mean accuracy, N - 1
    interval: dict[str, Any] | None = None  # of the difference, as the record writes it
    seed_sd: float | None = None


def parity_verdict(acc_1: Sequence[float | None], acc_n: Sequence[float | None],
                   tol: float, sources: tuple[CL.Source, ...] = ()) -> ParityVerdict:
    """Verdict and interval from the accuracies of the repeats on each side, seed by seed
    (``acc_1[r]``, ``acc_n[r]``: seed r; a seed with an accuracy missing on a side drops
    out of the pairs), against the user's tolerance ``tol``. The words are the claim's
    (core/claim.py); ``sources``: the paired runs (``core.machine_load.sources``), whose
    load rides on the words."""
    pairs = [(x, y) for x, y in zip(acc_1, acc_n, strict=False) if x is not None and y is not None]
    if not pairs:
        return ParityVerdict(tol, 0, CL.NOT_MEASURED,
                             "no seed has an accuracy on both sides (see the runs)")
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    diff = sum(b) / len(b) - sum(a) / len(a)
    iv = metrics.paired_difference_interval(a, b)
    method = "paired t on the seeds' differences (N - 1)"
    claim = CK.parity(diff, None if iv is None else metrics.Interval(
        iv[0], iv[1], iv[2], len(pairs), method), len(pairs), tol)
    if sources:
        claim = dataclasses.replace(claim, sources=sources)
    verdict = _VERDICT_OF.get(claim.rule, CL.INCONCLUSIVE)
    text = f"{claim.text()}; tolerance +/-{tol:.4f} (the user's)"
    if iv is None:
        text += "; no spread from one seed: run --repeats 3 or more"
    elif verdict == CL.INCONCLUSIVE:
        need = metrics.repeats_to_decide_paired(diff, iv[3], tol, len(pairs))
        text += ("; " + (f"about {need} seeds would decide it" if need else
                         f"more than {metrics.MAX_REPEATS_SUGGESTED} seeds would be needed, "
                         "or the difference sits at the tolerance"))
    return ParityVerdict(tol, len(pairs), verdict, text, diff, None if iv is None else {
        "estimate": iv[0], "lo": iv[1], "hi": iv[2], "confidence": metrics.CONFIDENCE,
        "method": method}, iv[3] if iv else None)


def _acc(rec: RunResult) -> float | None:
    return rec.metrics.accuracy if rec.status == "ok" else None


def _samples(rec: RunResult) -> int | None:
    steps, gb = rec.metrics.steps_done, rec.cfg_number("train.global_batch")
    return steps * int(gb) if steps is not None and gb else None


def paired_repeats(recs_1: Sequence[RunResult], recs_n: Sequence[RunResult]
                   ) -> tuple[list[int], list[tuple[int, str]]]:
    """The repeats whose two runs are compared (the same samples seen, an accuracy on both
    sides), and every other repeat with why it has no partner (``pair_seeds``, the rule the
    report reads a record by). The difference, both mean accuracies and the claim's sources
    all stand on the first."""
    n = recs_n[0].batch.world_size if recs_n else None
    return pair_seeds(
        [_acc(r) for r in recs_1], [_acc(r) for r in recs_n],
        [[_samples(a), _samples(b)] for a, b in zip(recs_1, recs_n, strict=True)],
        f"{n or 'N'} processes",
        [(_why_none(a), _why_none(b)) for a, b in zip(recs_1, recs_n, strict=True)])


def _why_none(rec: RunResult) -> str:
    """What a run without an accuracy is called: its status, or none recorded."""
    return str(rec.status) if rec.status != "ok" else "none recorded"


def _mean(vals: list[float]) -> float | None:
    return sum(vals) / len(vals) if vals else None


def parity_record(recs_1: list[RunResult], recs_n: list[RunResult], exp_id: str,
                  tol: float) -> ParityRecord:
    """The ``kind: parity`` record from the repeats' run records (``recs_1[r]``, ``recs_n[r]``:
    repeat r on 1 and on N processes). Only the repeats whose two runs both have an accuracy
    after the same samples are compared (``paired_repeats``): the difference, its interval
    and the two mean accuracies printed beside it are all over those seeds, and the record
    names the others (``pairs``, ``paired_seeds``, ``unpaired``)."""
    samples = [[_samples(a), _samples(b)] for a, b in zip(recs_1, recs_n, strict=True)]
    paired, left = paired_repeats(recs_1, recs_n)
    seeds = [r.cfg("train.seed") for r in recs_1]
    srcs = ML.sources([r for i in paired for r in (recs_1[i], recs_n[i])])
    acc_1 = [x for i in paired if (x := _acc(recs_1[i])) is not None]
    acc_n = [x for i in paired if (x := _acc(recs_n[i])) is not None]
    v = parity_verdict(acc_1, acc_n, tol, srcs)
    if paired:
        k = len(paired)
        v.text += (f"; accuracies are means over the {k} paired seed{'s' if k != 1 else ''} "
                   f"({', '.join(str(seeds[i]) for i in paired)})")
    if left:
        v.text += (f"; left out: repeat(s) {', '.join(str(i + 1) for i, _ in left)} ("
                   + "; ".join(f"seed {seeds[i]}: {why}" for i, why in left) + ")")
    first = recs_n[0] if recs_n else RunResult()
    gb = first.cfg_number("train.global_batch")
    return ParityRecord(
        experiment=Experiment(id=exp_id, kind="parity"),
        nproc=first.batch.world_size,
        global_batch=int(gb) if gb else None,
        repeats=len(recs_1),
        seeds=seeds,
        samples_seen=samples[0] if samples else [None, None],
        samples_seen_repeats=samples,
        accuracies_1=[_acc(r) for r in recs_1], accuracies_n=[_acc(r) for r in recs_n],
        accuracy_1=_mean(acc_1), accuracy_n=_mean(acc_n),
        difference=v.difference, difference_interval=v.interval, seed_sd=v.seed_sd,
        tolerance=v.tolerance, tolerance_rule=TOLERANCE_RULE, verdict=v.verdict,
        verdict_text=v.text,
        within_tolerance={CL.PARITY_HOLDS: True, CL.PARITY_BROKEN: False}.get(v.verdict),
        runs=[r.run_id for pair in zip(recs_1, recs_n, strict=True) for r in pair],
        status="ok" if v.verdict != CL.NOT_MEASURED else "failed",
        pairs=len(paired), paired_seeds=[seeds[i] for i in paired],
        unpaired=[{"seed": seeds[i], "repeat": i, "why": why} for i, why in left])


# ---- running it ---------------------------------------------------------------------------

def run_parity(cfg: RunConfig, repeats: int = DEFAULT_REPEATS,
               say: Callable[[str], None] | None = None) -> ParityRecord:
    """Train ``repeats`` times on 1 and on N processes, interleaved, each run in its own
    process; append and return the parity record (its runs are in the results file)."""
    from scaleprobe.experiments.sweep import preflight  # heavy: rich

    if repeats < 1:
        raise ConfigError(f"--repeats must be at least 1, got {repeats}")
    plans = [parity_configs(cfg, r) for r in range(repeats)]
    preflight([c for pair in plans for c in pair])
    out = Path(cfg.out)
    exp_id = f"parity-{uuid.uuid4().hex[:8]}"
    procs = ProcessSet()
    recs_1: list[RunResult] = []
    recs_n: list[RunResult] = []
    try:
        for r, (one, multi) in enumerate(plans):
            for c, into in ((one, recs_1), (multi, recs_n)):
                n = c.world_size
                exp = point_experiment(exp_id, "parity", {"nproc": n}, r)
                rec = run_in_process(procs, PointPayload(c, exp), out / "points",
                                     f"parity-n{n}-r{r}")
                into.append(rec)
                if say is not None:
                    acc = _acc(rec)
                    say(f"[{r + 1}/{repeats}] seed {c.train.seed}, {n} process(es): "
                        f"{rec.status}" + (f", accuracy {acc:.4f}" if acc is not None else ""))
    except BaseException:
        procs.stop_all()
        raise
    finally:
        procs.close()
    parity = parity_record(recs_1, recs_n, exp_id, cfg.dist.parity_tolerance)
    res.append_jsonl(out / res.RESULTS_FILE, parity.to_dict())
    return parity
