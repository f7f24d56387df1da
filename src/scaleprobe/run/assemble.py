"""From the ranks' records and the monitor's figures to a run's result.

``build_result`` is the one place a result is made: a pure function (no file, no clock, no
process) from the ranks' ``RankRecord``s and the monitor's summaries to a ``RunResult``
(``run/finalize.py`` gathers its inputs, calls it and writes the files)."""

from __future__ import annotations

from typing import Any

from scaleprobe.config.sections import RunConfig
from scaleprobe.core import metrics as M
from scaleprobe.core.invariants import check_run
from scaleprobe.core.rank_record import RankFlops, RankRecord
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.run_metrics import Peak
from scaleprobe.core.run_parts import Audit, Batch, Load, RankSummary, Straggler, TimeToTarget
from scaleprobe.core.thresholds import DEFAULT
from scaleprobe.core.traits import traits_of
from scaleprobe.features.gns import summarize as summarize_gns
from scaleprobe.features.target import not_reached_line, summarize
from scaleprobe.measure import outside
from scaleprobe.measure.aggregate import epoch_time, rank_summary, straggler
from scaleprobe.measure.audit import audit
from scaleprobe.measure.compiled import block, result_fields
from scaleprobe.measure.stats import median
from scaleprobe.run import assemble_host as H
from scaleprobe.run.assemble_comm import comm_block


def build_result(result: RunResult, cfg: RunConfig, ranks: list[RankRecord] | None,
                 monitor: dict[str, Any], outside: dict[str, Any] | None) -> RunResult:
    """The run's figures from its ranks' records (``None``: no rank returned one),
    ``monitor`` (``Monitor.summary`` over the timed window, plus ``gpu_reason``) and
    ``outside`` (``Monitor.outside_load``: what ran beside the run; None: not measured). Fills and returns
    ``result``; a bug in summarising marks it failed instead of losing it."""
    if ranks:
        try:
            _metrics(result, cfg, ranks, monitor)
            _target(result, cfg, ranks)
            _gns(result, ranks)
            _checks(result, head_rank(ranks))
        except Exception as e:  # a bug in summarising must not lose the run
            result.status = "failed"
            result.error = f"summarising the run failed: {type(e).__name__}: {e}"
    else:
        result.metrics.cpu_util_pct = monitor.get("cpu_util_pct")
        result.metrics.peak_mem_bytes.host = monitor.get("host_mem_peak_bytes")
        for k in ("host_baseline", "host_file_growth", "host_net"):
            result.null_reasons[f"peak_mem_bytes.{k}"] = "no rank returned a record"
    _load(result, outside)
    return result


def head_rank(ranks: list[RankRecord]) -> RankRecord:
    """The first rank that trained (a parameter server's rank 0 does not)."""
    return next((r for r in ranks if r.step_times_s), ranks[0])


def _target(result: RunResult, cfg: RunConfig, ranks: list[RankRecord]) -> None:
    """--target: the time to it from the evaluating rank's record (target.summarize); a run
    that ended at --max-epochs below it is ``target_not_reached``."""
    if cfg.train.target is None:
        return

    raw = next((r.target for r in ranks if r.target), None)
    if raw is None:
        result.null_reasons["target"] = "no evaluation ran (stopped before the first one)"
        return
    tt = summarize(raw, result.metrics.steps_per_epoch, result.batch.global_,
                   cfg.train.max_epochs)
    result.target = TimeToTarget.from_dict(tt)
    m = result.metrics
    m.joules_to_target = M.joules_to_target(m.joules_per_sample, m.samples_per_s,
                                            tt.get("time_to_target_s"))
    if not tt["reached"]:
        for k in ("time_to_target_s", "steps_to_target", "epochs_to_target",
                  "samples_to_target", "steps_to_target_lo", "time_to_target_lo_s"):
            result.null_reasons[f"target.{k}"] = "the target was not reached"
        if result.status == "ok":
            result.status = "target_not_reached"
            result.error = not_reached_line(tt)


def _gns(result: RunResult, ranks: list[RankRecord]) -> None:
    """The gradient noise scale from the ranks' squared norms (gns.py); absent when off."""
    got = [r.gns for r in ranks if r.gns is not None]
    if got:
        result.gns, why = summarize_gns(got, result.batch.global_)
        result.null_reasons.update(why)


def _epoch_starts(m: Any, raw0: RankRecord, why: dict[str, str]) -> None:
    """The wait of the timed steps that took an epoch's first batch, against the window's: a
    DataLoader prefetches nothing across an epoch boundary, so with few steps per epoch that
    first wait recurs, and the median step (samples/s) can leave it out. The wait is the
    training loader's own where the rank timed it (wrap: a step can also hold a validation
    pass), else the step's data phase (the built-in loop's, which holds nothing else)."""
    data = raw0.phase_times_s.get("data") or []
    steps = raw0.step_times_s or []
    if not data or "data" in raw0.phases_unseen:
        why["epoch_start_data_s"] = "no data wait was timed"
        return
    own = raw0.epoch_start_wait_s
    pairs = ([(i, w) for i, w in zip(raw0.epoch_start_steps, own, strict=False)
              if 0 <= i < len(data)] if own else
             [(i, data[i]) for i in sorted(set(raw0.epoch_start_steps)) if 0 <= i < len(data)])
    m.epoch_starts_timed = len(pairs)
    if not pairs:
        why["epoch_start_data_s"] = "no timed step took an epoch's first batch"
        return
    waits = [w for _, w in pairs]
    m.epoch_start_data_s = median(waits)
    total = sum(data)
    m.epoch_start_data_share = min(1.0, sum(waits) / total) if total > 0 else None
    window = sum(steps) if len(steps) == len(data) else None
    m.epoch_start_window_share = min(1.0, sum(waits) / window) if window else None
    taken = {i for i, _ in pairs}
    rest = [d for i, d in enumerate(data) if i not in taken]
    m.epoch_start_other_data_s = median(rest) if rest else None
    if not rest:
        why["epoch_start_other_data_s"] = "every timed step took an epoch's first batch"


def _metrics(result: RunResult, cfg: RunConfig, ranks: list[RankRecord],
             mon: dict[str, Any]) -> None:
    summaries = [rank_summary(r) for r in ranks]
    result.ranks = summaries
    head = next((i for i, r in enumerate(ranks) if r.step_times_s), 0)
    raw0, r0 = ranks[head], summaries[head]
    trainers = [r for r in summaries if r.step_time_s]
    _steps(result, raw0, r0, trainers, len(ranks))
    _epochs(result, raw0, len(trainers))
    _monitored(result, mon)
    _evaluated(result, cfg, ranks, raw0)
    H.page_faults(result, ranks)
    H.gloo_io(result, ranks)
    H.memory(result, ranks, mon)
    if not cfg.measure.memory_probe:
        result.null_reasons["memory_facts"] = ("not probed: --no-memory-probe "
                                               "(measure.memory_probe = false)")
    _flops(result, ranks, raw0)
    _compile(result, cfg, ranks, raw0)
    server = next((r.strategy_metrics for r in ranks if r.is_server), None) or {}
    s = straggler(trainers, server.get("per_worker_arrival_lag_s"))
    result.straggler = Straggler.from_dict(s) if s else None
    comm_block(result, cfg, raw0, ranks)
    _audit(result, cfg, ranks, raw0)
    _resolved(result, ranks, raw0)


def _steps(result: RunResult, raw0: RankRecord, r0: RankSummary,
           trainers: list[RankSummary], world: int) -> None:
    """The batch, the timed window's figures and the step breakdown (the head rank's)."""
    m, why = result.metrics, result.null_reasons
    per_proc = raw0.samples_per_step
    result.batch = Batch(per_device=per_proc // max(1, raw0.towers or 1), per_process=per_proc,
                         global_=per_proc * max(1, len(trainers)), world_size=world,
                         training_ranks=len(trainers))
    st = r0.step_time_s
    m.step_time_s = st
    m.steps_timed = raw0.steps_timed
    m.steps_done = raw0.steps_done
    # a rank's step log (it died or hung) says nothing of why: the run's ending does
    m.stop_reason = raw0.stop_reason or {"failed": "failed", "oom": "failed",
                                         "interrupted": "interrupted"}.get(result.status)
    m.breakdown_s = r0.breakdown_s
    for p, reason in raw0.phases_unseen.items():
        why[f"breakdown_s.{p}"] = reason
    if not st:
        why.setdefault("step_time_s", "no step was timed (too few steps after warm-up?)")
        why["samples_per_s_by_rank"] = why["step_time_rank"] = why["step_time_s"]
        return
    typical = r0.breakdown_s.total_s()
    # sum over training ranks of each one's samples over its own timed window: equals
    # global batch x steps / window when ranks move in lockstep, and stays right when they
    # do not (asynchronous parameter server)
    rates = [r.samples_per_s for r in trainers if r.samples_per_s is not None]
    m.samples_per_s = sum(rates) if rates else None
    if not rates:
        why["samples_per_s"] = "no rank counted the samples of its steps"
    step_rates = [r.samples_per_s_median_step for r in trainers
                  if r.samples_per_s_median_step is not None]
    m.samples_per_s_median_step = sum(step_rates) if step_rates else None
    m.samples_per_s_by_rank = {str(r.rank): r.samples_per_s for r in trainers}
    m.step_time_rank = r0.rank  # the step figures are this training rank's
    data = r0.breakdown_s.data
    m.data_wait_fraction = data / typical if typical and data is not None else None
    comm = r0.breakdown_s.comm
    m.comm_fraction = comm / typical if typical and comm is not None else None


def _epochs(result: RunResult, raw0: RankRecord, trainers: int) -> None:
    """Tokens/s, the rank's facts of the run (parameters, learning rate) and epoch time."""
    m, why = result.metrics, result.null_reasons
    info = raw0.info
    result.batch.tokens_per_sample = info.tokens_per_sample  # token tasks (lm)
    m.tokens_per_s = M.tokens_per_s(m.samples_per_s, info.tokens_per_sample)
    if info.tokens_per_sample and m.tokens_per_s is None:
        why["tokens_per_s"] = why.get("samples_per_s") or why.get("step_time_s") or "no rate"
    m.memory_pass = raw0.memory_pass
    m.unigram_entropy_nats = info.unigram_entropy_nats
    m.param_count = info.param_count
    m.lr_effective = info.lr_effective
    m.lr_warmup_steps = info.lr_warmup_steps
    per_proc = raw0.samples_per_step
    spe = max(1, info.train_samples // max(1, trainers) // max(1, per_proc))
    m.steps_per_epoch = spe
    m.train_samples = info.train_samples or None
    st = m.step_time_s
    m.epoch_time_s, m.epoch_time_projected = epoch_time(raw0, st.median if st else None, spe)
    if not info.train_samples and m.epoch_time_projected:  # no dataset size to project with
        m.epoch_time_s = m.epoch_time_projected = m.steps_per_epoch = None
        why["epoch_time_s"] = "not projected: the size of the training data is unknown"
    m.epoch_times_s = raw0.epoch_wall_s
    _epoch_starts(m, raw0, why)


def _monitored(result: RunResult, mon: dict[str, Any]) -> None:
    """CPU and GPU utilisation, GPU power and energy over the timed window (the monitor)."""
    m, why = result.metrics, result.null_reasons
    m.cpu_util_pct = mon.get("cpu_util_pct")
    m.gpu_util_pct = mon.get("gpu_util_pct")
    m.gpu_power_w = mon.get("gpu_power_w")
    for k in ("gpu_util_pct", "gpu_power_w"):
        if getattr(m, k) is None:
            why[k] = mon.get("gpu_reason") or "no NVML reading"
    H.energy(result, mon)


def _evaluated(result: RunResult, cfg: RunConfig, ranks: list[RankRecord],
               raw0: RankRecord) -> None:
    """Loss, skipped samples and the evaluation's figures (accuracy or the task's own)."""
    m, why = result.metrics, result.null_reasons
    m.loss_first, m.loss_last = raw0.loss_first, raw0.loss_last
    if m.loss_last is None:
        why.setdefault("loss_last", "not recorded: wrap does not read the script's loss into "
                       "its record" if cfg.script.path else "no step trained")
    m.bad_samples_skipped = sum(r.bad_samples for r in ranks)
    ev = next((r.eval for r in ranks if r.eval), {})
    for k, v in ev.items():  # accuracy, or a task's own metrics (map50, ...)
        if m.declares(k):
            setattr(m, k, v)
        else:
            m.extra[k] = v
    if not cfg.train.eval and cfg.train.target is not None and m.accuracy is None:
        why.setdefault("accuracy", "no evaluation after the window: --target's evaluations "
                       "are in the target block (target.curve)")
    elif not cfg.train.eval:
        why.setdefault("accuracy", "not evaluated (add --eval)")
    elif m.accuracy is None and cfg.task.task != "classification":  # the task's own metric
        why.setdefault("accuracy", f"--task {cfg.task.task} measures its own metric: "
                       f"{', '.join(k for k in ev if k != 'eval_samples') or 'see metrics'}")


def _audit(result: RunResult, cfg: RunConfig, ranks: list[RankRecord],
           raw0: RankRecord) -> None:
    """The shard audit over the ranks that take batches (a parameter server reads none)."""
    readers = [r.indices for r in ranks if not r.is_server]
    if not (traits_of(cfg.dist.strategy).audits_shards and cfg.dist.audit and len(ranks) > 1
            and readers):
        return
    if not all(readers):  # a rank that died left its steps, not the samples it read
        result.null_reasons["audit"] = "not run: a rank's sample indices were lost with it"
        return
    result.audit = Audit.from_dict(audit(readers, raw0.info.train_samples,
                                         raw0.samples_per_step, raw0.epochs_complete))


def _resolved(result: RunResult, ranks: list[RankRecord], raw0: RankRecord) -> None:
    """What the run resolved (data shape, the GPT it built, threads) and the ranks' files."""
    info = raw0.info
    result.dataset_source = info.dataset_source
    result.input_mode = info.input_mode
    result.resolved = {"data.image_size": info.image_size, "data.num_classes": info.num_classes}
    if info.seq_len:  # token data and the GPT shape the run built
        result.resolved.update({"data.seq_len": info.seq_len, "data.vocab_size": info.vocab_size,
                                **{f"model.{k}": v for k, v in (info.model_shape or {}).items()}})
    if raw0.threads:  # what a training rank used, not the launching process's
        result.env.threads = raw0.threads
    for r in ranks:  # every rank's traces; the first trainer's top operators; TensorBoard
        for k, v in (r.observed.to_dict() if r.observed is not None else {}).items():
            if k == "traces" and v:
                result.paths.setdefault("traces", []).extend(v)
            elif v and k not in result.paths:
                result.paths[k] = v


def _flops(result: RunResult, ranks: list[RankRecord], raw0: RankRecord) -> None:
    """FLOPs per step and per sample (raw0's count; every training rank runs the same
    shapes), achieved FLOP/s and MFU against the peak of the devices the run trained on."""
    m, why = result.metrics, result.null_reasons
    f = raw0.flops or RankFlops()
    per_rank = f.flops_per_step
    trainers = [r for r in ranks if not r.is_server]
    if per_rank:
        m.flops_per_step = float(per_rank) * len(trainers)
        m.flops_per_sample = M.flops_per_sample(per_rank, raw0.samples_per_step)
        m.achieved_flops_per_s = M.achieved_flops_per_s(m.flops_per_sample, m.samples_per_s)
        if m.achieved_flops_per_s is None and m.step_time_s is not None:
            m.achieved_flops_per_s = M.flops_per_s_of_steps(m.flops_per_step,
                                                            m.step_time_s.median)
    else:
        why["flops_per_step"] = f.reason or "not counted"
    if f.peak is not None:
        m.peak = Peak.from_dict({**f.peak.to_dict(), "devices": _devices(trainers)})
        m.mfu = M.mfu(m.achieved_flops_per_s, m.peak.flops_per_s, m.peak.devices)
        if m.mfu is not None and m.mfu > 1.0:
            # a share above the whole is no share: the peak is not the device's
            why["mfu"] = over_peak_reason(m.mfu, m.achieved_flops_per_s, m.peak)
            m.mfu = None
    else:
        why["peak"] = f.peak_reason or "no peak for this device"
    if m.mfu is None and "mfu" not in why:
        why["mfu"] = why.get("flops_per_step") or why.get("peak") or "no step was timed"
    if m.achieved_flops_per_s is None:
        why["achieved_flops_per_s"] = why.get("flops_per_step") or "no step was timed"


def over_peak_reason(mfu: float, achieved: float | None, peak: Peak) -> str:
    """Why a run's MFU is null where the model's FLOP/s exceeded the peak they are held to:
    that peak is not the device's (on a CPU without bf16 instructions, bf16's matrix products
    ran at 1.3 GFLOP/s while the digits CNN's bf16 convolutions reached 3.9: "301%")."""
    per = (peak.flops_per_s or 0) * (peak.devices or 1)
    return (f"not shown: the run's {(achieved or 0) / 1e9:.3g} GFLOP/s exceed the "
            f"{per / 1e9:.3g} GFLOP/s of its {peak.dtype or ''} peak ({mfu:.0%}), so that "
            f"figure is not this device's peak ({peak.source or 'its source unknown'})")


def _compile(result: RunResult, cfg: RunConfig, ranks: list[RankRecord],
             raw0: RankRecord) -> None:
    """torch.compile's compilations (measure/compiled.py): raw0's figures and events, and the
    most compilations inside the timed window of any rank."""
    off = ("the script compiled nothing" if cfg.script.path else "not compiled (add --compile)")
    fields, why = result_fields(raw0.compile, off, [r.compile for r in ranks if r.compile])
    for k, v in fields.items():
        setattr(result.metrics, k, v)
    result.null_reasons.update(why)
    result.compile = block(raw0.compile, None if cfg.script.path else cfg.model.compile_mode,
                           None if cfg.script.path else cfg.model.compile_backend)
    eager = raw0.compile.eager if raw0.compile is not None else None
    if result.compile is not None and eager is not None:
        ph = raw0.phase_times_s or {}
        fb = [f + b for f, b in zip(ph.get("forward") or [], ph.get("backward") or [],
                                    strict=False)]
        st = result.metrics.step_time_s
        vs = M.compile_vs_eager(fb, eager.fwd_bwd_s, st.median if st else None,
                                result.metrics.compile_time_s, eager.compiled_fwd_bwd_s)
        result.compile["vs_eager"] = vs
        if vs is None:
            result.null_reasons["compile.vs_eager"] = eager.reason or "no samples"


def _devices(trainers: list[RankRecord]) -> int:
    """Devices the training ranks computed on: distinct GPUs (a DataParallel process feeds
    ``towers``), or on CPUs one per host (the peak is the host's, with all its cores)."""
    gpus = {(r.host, r.device): max(1, r.towers or 1) for r in trainers
            if str(r.device or "").startswith("cuda")}
    if gpus:
        return sum(gpus.values())
    return max(1, len({r.host for r in trainers}))


def _checks(result: RunResult, head: RankRecord) -> None:
    """The figures the invariants need, then the invariants (``scaleprobe.core.invariants``)."""
    m = result.metrics
    m.window_s = head.window_s
    t0, t1 = head.clock_window or (None, None)
    m.window_clock = [t0, t1] if t0 is not None and t1 is not None else None
    if result.audit is not None and result.audit.ok is False:
        m.unique_samples_per_s = M.unique_samples_per_s(m.samples_per_s,
                                                        result.audit.unique_fraction)
    result.invariants = check_run(result)
    if (result.audit is not None and result.audit.ok is False
            and result.status in ("ok", "target_not_reached")):  # the ranks did not train as one
        result.status = "audit_failed"
        result.error = f"shard audit failed: {result.audit.detail}"[:1000]


def _load(result: RunResult, window: dict[str, Any] | None) -> None:
    """Outside-the-tree figures and the under-load verdict (rule: core/thresholds.py)."""
    if window is None:
        result.null_reasons["outside_cpu_s"] = "not measured: no monitor window"
        return
    try:
        metrics, reasons, load = outside.result_fields(window, DEFAULT)
    except Exception as e:  # a bug here must not lose the run's own figures
        metrics, reasons, load = {}, {"outside_cpu_s": f"not summarised: {type(e).__name__}: {e}"}, None
    for k, v in metrics.items():
        setattr(result.metrics, k, v)
    result.load = Load.from_dict(load) if load else None
    result.null_reasons.update(reasons)
