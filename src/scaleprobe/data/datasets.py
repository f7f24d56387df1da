"""Datasets by name: embedded digits, synthetic (on the device or through the loader),
generated JPEGs, on-disk formats; and for ``--task lm`` token data (``data/token_windows.py``).

Every image dataset yields ``(image, label)`` where image is a PIL image or a uint8 CxHxW
tensor; transforms (``data/transforms.py``) turn it into the model's input. A token dataset
yields ``(input tokens, target tokens)``, int64 tensors of ``seq_len`` each. ``Indexed`` adds the sample
index to each item, so the engine can audit which samples each rank really consumed.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from scaleprobe.config.catalog import DATASETS as CATALOG
from scaleprobe.config.sections import DataConfig
from scaleprobe.core.errors import DataError
from scaleprobe.core.registry import Registry
from scaleprobe.data.cache import default_cache_dir
from scaleprobe.data.digits import digits_arrays
from scaleprobe.data.jpegsynth import ensure_jpegs
from scaleprobe.data.token_windows import RandomWindows, file_split, text_cache

DATASETS = Registry("dataset")


@dataclass
class Split:
    train: Dataset
    val: Dataset | None
    num_classes: int  # token data: the vocabulary size
    image_size: int | None  # token data: None
    source: str  # human description, e.g. "sklearn digits (1,797 real images)"
    # True: the engine makes the training batches once on the device (data/device.py) and
    # reads only the sample count and the held-out split from here
    resident: bool = False
    seq_len: int | None = None  # token data: tokens per sample
    # what the rank records about its data beyond the above (results.RankInfo): token data's
    # tokens_per_sample, seq_len, vocab_size, unigram_entropy_nats
    info: dict[str, Any] = field(default_factory=dict)
    # token data: each token id's cost in nats under the context-free baseline (the training
    # split's add-one smoothed unigram counts; data/token_windows.py), scored on the held-out tokens
    context_free: np.ndarray | None = None


class TensorImages(Dataset):
    """uint8 images held in memory (N x C x H x W) with integer labels."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.images[i], int(self.labels[i])


class SyntheticImages(Dataset):
    """Random uint8 images from a small pool held in memory: no I/O and no decode."""

    def __init__(self, n: int, size: int, num_classes: int, seed: int, pool: int = 256) -> None:
        g = torch.Generator().manual_seed(seed)
        self.pool = torch.randint(0, 256, (min(n, pool), 3, size, size), dtype=torch.uint8,
                                  generator=g)
        self.labels = torch.randint(0, num_classes, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.pool[i % len(self.pool)], int(self.labels[i])


def split_indices(n: int, val_fraction: float, seed: int = 0) -> tuple[list[int], list[int]]:
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    n_val = max(1, int(round(n * val_fraction)))
    return sorted(perm[n_val:]), sorted(perm[:n_val])


class Subset(Dataset):
    def __init__(self, base: Dataset, indices: list[int]) -> None:
        self.base, self.indices = base, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Any:
        return self.base[self.indices[i]]


def _held_out(ds: Dataset, cfg: DataConfig, seed: int) -> tuple[Dataset, Dataset]:
    tr, va = split_indices(len(ds), cfg.val_fraction, seed)
    return Subset(ds, tr), Subset(ds, va)


@DATASETS.register("digits", CATALOG["digits"])
def _digits(cfg: DataConfig, seed: int) -> Split:
    size = cfg.image_size or 32
    images, target = digits_arrays(cfg.cache_dir)
    x = torch.from_numpy(images).float().unsqueeze(1) / 16.0  # N x 1 x 8 x 8 in [0, 1]
    x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear",
                                        align_corners=False)
    x = (x.clamp(0, 1) * 255).round().to(torch.uint8).expand(-1, 3, -1, -1).contiguous()
    full = TensorImages(x, torch.from_numpy(target).long())
    train, val = _held_out(full, cfg, seed=0)  # the split never depends on the run's seed
    return Split(train, val, 10, size, "scikit-learn digits (1,797 real handwritten images)")


@DATASETS.register("synthetic", CATALOG["synthetic"])
def _synthetic(cfg: DataConfig, seed: int) -> Split:
    split = _synthetic_loader(cfg, seed)
    split.resident = True
    split.source = (f"synthetic {split.image_size}x{split.image_size}: one random batch per "
                    "rank made once on the training device, reused every step (no loader)")
    return split


@DATASETS.register("synthetic-loader", CATALOG["synthetic-loader"])
def _synthetic_loader(cfg: DataConfig, seed: int) -> Split:
    size = cfg.image_size or 64
    ncls = cfg.num_classes or 10
    full = SyntheticImages(cfg.num_samples, size, ncls, seed=1234)
    train, val = _held_out(full, cfg, seed=0)
    return Split(train, val, ncls, size, f"synthetic {size}x{size} random images through the "
                 "loader")


@DATASETS.register("jpeg-synth", CATALOG["jpeg-synth"])
def _jpeg_synth(cfg: DataConfig, seed: int) -> Split:
    size = cfg.image_size or 224
    ncls = cfg.num_classes or 10
    root = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()
    tag = hashlib.sha1(f"{cfg.num_samples}-{size}-{ncls}".encode()).hexdigest()[:8]
    folder = ensure_jpegs(root / f"jpeg-synth-{cfg.num_samples}-{size}px-{tag}",
                          cfg.num_samples, size, ncls)

    # heavy: torchvision: a format's reader is imported when it is read
    from scaleprobe.data.formats import open_imagefolder

    full = open_imagefolder(folder)
    train, val = _held_out(full, cfg, seed=0)
    return Split(train, val, ncls, cfg.image_size or size, f"{cfg.num_samples} JPEG files {size}px")


def _need_dir(cfg: DataConfig, name: str) -> Path:
    if not cfg.data_dir:
        gen = "text" if name == "tokens" else name
        raise DataError(f"--dataset {name} needs --data-dir DIR "
                        f"(make a small one with: scaleprobe datagen {gen} --out DIR)")
    p = Path(cfg.data_dir).expanduser()
    if not p.is_dir():
        raise DataError(f"data directory not found: {p}")
    if not any(p.iterdir()):
        raise DataError(f"data directory is empty: {p}")
    return p


ON_DISK = ("imagefolder", "cifar10", "mnist", "voc", "lfw", "tokens")  # read from --data-dir


def check_data_dir(cfg: DataConfig) -> None:
    """The cheap part of an on-disk dataset's checks (the folder is given, exists, holds
    something), so a wrong path fails in one line before any run folder or worker exists."""
    if cfg.dataset in ON_DISK or (cfg.dataset == "text" and cfg.data_dir):
        _need_dir(cfg, "text" if cfg.dataset == "text" else cfg.dataset)


@DATASETS.register("imagefolder", CATALOG["imagefolder"])
def _imagefolder(cfg: DataConfig, seed: int) -> Split:
    root = _need_dir(cfg, "imagefolder")

    # heavy: torchvision: a format's reader is imported when it is read
    from scaleprobe.data.formats import open_imagefolder

    full = open_imagefolder(root)
    train, val = _held_out(full, cfg, seed=0)
    ncls = len(getattr(full, "classes", [])) or cfg.num_classes or 10
    return Split(train, val, ncls, cfg.image_size or 64, f"image folder {cfg.data_dir}")


def _train_val(cfg: DataConfig, name: str, reader: str, size: int, label: str) -> Split:
    """A ten-class format read as its own train and test files (CIFAR-10, MNIST)."""
    root = _need_dir(cfg, name)

    # heavy: torchvision: a format's reader is imported when it is read
    from scaleprobe.data import formats

    open_ = getattr(formats, reader)
    train = open_(root, train=True, download=cfg.download)
    val = open_(root, train=False, download=cfg.download)
    return Split(train, val, 10, cfg.image_size or size, f"{label} at {root}")


@DATASETS.register("cifar10", CATALOG["cifar10"])
def _cifar10(cfg: DataConfig, seed: int) -> Split:
    return _train_val(cfg, "cifar10", "open_cifar10", 32, "CIFAR-10")


@DATASETS.register("mnist", CATALOG["mnist"])
def _mnist(cfg: DataConfig, seed: int) -> Split:
    return _train_val(cfg, "mnist", "open_mnist", 28, "MNIST")


@DATASETS.register("voc", CATALOG["voc"])
def _voc(cfg: DataConfig, seed: int) -> Split:
    root = _need_dir(cfg, "voc")

    # heavy: torchvision: a format's reader is imported when it is read
    from scaleprobe.data.formats import VOC_CLASSES, open_voc

    train = open_voc(root, "train")  # reads every annotation first: bad data stops here
    val = open_voc(root, "val")
    return Split(train, val, len(VOC_CLASSES) + 1, cfg.image_size or 320,
                 f"Pascal VOC at {root} ({len(train)} train, {len(val)} val images)")


def _lfw_pair_images(pairs: list[tuple[Path, Path, bool]]) -> Dataset:
    """The images the pairs name, once each, with ``.pairs`` as (item, item, same)."""
    from scaleprobe.data.formats.lfw import LFWFaces  # heavy: torchvision

    paths = list(dict.fromkeys(p for a, b, _ in pairs for p in (a, b)))
    faces = LFWFaces([(p, p.parent.name) for p in paths])
    where = {p: i for i, p in enumerate(paths)}
    faces.pairs = [(where[a], where[b], same) for a, b, same in pairs]
    return faces


@DATASETS.register("lfw", CATALOG["lfw"])
def _lfw(cfg: DataConfig, seed: int) -> Split:
    root = _need_dir(cfg, "lfw")

    # heavy: torchvision: a format's reader is imported when it is read
    from scaleprobe.data.formats import open_lfw_pairs, open_lfw_people

    train = open_lfw_people(root, "train")  # every line checked against the files on disk
    _, pairs = open_lfw_pairs(root, "test")
    return Split(train, _lfw_pair_images(pairs), len(train.identities), cfg.image_size or 112,
                 f"LFW at {root} ({len(train.identities)} train people, {len(pairs)} test pairs)")


def _seq_len(cfg: DataConfig) -> int:
    if cfg.seq_len is None:  # resolved from the model (lmspec.resolved_data) before this
        raise DataError(f"--dataset {cfg.dataset} needs a sequence length (--seq-len)")
    return cfg.seq_len


def _token_split(cfg: DataConfig, root: Path, source: str) -> Split:
    T = _seq_len(cfg)
    got = file_split(root, T, cfg.vocab_size, cfg.eval_windows)
    n = got["tokens"]
    info = {"seq_len": T, "tokens_per_sample": T, "vocab_size": got["vocab"],
            "unigram_entropy_nats": got["entropy"], "train_tokens": n["train"],
            "val_tokens": n["val"]}
    return Split(got["train"], got["val"], got["vocab"], None,
                 f"{source} ({n['train']:,} train / {n['val']:,} val tokens, vocabulary "
                 f"{got['vocab']:,})", seq_len=T, info=info, context_free=got["context_free"])


@DATASETS.register("tokens", CATALOG["tokens"])
def _tokens(cfg: DataConfig, seed: int) -> Split:
    root = _need_dir(cfg, "tokens")
    return _token_split(cfg, root, f"token files at {root}")


@DATASETS.register("text", CATALOG["text"])
def _text(cfg: DataConfig, seed: int) -> Split:
    if cfg.data_dir:
        root = _need_dir(cfg, "text")
    else:
        root = text_cache(Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir())
    return _token_split(cfg, root, f"Python standard library sources, bytes, at {root}")


@DATASETS.register("tokens-synthetic", CATALOG["tokens-synthetic"])
def _tokens_synthetic(cfg: DataConfig, seed: int) -> Split:
    T = _seq_len(cfg)
    vocab = cfg.vocab_size
    if vocab is None:
        raise DataError("--dataset tokens-synthetic needs a vocabulary size (data.vocab_size)")
    n_val = max(1, round(cfg.num_samples * cfg.val_fraction))
    if cfg.eval_windows is not None:
        n_val = min(n_val, cfg.eval_windows)
    train = RandomWindows(cfg.num_samples, T, vocab, seed=1234)  # never read: only its size
    val = RandomWindows(n_val, T, vocab, seed=4321)
    info = {"seq_len": T, "tokens_per_sample": T, "vocab_size": vocab,
            "unigram_entropy_nats": math.log(vocab)}  # uniform: every token equally likely
    return Split(train, val, vocab, None,
                 f"random tokens (vocabulary {vocab:,}, {T} per sample): one batch per rank "
                 "made once on the training device, reused every step (no loader)",
                 resident=True, seq_len=T, info=info,
                 context_free=np.full(vocab, math.log(vocab)))  # uniform tokens: ln V each


def build_split(cfg: DataConfig, seed: int = 0) -> Split:
    return DATASETS.get(cfg.dataset)(cfg, seed)
