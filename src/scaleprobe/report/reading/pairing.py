"""Like for like: a pairing in a diagnosis varies the configuration keys it names and
matches on every other key of the run's resolved configuration, or it is not made.

Observed before this rule: "input-bound" paired a 64 px JPEG run with a 32 px synthetic run,
and "loader workers compete with compute" paired runs that also differed in transform and
optimizer; each verdict then measured the other difference, not the one it named.

    differing_keys(a, b)                  {"data.image_size", "train.optimizer"}
    like_for_like(a, b, varied=DATASET_KEYS)   False: image size differs too
    like_for_like_groups(runs, WORKER_KEYS)    runs that differ at most in loader workers
"""

from __future__ import annotations

from typing import Any

from scaleprobe.config.sections import LATER_DEFAULTS
from scaleprobe.core.result_model import RunResult
from scaleprobe.features.target import experiment_seed

# keys that never change what is measured: where results go, the run's label, the progress
# bar, where generated data is cached, the rendezvous address, the memory probe (its steps
# run after the window)
IGNORED_KEYS = frozenset({"out", "name", "measure.progress", "data.cache_dir",
                          "dist.rdzv_endpoint", "dist.master_port", "measure.memory_probe"})
# what comes with a dataset: a pairing that varies the dataset varies these with it
DATASET_KEYS = frozenset({"data.dataset", "data.data_dir", "data.download", "data.num_samples",
                          "data.num_classes", "data.val_fraction", "data.skip_bad_samples"})
# loader worker processes: 0 workers is the naive loader
WORKER_KEYS = frozenset({"data.workers", "data.loader"})
_ABSENT = "<absent>"


def resolved_config(rec: RunResult) -> dict[str, Any]:
    """The run's configuration flattened to dotted keys (``data.image_size``), with what the
    run resolved from a null setting (``rec.resolved``: the dataset's own image size and
    classes) filled in, so "natural size" on two datasets is compared as the two sizes; and
    under --target a repeat's seed as the experiment's own (repeats differ in seed by
    design, and are paired by it)."""
    flat = _flatten(rec.config_dict())
    for k, v in (LATER_DEFAULTS.items() if flat else ()):  # older records: their defaults
        flat.setdefault(k, v)
    for k, v in (rec.resolved or {}).items():
        if flat.get(k) is None and v is not None:
            flat[k] = v
    seed = flat.get("train.seed")
    if isinstance(seed, int):
        flat["train.seed"] = experiment_seed(seed, rec.repeat, flat.get("train.target"))
    return flat


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def differing_keys(a: RunResult, b: RunResult,
                   ignore: frozenset[str] = IGNORED_KEYS) -> set[str]:
    """Configuration keys whose values differ between two runs (a key one of them lacks
    differs too), leaving out keys that do not change the measurement."""
    fa, fb = resolved_config(a), resolved_config(b)
    return {k for k in fa.keys() | fb.keys()
            if k not in ignore and fa.get(k, _ABSENT) != fb.get(k, _ABSENT)}


def like_for_like(a: RunResult, b: RunResult, varied: Any = frozenset()) -> bool:
    """True when ``a`` and ``b`` differ in no configuration key but those in ``varied`` (full
    dotted keys). Runs without a recorded configuration are never like for like."""
    if not a.config or not b.config:
        return False
    return not differing_keys(a, b) - set(varied)


def like_for_like_groups(recs: list[RunResult],
                         varied: Any = frozenset()) -> list[list[RunResult]]:
    """``recs`` split into groups in which every two runs are ``like_for_like`` for
    ``varied``; runs without a configuration are left out. First-seen order."""
    groups: list[list[RunResult]] = []
    for r in recs:
        if not r.config:
            continue
        home = next((g for g in groups if like_for_like(g[0], r, varied)), None)
        if home is None:
            groups.append([r])
        else:
            home.append(r)
    return groups
