"""Short labels that tell runs (or experiment points) apart in a figure: only what varies.

Every run carries the same long description (experiment id, every axis of its point, the
repeat index); printed whole under a bar it is cut, and two bars that differ in the last
word look alike. ``distinct_labels`` keeps the keys whose values differ between the records
shown, drops the experiment id when the rest already tells them apart, and numbers the ones
that still collide, so no two labels are equal and none needs cutting.
"""

from __future__ import annotations

import textwrap

from scaleprobe.core.fmt import repeat_label
from scaleprobe.core.result_model import RunResult
from scaleprobe.report.reading import records as R

EXPERIMENT = "experiment"
REPEAT = "repeat"


def identity(rec: RunResult, with_repeat: bool = True) -> dict[str, str]:
    """The keys that say which run this is: experiment label, point axes, repeat index; a
    run of no experiment is known by its name."""
    pt = rec.point
    if rec.exp_id is None and not pt:
        return {"run": rec.label}
    out = {EXPERIMENT: R.exp_label(rec, {}) or ""}
    out.update({k: str(v) for k, v in pt.items()})
    if with_repeat and rec.repeat is not None:
        out[REPEAT] = repeat_label(rec.repeat)
    return out


def _text(ident: dict[str, str], keys: list[str]) -> list[str]:
    """The parts of a label; the repeat rides on the part before it ('batch_size=16
    (repeat 2)')."""
    parts: list[str] = []
    for k in keys:
        if k not in ident:
            continue
        v = ident[k]
        if k == REPEAT and parts:
            parts[-1] = f"{parts[-1]} ({v})"
        else:
            parts.append(v if k in (EXPERIMENT, REPEAT, "run") else f"{k}={v}")
    return parts


def distinct_labels(recs: list[RunResult], with_repeat: bool = True,
                    sep: str = ", ") -> list[str]:
    """One label per record, built from the keys that vary between them; labels are unique."""
    idents = [identity(r, with_repeat) for r in recs]
    keys = list(dict.fromkeys(k for i in idents for k in i if k != REPEAT))
    keys += [REPEAT] if any(REPEAT in i for i in idents) else []  # always last
    varying = [k for k in keys if len({i.get(k) for i in idents}) > 1]
    if not varying:  # one record, or records that all look the same: say everything
        varying = keys
    without_exp = [k for k in varying if k != EXPERIMENT]
    if without_exp and len({tuple(_text(i, without_exp)) for i in idents}) == len(idents):
        varying = without_exp
    labels = [sep.join(_text(i, varying)) or r.label for i, r in zip(idents, recs, strict=True)]
    return _unique(labels)


def _unique(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for lab in labels:
        n = seen.get(lab, 0) + 1
        seen[lab] = n
        out.append(lab if n == 1 else f"{lab} ({n})")
    return out


def wrap(label: str, width: int = 18) -> str:
    """One line per part ('a, b' -> 'a\\nb'), each long part wrapped at ``width``; no text is
    dropped."""
    lines = []
    for part in label.split(", "):
        lines += textwrap.wrap(part, width, break_long_words=True, break_on_hyphens=True) or [""]
    return "\n".join(lines)
