"""Input transforms: ``light`` (convert + resize + normalise) and ``heavy`` (the CPU-bound
augmentation the reference studies found to starve the GPU: random resized crop + flip + colour
jitter, torchvision's ``transforms.v2``).

``light`` is a few of torch's own operations: importing torchvision costs a process about 2 s of
CPU on a 2-core machine (it imports ``torch._dynamo`` on the way), paid by every rank, every
sweep point and every loader worker started fresh, for a conversion, one antialiased bilinear
resize and a normalisation. It matches torchvision's ``ToImage, Resize(antialias=True),
ToDtype(scale=True), Normalize`` exactly where no resize is needed (the digits, synthetic
images, CIFAR-10 at 32 px) and to within a rounding step where one is (torchvision resizes
uint8 images in uint8; this resizes after the conversion to float)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from scaleprobe.core.errors import DataError

MEAN = (0.5, 0.5, 0.5)
STD = (0.25, 0.25, 0.25)


class ToRGB(torch.nn.Module):
    """Grey images become three identical channels; others pass through."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.expand(3, -1, -1) if x.shape[-3] == 1 else x


def to_chw_tensor(img: Any) -> torch.Tensor:
    """A tensor (kept as it is: C x H x W), a numpy array or a PIL image (H x W or
    H x W x C) as a C x H x W tensor, as torchvision's ``ToImage`` reads them."""
    if isinstance(img, torch.Tensor):
        return img if img.ndim >= 3 else img.unsqueeze(0)
    arr = np.array(img, copy=True)
    t = torch.from_numpy(arr)
    return t.unsqueeze(0) if t.ndim == 2 else t.permute(2, 0, 1).contiguous()


class Light:
    """Convert to float in [0, 1] (uint8 / 255), resize to ``size`` x ``size`` (antialiased
    bilinear, only when the image has another size), normalise with ``MEAN`` and ``STD``."""

    def __init__(self, size: int) -> None:
        self.size = (size, size)
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)
        self.rgb = ToRGB()

    def __call__(self, img: Any) -> torch.Tensor:
        x = self.rgb(to_chw_tensor(img))
        if x.dtype == torch.uint8:
            x = x.to(torch.float32).div_(255.0)
        elif not x.is_floating_point():
            raise DataError(f"the light transform takes 8-bit or floating-point images; this "
                            f"one is {str(x.dtype).replace('torch.', '')}: convert it to 8-bit "
                            f"RGB or grey in the dataset")
        else:
            x = x.to(torch.float32)
        if tuple(x.shape[-2:]) != self.size:
            x = torch.nn.functional.interpolate(x.unsqueeze(0), size=self.size, mode="bilinear",
                                                align_corners=False, antialias=True)[0]
        return (x - self.mean) / self.std

    def __repr__(self) -> str:
        return f"Light(size={self.size[0]}, mean={MEAN}, std={STD})"


def build_transform(kind: str, size: int) -> Any:
    if kind != "heavy":
        return Light(size)
    from torchvision.transforms import v2  # heavy: torchvision: seconds; imported where it is used

    return v2.Compose([
        v2.ToImage(), ToRGB(),
        v2.RandomResizedCrop(size, scale=(0.35, 1.0), antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1),
        v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD),
    ])


def build_eval_transform(size: int) -> Any:
    return build_transform("light", size)
