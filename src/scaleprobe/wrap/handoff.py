"""What ``wrap``'s driver (run/script.py) and each rank's boot (wrap/boot.py) hand each other, in
one place both import: the settings the driver leaves in the run folder before the ranks
start (``Settings``, RUN_DIR/wrap.json), and what each rank leaves when its script has ended
(``RankOutcome``: its ``RankRecord`` and the ``ScriptFacts`` of how the script ended,
RUN_DIR/wrap-ranks/rank-R.json). Torch-free."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from scaleprobe.core.rank_record import RankRecord
from scaleprobe.core.record import Record
from scaleprobe.core.results import write_json_atomic

RANKS_DIR = "wrap-ranks"
SETTINGS = "wrap.json"


def rank_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / RANKS_DIR / f"rank-{rank}.json"


@dataclass
class Settings:
    """What every rank's boot needs of the run's configuration."""

    warmup_steps: int
    target: list[str]  # the command line after ``wrap --``
    stop_after: int | None = None  # --steps N: the script is stopped after N timed steps
    summary_every: float | None = None  # seconds
    profile_every: float | None = None
    gloo_io: str = "default"  # dist.gloo_io: gloo's socket threads' policy from the first step

    def write(self, run_dir: str | Path) -> None:
        write_json_atomic(Path(run_dir) / SETTINGS, asdict(self))

    @classmethod
    def read(cls, run_dir: str | Path) -> Settings:
        return cls(**json.loads((Path(run_dir) / SETTINGS).read_text()))


@dataclass
class ScriptFacts(Record):
    """How one rank's script ended, as its boot saw it."""

    exit_code: int | None = None  # as scaleprobe reports it (130: interrupted)
    optimizer_steps: int | None = None  # optimizer.step() calls seen
    loader: dict[str, Any] | None = None  # the training DataLoader (loaderlog.LoaderLog.facts)
    indices_seen: bool | None = None  # every epoch's sample indices were seen (the audit)
    stopped_after: int | None = None  # wrap --steps stopped it after these timed steps
    error: str | None = None  # its own error line
    interrupted: str | None = None  # the signal that stopped it
    refused: str | None = None  # what it did that wrap cannot run (its own ranks)
    exited: str | None = None  # "os._exit(0)"
    rank: int | None = None  # set where the driver reads it
    extra: dict[str, Any] = field(default_factory=dict)

    OPTIONAL: ClassVar[tuple[str, ...]] = ("stopped_after", "error", "interrupted", "refused",
                                           "exited", "rank")


@dataclass
class RankOutcome:
    """What one rank leaves when its script has ended."""

    record: RankRecord
    script: ScriptFacts

    def write(self, run_dir: str | Path, rank: int) -> None:
        path = rank_path(run_dir, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {"record": self.record.to_dict(),
                                 "script": self.script.to_dict()})

    @classmethod
    def read_all(cls, run_dir: str | Path) -> list[RankOutcome]:
        """Every rank's outcome that can be read, in rank order; ``script.rank`` set."""
        files = sorted(Path(run_dir, RANKS_DIR).glob("rank-*.json"),
                       key=lambda p: int(p.stem.split("-")[1]))
        out = []
        for f in files:
            try:
                doc = json.loads(f.read_text())
                one = cls(RankRecord.from_dict(doc["record"]), ScriptFacts.from_dict(doc["script"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            one.script.rank = int(f.stem.split("-")[1])
            out.append(one)
        return out
