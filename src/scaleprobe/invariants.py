"""Invariants every run result must hold, checked when the result is made and again by the
report (old files included). A violated invariant is never fixed up silently: the result
keeps its figures and lists what does not hold, and the summary line and the report say so.

    shares          data wait, communication (and every breakdown phase) within 0..100% of
                    the step
    no comm at 1    one training process has nothing to communicate: a comm phase there is
                    a wrapper's own cost mislabelled
    window          samples/s from the median step agrees with global batch x timed steps /
                    timed window within WINDOW_TOLERANCE (steps that vary widely, e.g. a
                    loader that stalls every few steps, make the median flatter the run)
    unique data     with a failing shard audit, samples/s counts samples read twice: the
                    result also gives unique samples/s (``metrics.unique_samples_per_s``)

Pure Python over the record's dicts; no torch.
"""

from __future__ import annotations

from typing import Any

# median-step samples/s vs whole-window samples/s: a run whose steps are stable agrees within
# a few percent; 25% is outside the 10-18% process noise of the reference machine
WINDOW_TOLERANCE = 0.25
SHARES = ("data_wait_fraction", "comm_fraction")


def _num(v: Any) -> float | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def check_run(rec: dict[str, Any]) -> list[dict[str, str]]:
    """The violated invariants of a run record: ``[{name, detail}]`` (empty when all hold)."""
    if rec.get("status") != "ok":
        return []
    m = rec.get("metrics") or {}
    out: list[dict[str, str]] = []
    for k in SHARES:
        v = _num(m.get(k))
        if v is not None and not 0.0 <= v <= 1.0:
            out.append({"name": "shares", "detail": f"{k} is {v:.3f}, outside 0..1"})
    bd = m.get("breakdown_s") or {}
    neg = [p for p, v in bd.items() if (_num(v) or 0.0) < 0]
    if neg:
        out.append({"name": "shares", "detail": f"negative phase time: {', '.join(neg)}"})
    batch = rec.get("batch") or {}
    trainers = batch.get("training_ranks") or batch.get("world_size")
    comm = _num(bd.get("comm"))
    if trainers == 1 and comm and comm > 0:
        out.append({"name": "no comm at 1",
                    "detail": f"{comm * 1000:.1f} ms of communication with one training process"})
    window = window_samples_per_s(rec)
    sps = _num(m.get("samples_per_s"))
    if window and sps and abs(sps / window - 1.0) > WINDOW_TOLERANCE:
        out.append({"name": "window",
                    "detail": f"{sps:.1f} samples/s from the median step vs {window:.1f} over the "
                              f"timed window ({sps / window:.2f}x): step times vary widely"})
    audit = rec.get("audit")
    if isinstance(audit, dict) and audit.get("ok") is False and m.get("unique_samples_per_s") is None:
        out.append({"name": "unique data",
                    "detail": "the shard audit failed but no unique samples/s was given"})
    return out


def window_samples_per_s(rec: dict[str, Any]) -> float | None:
    """Global batch x timed steps / timed window seconds (the first training rank's window).
    Only for lockstep strategies: an asynchronous parameter server's workers have their own."""
    m = rec.get("metrics") or {}
    batch = (rec.get("batch") or {}).get("global")
    steps, window = _num(m.get("steps_timed")), _num(m.get("window_s"))
    if not batch or not steps or not window:
        return None
    if ((rec.get("config") or {}).get("dist") or {}).get("ps_mode") == "async":
        return None
    return batch * steps / window
