"""Small models that train in seconds on a CPU."""

from __future__ import annotations

from torch import nn


class DigitsCNN(nn.Module):
    """Three conv layers and a linear head; any input size (pooled to a 4x4 map)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3, width: int = 32) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(inplace=True),
            nn.Conv2d(2 * width, 2 * width, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
        )
        self.head = nn.Linear(2 * width * 16, num_classes)
        self.out_features = 2 * width * 16

    def forward(self, x):
        return self.head(self.features(x))


class MLP(nn.Module):
    """Flatten, one hidden layer, linear head: the classic MNIST network."""

    def __init__(self, num_classes: int = 10, image_size: int = 28, hidden: int = 256) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Flatten(), nn.Linear(3 * image_size * image_size, hidden),
                                      nn.ReLU(inplace=True))
        self.head = nn.Linear(hidden, num_classes)
        self.out_features = hidden

    def forward(self, x):
        return self.head(self.features(x))


class MLPLarge(nn.Module):
    """Flatten, ``depth`` hidden layers of ``width`` units, linear head: large gradients for
    little compute (23.1 M parameters, 92 MB of fp32 gradients at 32x32 inputs), the model
    whose step a slow network decides. The hidden layers are ``blocks`` (one FSDP unit each;
    several DDP buckets)."""

    def __init__(self, num_classes: int = 10, image_size: int = 32, width: int = 2048,
                 depth: int = 5) -> None:
        super().__init__()
        self.flatten = nn.Flatten()
        sizes = [3 * image_size * image_size] + [width] * depth
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(a, b), nn.ReLU(inplace=True))
                                    for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        self.head = nn.Linear(width, num_classes)
        self.out_features = width

    def forward(self, x):
        x = self.flatten(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Linear(nn.Module):
    """Flatten + Linear: almost no compute, so a framework's fixed per-step cost shows."""

    def __init__(self, num_classes: int = 10, image_size: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * image_size * image_size, num_classes))

    def forward(self, x):
        return self.net(x)
