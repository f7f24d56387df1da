"""Input transforms: ``light`` (convert + normalise) and ``heavy`` (the CPU-bound augmentation
the reference studies found to starve the GPU: random resized crop + flip + colour jitter)."""

from __future__ import annotations

import torch
from torchvision.transforms import v2

MEAN = (0.5, 0.5, 0.5)
STD = (0.25, 0.25, 0.25)


class ToRGB(torch.nn.Module):
    """Grey images become three identical channels; others pass through."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.expand(3, -1, -1) if x.shape[-3] == 1 else x


def build_transform(kind: str, size: int) -> v2.Compose:
    head = [v2.ToImage(), ToRGB()]
    tail = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
    if kind == "heavy":
        body = [
            v2.RandomResizedCrop(size, scale=(0.35, 1.0), antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1),
        ]
    else:
        body = [v2.Resize((size, size), antialias=True)]
    return v2.Compose(head + body + tail)


def build_eval_transform(size: int) -> v2.Compose:
    return build_transform("light", size)
