"""What each training strategy is, as data: one torch-free table that the config checks, the
run driver, the result assembly and the report ask instead of testing a strategy's name.

The strategy classes (``scaleprobe.strategies``) carry the same record as their ``traits``
class attribute, so code holding a strategy object asks ``strategy.traits`` and code holding
only a name (a config, a result record) asks ``traits_of(name)``; both see one definition.
"""

from __future__ import annotations

from dataclasses import dataclass

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.registry import suggest


@dataclass(frozen=True)
class StrategyTraits:
    name: str
    launched: bool  # one process per rank, started through the elastic launcher
    towers: bool = False  # one process feeds every visible GPU (torch.nn.DataParallel)
    server_ranks: int = 0  # ranks that serve parameters instead of training (ps: rank 0)
    min_world: int = 1  # fewest processes the strategy runs with
    overlapped_comm: bool = False  # gradients all-reduced inside backward; no_sync calibrates
    explicit_comm: bool = False  # the step has communication phases of its own (timed "comm")
    audits_shards: bool = False  # every training rank reads its own DistributedSampler shard
    bucketed: bool = False  # gradient buckets (--bucket-cap-mb) decide the messages
    needs_any_source_recv: bool = False  # receives from whichever rank is ready (not nccl)
    fp16_loss_scaling: bool = True  # the process that steps the optimizer owns the loss scale
    # the standalone collective that moves one synchronisation's bytes (measure/comm/bench.py's ops),
    # timed inside a run after training to split exposed communication into transfer + overhead
    sync_collective: str | None = None
    # the network model's pattern (predict/costmodel.py); None = no communication between processes
    comm_pattern: str | None = None
    # parameters, gradients and optimizer state split over the ranks (FSDP): every rank's
    # forward takes part in gathering them, so evaluation runs on every rank
    shards_state: bool = False
    # the step's own communication is measured inside it as the comm phase (not carved out
    # of backward by the no_sync calibration, which stays a cross-check)
    comm_in_step: bool = False
    # the gradient noise scale (gns.py): from DDP's all-reduce hook (each rank's gradient and
    # the reduced one), or from two micro-batches of a step whose gradients after backward are
    # the process's whole batch (no sharding, no server, no averaging of its own)
    gns_from_hook: bool = False
    gns_micro_batches: bool = False
    # the ranks synchronise once every --average-every steps (local SGD), not every step: they
    # may be that many steps apart, and take that many more to stop together
    sync_every_k: bool = False

    @property
    def in_process(self) -> bool:
        """Runs in the launching process (no launcher, no process group)."""
        return not self.launched

    @property
    def has_server(self) -> bool:
        return self.server_ranks > 0

    def training_ranks(self, world: int) -> int:
        """Processes that compute gradients."""
        return world - self.server_ranks


TRAITS: dict[str, StrategyTraits] = {
    "single": StrategyTraits("single", launched=False, gns_micro_batches=True),
    "dp": StrategyTraits("dp", launched=False, towers=True, gns_micro_batches=True),
    "ddp": StrategyTraits("ddp", launched=True, overlapped_comm=True, audits_shards=True,
                          bucketed=True, sync_collective="all_reduce", comm_pattern="allreduce",
                          gns_from_hook=True, gns_micro_batches=True),
    "ps": StrategyTraits("ps", launched=True, server_ranks=1, min_world=2, explicit_comm=True,
                         audits_shards=True,
                         needs_any_source_recv=True, fp16_loss_scaling=False,
                         sync_collective="ps_push_pull", comm_pattern="ps"),
    "localsgd": StrategyTraits("localsgd", launched=True, explicit_comm=True,
                               audits_shards=True, sync_collective="all_reduce",
                               comm_pattern="localsgd", sync_every_k=True),
    # FSDP2: all-gather before each unit's forward and backward, reduce-scatter after it
    "fsdp": StrategyTraits("fsdp", launched=True, overlapped_comm=True, audits_shards=True,
                           fp16_loss_scaling=False, sync_collective="fsdp_step",
                           comm_pattern="fsdp", shards_state=True, comm_in_step=True),
}


def traits_of(name: str | None) -> StrategyTraits:
    """The traits of a strategy by name; a one-line ConfigError for an unknown one."""
    t = TRAITS.get(str(name))
    if t is None:
        near = suggest(str(name), TRAITS)
        hint = f"; did you mean {', '.join(near)}?" if near else f" (choices: {', '.join(TRAITS)})"
        raise ConfigError(f"unknown strategy '{name}'{hint}")
    return t


def known(name: str | None) -> StrategyTraits | None:
    """The traits of ``name``, or None for a name not in the table (old or foreign records)."""
    return TRAITS.get(str(name))
