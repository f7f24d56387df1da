"""Fully sharded data parallel with PyTorch's FSDP2 (``fully_shard``): every rank holds 1/N of
the parameters, of their gradients and of the optimizer's state; each unit's parameters are
all-gathered before its forward and again before its backward, and its gradients are
reduce-scattered after. nccl on CUDA, gloo on the CPU.

Sharding rule (``shard_units``), then the root last:

    a model with ``model.blocks``, an ``nn.ModuleList`` (GPT-style transformers): one unit
        per block; everything else (embeddings, final norm, head) belongs to the root unit
    any other model (digits_cnn, mlp, resnet): one unit per top-level child that holds
        parameters; a top-level ``ModuleList`` / ``ModuleDict`` contributes its items that
        hold parameters. Parameters shared between two units (tied weights) are not supported

``--amp bf16``, on CUDA and on the CPU alike: ``MixedPrecisionPolicy(param_dtype=bfloat16,
reduce_dtype=float32)`` (all-gathers move bf16, gradients are reduced in fp32; the sharded
master weights stay fp32), with autocast on as without FSDP. A module that holds parameters
and floating-point buffers of its own (BatchNorm: weight and bias beside running_mean /
running_var) must compute in one dtype with them, so each such module is sharded first as its
own unit under ``param_dtype=float32`` (its input cast to fp32, its output back to bf16:
``fp32_units``); cast to bf16 with its statistics left fp32 it fails ("Expected running_mean to
have type BFloat16 but got Float"). ``--amp fp16`` is refused (config_rules.py).

Measurement: the time the training thread is blocked on FSDP's collectives, per step, as the
``comm`` phase (``fsdp_comm.py``); the no_sync calibration (``set_requires_gradient_sync
(False)``, which skips the reduce-scatters but not the all-gathers) is kept as a cross-check.
Evaluation runs on every rank (each forward all-gathers from every rank); the progress rank
records it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

from scaleprobe.config.catalog import SMALL_MODELS
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.rank_record import RankComm
from scaleprobe.core.traits import TRAITS
from scaleprobe.measure.comm.instep import cross_check
from scaleprobe.measure.timer import WaitSplit
from scaleprobe.strategies.ddp import DDP
from scaleprobe.strategies.fsdp_comm import CUDA_REASON, IN_STEP_METHOD, WaitClock, install

RULE_BLOCKS = "one unit per model.blocks entry, then the root"
RULE_CHILDREN = "one unit per top-level child holding parameters, then the root"


def fsdp_api() -> tuple[Any, Any, Any]:
    """(fully_shard, MixedPrecisionPolicy, FSDPModule): ``torch.distributed.fsdp`` from torch
    2.6, ``torch.distributed._composable.fsdp`` in 2.4-2.5; a ConfigError before that."""
    try:
        # heavy: torch: torch.distributed.fsdp is more than `import torch` loads
        from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
    except ImportError:
        try:
            # heavy: torch: torch.distributed._composable.fsdp is more than `import torch` loads
            from torch.distributed._composable.fsdp import (
                FSDPModule,
                MixedPrecisionPolicy,
                fully_shard,
            )
        except ImportError:
            raise ConfigError(f"--strategy fsdp needs PyTorch's FSDP2 fully_shard (torch 2.4 "
                              f"or later); this is torch {torch.__version__}") from None
    return fully_shard, MixedPrecisionPolicy, FSDPModule


def _holds_params(m: nn.Module) -> bool:
    return next(m.parameters(), None) is not None


def keeps_fp32(m: nn.Module) -> bool:
    """A module whose own parameters must stay in the dtype of its own floating-point buffers
    (BatchNorm and the other running-statistics norms): it computes in fp32 under bf16."""
    if next(m.parameters(recurse=False), None) is None:
        return False
    return any(b.is_floating_point() for b in m.buffers(recurse=False))


def fp32_units(model: nn.Module) -> list[nn.Module]:
    """The modules sharded apart in fp32 under ``--amp bf16`` (``keeps_fp32``), model order."""
    return [m for m in model.modules() if keeps_fp32(m)]


def shard_units(model: nn.Module) -> tuple[list[nn.Module], str]:
    """The submodules that become FSDP units before the root, and the rule that chose them."""
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, nn.ModuleList) and len(blocks):
        return [b for b in blocks if _holds_params(b)], RULE_BLOCKS
    units: list[nn.Module] = []
    for child in model.children():
        if isinstance(child, (nn.ModuleList, nn.ModuleDict)):
            items = child.values() if isinstance(child, nn.ModuleDict) else child
            units += [m for m in items if _holds_params(m)]
        elif _holds_params(child):
            units.append(child)
    return units, RULE_CHILDREN


class FSDP(DDP):
    traits = TRAITS["fsdp"]
    name = "fsdp"
    distributed = True
    has_overlapped_comm = True  # the reduce-scatters run inside backward; no_sync skips them

    def __init__(self, dist_cfg: Any, device: torch.device) -> None:
        super().__init__(dist_cfg, device)
        self.api = fsdp_api()
        self.amp = "off"
        self.waits = WaitClock()
        self.unseen: dict[str, str] = {}
        self.units = 0
        self.fp32_units = 0  # units kept fp32 under --amp bf16 (BatchNorm and the like)
        self.rule: str | None = None

    def configure(self, cfg: Any) -> None:
        self.amp = cfg.train.amp
        self.warmup = int(cfg.train.warmup_steps or 0)
        # FSDP2 warns on every rank when a unit returns a view (digits_cnn's features end in
        # Flatten): an in-place op on it would skip the all-gather. scaleprobe's own small
        # models feed such a view only to a Linear, so the warning is kept off for them (a
        # user's model or torchvision's keeps it)
        self.quiet_views = cfg.model.name in SMALL_MODELS

    def wrap(self, model: nn.Module) -> nn.Module:
        fully_shard, policy_cls, fsdp_module = self.api
        mesh = init_device_mesh(self.device.type, (self.world,))
        kwargs: dict[str, Any] = {"mesh": mesh}
        apart: list[nn.Module] = []
        if self.amp == "bf16":
            kwargs["mp_policy"] = policy_cls(param_dtype=torch.bfloat16,
                                             reduce_dtype=torch.float32)
            apart = [m for m in fp32_units(model) if m is not model]
            fp32 = policy_cls(param_dtype=torch.float32, reduce_dtype=torch.float32,
                              output_dtype=torch.bfloat16)
            for m in reversed(apart):  # innermost first: fully_shard goes bottom-up
                fully_shard(m, mesh=mesh, mp_policy=fp32)
        if getattr(self, "quiet_views", False):
            warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a "
                                    "view tensor", category=UserWarning)
        units, self.rule = shard_units(model)
        units = [u for u in units if all(u is not m for m in apart)]
        for unit in units:
            fully_shard(unit, **kwargs)
        fully_shard(model, **kwargs)
        self.units = len(units) + len(apart) + 1
        self.fp32_units = len(apart)
        sharded = [m for m in model.modules() if isinstance(m, fsdp_module)]
        if self.world < 2:
            pass  # one rank: FSDP sends nothing, the comm phase is 0 in every step
        elif self.device.type == "cuda":
            self.unseen["comm"] = CUDA_REASON
        else:
            why = install(sharded, self.waits)
            if why:
                self.unseen["comm"] = why
        return model

    def unwrap(self, model: nn.Module) -> nn.Module:
        # fully_shard changes the module in place; torch.compile's wrapper is taken off
        return getattr(model, "_orig_mod", model)

    @contextlib.contextmanager
    def no_sync(self, model: nn.Module) -> Iterator[None]:
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)

    def step_timer(self, timer: Any) -> Any:
        if "comm" in self.unseen:
            return timer
        return WaitSplit(timer, self.waits)

    @property
    def evaluates(self) -> bool:
        return True  # every rank's forward takes part in the all-gathers

    def phases_unseen(self) -> dict[str, str]:
        return dict(self.unseen)

    def comm_record(self, calibration: dict[str, Any] | None) -> RankComm:
        cal = calibration or {}
        return RankComm.from_dict({
            "method": None if "comm" in self.unseen else IN_STEP_METHOD,
            "in_step": True, "exposed_reason": self.unseen.get("comm"),
            "wrapper_overhead_s": cal.get("wrapper_overhead_s"),
            "cross_check": cross_check(calibration) if self.world > 1 else None,
            "calls_per_step": self.waits.step_calls,
            "seconds_per_step": self.waits.seconds_per_step(getattr(self, "warmup", 0)),
            "units": self.units, "fp32_units": self.fp32_units, "sharding_rule": self.rule})

    def extra_metrics(self) -> dict[str, Any]:
        return {"fsdp_units": self.units, "fsdp_fp32_units": self.fp32_units,
                "sharding_rule": self.rule}
