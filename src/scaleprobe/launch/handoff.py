"""What the built-in loop's ranks hand the run driver, in one place both sides import: every
rank's ``RankRecord``, gathered to rank 0 and returned through the launcher (pickled), or,
when the ranks were stopped and the launcher no longer reads return values, left by rank 0 in
the run folder's hand-off file (JSON). A rank's error travels as ``measure.heartbeat.RankError``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from scaleprobe.core.rank_record import RankRecord
from scaleprobe.core.results import write_json_atomic
from scaleprobe.protocols import Launched

HANDOFF = ".ranks-interrupted.json"  # rank 0's gathered records when the ranks were stopped


def arrived(ranks: Sequence[RankRecord]) -> Launched:
    """The ranks' records as the driver reads them: through ``RankRecord``'s rules, as from a
    file (a loss that is not finite reads as not measured), in rank order."""
    return Launched(sorted((RankRecord.from_dict(r.to_dict()) for r in ranks),
                           key=lambda r: r.rank))


def leave(run_dir: str | Path, ranks: Sequence[RankRecord]) -> None:
    """Rank 0's side: the gathered records in the hand-off file."""
    write_json_atomic(Path(run_dir) / HANDOFF, [r.to_dict() for r in ranks])


def take(run_dir: str | Path) -> Launched | None:
    """The driver's side: the records rank 0 left (the file is removed), or None."""
    path = Path(run_dir) / HANDOFF
    try:
        raws = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    finally:
        path.unlink(missing_ok=True)
    ok = isinstance(raws, list) and raws and all(isinstance(r, dict) for r in raws)
    return arrived([RankRecord.from_dict(r) for r in raws]) if ok else None
