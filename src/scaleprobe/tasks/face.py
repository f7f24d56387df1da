"""Face embeddings: a backbone with an L2-normalised embedding head, trained with a triplet loss
(online semi-hard mining, FaceNet style, on ``PKBatchSampler``'s P identities x K images) or a
softmax over identities; evaluated by face verification on pairs (``tasks/verification.py``).

Under ddp (and ps, local SGD) each rank builds its PK batches from its own shard and mines
triplets only within its own batch: no cross-rank mining, so splitting a global batch over
more ranks gives each anchor fewer negatives. docs/TASKS.md ("Face embeddings") gives the
loss, the mining rule and where the verification pairs come from.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Sampler

from scaleprobe.core.errors import ConfigError, DataError
from scaleprobe.data.loader import collate_indexed
from scaleprobe.tasks import TASKS, evaluating, on_device
from scaleprobe.tasks.classification import Classification
from scaleprobe.tasks.verification import verification_accuracy

TRIPLET_MARGIN = 0.2  # FaceNet's margin on squared distances between unit vectors
EVAL_PAIRS_PER_KIND = 1000  # generated pairs: at most this many same and as many different


class EmbeddingNet(nn.Module):
    """trunk -> linear embedding. In training with a classifier (softmax loss) the forward
    returns identity logits; otherwise the L2-normalised embedding."""

    def __init__(self, trunk: nn.Module, in_features: int, embedding_dim: int,
                 num_identities: int | None = None) -> None:
        super().__init__()
        self.trunk = trunk
        self.embed = nn.Linear(in_features, embedding_dim)
        self.classifier = nn.Linear(embedding_dim, num_identities) if num_identities else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = self.embed(self.trunk(x))
        if self.classifier is not None and self.training:
            return self.classifier(e)
        return F.normalize(e.float(), dim=1)


def split_head(base: nn.Module) -> tuple[nn.Module, int]:
    """(trunk, width of its output): scaleprobe's small models give ``.features`` and
    ``.out_features``; for any other model the last ``nn.Linear`` becomes an identity."""
    if hasattr(base, "features") and isinstance(getattr(base, "out_features", None), int) \
            and hasattr(base, "head"):
        return base.features, base.out_features
    last = None
    for name, mod in base.named_modules():
        if isinstance(mod, nn.Linear):
            last = (name, mod)
    if last is None:
        raise ConfigError(f"{type(base).__name__} has no nn.Linear head to replace with an "
                          "embedding; the face task needs a classifier-shaped model")
    name, lin = last
    parent = base.get_submodule(name.rpartition(".")[0]) if "." in name else base
    setattr(parent, name.rpartition(".")[2], nn.Identity())
    return base, lin.in_features


# ---------------------------------------------------------------------------------------------
# loss


def pairwise_sq_dist(e: torch.Tensor) -> torch.Tensor:
    """Squared euclidean distances between the rows of ``e`` (B x D) -> B x B."""
    sq = (e * e).sum(1)
    return (sq[:, None] + sq[None, :] - 2 * e @ e.t()).clamp_min(0)


def semihard_triplet_loss(emb: torch.Tensor, labels: torch.Tensor,
                          margin: float = TRIPLET_MARGIN) -> torch.Tensor:
    """Mean triplet loss over every (anchor, positive) pair of the batch, each with its
    semi-hard negative (see the module docstring)."""
    d = pairwise_sq_dist(emb.float())
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(len(labels), dtype=torch.bool, device=emb.device)
    pos = same & ~eye  # (a, p)
    neg = ~same  # (a, n)
    d_ap = d.unsqueeze(2)  # a, p, 1
    d_an = d.unsqueeze(1)  # a, 1, n
    outside = neg.unsqueeze(1) & (d_an > d_ap)  # a, p, n: negatives beyond the positive
    inf = torch.tensor(float("inf"), device=emb.device, dtype=d.dtype)
    semi = torch.where(outside, d_an, inf).amin(2)
    farthest = torch.where(neg, d, -inf).amax(1, keepdim=True).expand_as(semi)
    chosen = torch.where(outside.any(2), semi, farthest)
    valid = pos & neg.any(1, keepdim=True)
    if not bool(valid.any()):
        return emb.sum() * 0.0  # no identity with two images, or only one identity
    return F.relu(d - chosen + margin)[valid].mean()


# ---------------------------------------------------------------------------------------------
# batches of P identities x K images


def _inner(ds: Any) -> Any:
    """The dataset a wrapper (Indexed, Subset, torch's Subset) reads from, or None."""
    inner = getattr(ds, "base", None)
    return inner if inner is not None else getattr(ds, "dataset", None)


def dataset_labels(ds: Any) -> list[int]:
    """Labels of every item without decoding images, through Indexed / Subset wrappers."""
    for attr in ("targets", "labels"):
        v = getattr(ds, attr, None)
        if v is not None and not callable(v):
            return [int(t) for t in v]
    inner = _inner(ds)
    if inner is not None:
        labels = dataset_labels(inner)
        idx = getattr(ds, "indices", None)
        return [labels[i] for i in idx] if idx is not None else labels
    return [int(ds[i][1]) for i in range(len(ds))]  # reads every item: a last resort


class PKBatchSampler(Sampler[list[int]]):
    """Batches of ``batch_size`` indices made of runs of ``k`` images of one identity.

    Each epoch takes this rank's samples (``shard``: the strategy's distributed sampler, set by
    the engine; ``None`` = the whole dataset, shuffled), groups them by identity, cuts each
    identity into runs of ``k``, deals the runs round by round in a shuffled identity order,
    puts runs shorter than ``k`` last, and cuts the result into batches. Every rank gives the
    same number of batches (``len(shard) // batch_size``), as ddp needs, and a shard is covered
    as fully as with ordinary batches, so the shard audit applies unchanged."""

    def __init__(self, labels: list[int], batch_size: int, k: int, seed: int) -> None:
        if batch_size < 2 * k:
            raise ConfigError(f"a batch of {batch_size} with {k} images per identity holds one "
                              "identity, so it has no negatives; use a batch of at least "
                              f"{2 * k} or fewer --set task.images_per_identity")
        self.labels, self.batch_size, self.k, self.seed = labels, batch_size, k, seed
        self.shard: Any = None
        self._epoch = 0

    def _indices(self) -> list[int]:
        if self.shard is not None:
            return list(iter(self.shard))
        g = torch.Generator().manual_seed(self.seed + self._epoch)
        return torch.randperm(len(self.labels), generator=g).tolist()

    def __len__(self) -> int:
        n = len(self.shard) if self.shard is not None else len(self.labels)
        return n // self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        rng = random.Random(self.seed * 100_003 + self._epoch)
        self._epoch += 1
        idx = self._indices()
        if len(idx) < self.batch_size:
            raise DataError(f"{len(idx)} samples per process, fewer than one batch of "
                            f"{self.batch_size}")
        by_id: dict[int, list[int]] = {}
        for i in idx:
            by_id.setdefault(self.labels[i], []).append(i)
        runs = {c: [v[j:j + self.k] for j in range(0, len(v), self.k)] for c, v in by_id.items()}
        order: list[int] = []
        short: list[int] = []
        rounds = max(len(r) for r in runs.values())
        for r in range(rounds):
            ids = [c for c in runs if r < len(runs[c])]
            rng.shuffle(ids)
            for c in ids:
                run = runs[c][r]
                (order if len(run) == self.k else short).extend(run)
        order += short
        n = len(idx) // self.batch_size
        for b in range(n):
            yield order[b * self.batch_size:(b + 1) * self.batch_size]


# ---------------------------------------------------------------------------------------------
# evaluation pairs


def find_pairs(ds: Any) -> list[tuple[int, int, bool]] | None:
    """A dataset's own verification pairs (``.pairs`` as item indices), through wrappers."""
    while ds is not None:
        pairs = getattr(ds, "pairs", None)
        if pairs is not None:
            return list(pairs)
        ds = _inner(ds)
    return None


def make_pairs(labels: list[int], per_kind: int = EVAL_PAIRS_PER_KIND, seed: int = 0
               ) -> list[tuple[int, int, bool]]:
    """Balanced same / different pairs drawn from labelled items, the same for a given input."""
    rng = random.Random(seed)
    by_id: dict[int, list[int]] = {}
    for i, c in enumerate(labels):
        by_id.setdefault(c, []).append(i)
    multi = [c for c, v in by_id.items() if len(v) > 1]
    if not multi or len(by_id) < 2:
        raise DataError("verification pairs need an identity with two held-out images and at "
                        "least two identities")
    n_same = sum(len(v) * (len(v) - 1) // 2 for v in by_id.values())
    n = min(per_kind, n_same, len(labels) * (len(labels) - 1) // 2 - n_same)
    same: set[tuple[int, int]] = set()
    while len(same) < n:
        a, b = rng.sample(by_id[rng.choice(multi)], 2)
        same.add((min(a, b), max(a, b)))
    diff: set[tuple[int, int]] = set()
    while len(diff) < n:
        a, b = rng.sample(range(len(labels)), 2)
        if labels[a] != labels[b]:
            diff.add((min(a, b), max(a, b)))
    return [(a, b, True) for a, b in sorted(same)] + [(a, b, False) for a, b in sorted(diff)]


# ---------------------------------------------------------------------------------------------
# the task


class FaceEmbedding:
    name = "face"
    collate = staticmethod(collate_indexed)
    metric_name = "verification_accuracy"

    def __init__(self, cfg: Any, num_classes: int) -> None:
        if cfg.embedding_dim < 2:
            raise ConfigError(f"embedding_dim must be at least 2, got {cfg.embedding_dim}")
        if cfg.loss == "triplet" and cfg.images_per_identity < 2:
            raise ConfigError("the triplet loss needs images_per_identity >= 2 (a positive "
                              "for every anchor)")
        self.loss, self.dim = cfg.loss, cfg.embedding_dim
        self.k = cfg.images_per_identity
        self.num_identities = num_classes
        self.criterion = nn.CrossEntropyLoss()

    def build_model(self, base: nn.Module) -> nn.Module:
        trunk, width = split_head(base)
        ids = self.num_identities if self.loss == "softmax" else None
        return EmbeddingNet(trunk, width, self.dim, ids)

    to_device = Classification.to_device  # images and labels, as for a classifier

    def forward_loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = model(x)
        if self.loss == "softmax":
            return self.criterion(out, y)
        return semihard_triplet_loss(out, y)

    def batch_sampler(self, dataset: Any, batch_size: int, seed: int) -> Any:
        """P x K batches for the triplet loss, else ordinary ones. Setup calls this once with the
        training set, so it is also where a dataset without identity labels is refused."""
        item = dataset[0] if len(dataset) else None
        if item is not None and not isinstance(item[1], int | torch.Tensor):
            raise ConfigError(f"--task face needs images labelled by identity; this dataset "
                              f"gives {type(item[1]).__name__} targets (boxes: --task detection)")
        if self.loss != "triplet":
            return None
        return PKBatchSampler(dataset_labels(dataset), batch_size, self.k, seed)

    @torch.no_grad()
    def embed(self, model: nn.Module, loader: Any, device: torch.device,
              autocast: AbstractContextManager, channels_last: bool
              ) -> tuple[dict[int, torch.Tensor], dict[int, int]]:
        """Unit embeddings and labels of every readable held-out item, by item index."""
        emb: dict[int, torch.Tensor] = {}
        labels: dict[int, int] = {}
        with evaluating(model):
            for x, y, idx in on_device(self, loader, device, channels_last):
                with autocast:
                    e = model(x).float().cpu()
                for row, i, c in zip(e, idx.tolist(), y.tolist(), strict=True):
                    emb[i], labels[i] = row, int(c)
        return emb, labels

    def evaluate(self, model: nn.Module, loader: Any, device: torch.device,
                 autocast: AbstractContextManager, channels_last: bool = False) -> dict[str, Any]:
        emb, labels = self.embed(model, loader, device, autocast, channels_last)
        pairs = find_pairs(loader.dataset)
        if pairs is None:
            keys = sorted(labels)
            drawn = make_pairs([labels[i] for i in keys])
            pairs = [(keys[a], keys[b], s) for a, b, s in drawn]
        pairs = [p for p in pairs if p[0] in emb and p[1] in emb]
        if not pairs:
            return {"verification_accuracy": None, "eval_pairs": 0, "eval_samples": len(emb)}
        a = torch.stack([emb[p[0]] for p in pairs])
        b = torch.stack([emb[p[1]] for p in pairs])
        dist = ((a - b) ** 2).sum(1).tolist()
        out = verification_accuracy(dist, [p[2] for p in pairs])
        out["eval_samples"] = len(emb)
        return out


TASKS.add("face", FaceEmbedding, "face embedding: triplet (semi-hard, P x K batches) or softmax "
          "loss; verification accuracy on pairs")
