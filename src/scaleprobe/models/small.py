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


class Linear(nn.Module):
    """Flatten + Linear: almost no compute, so a framework's fixed per-step cost shows."""

    def __init__(self, num_classes: int = 10, image_size: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * image_size * image_size, num_classes))

    def forward(self, x):
        return self.net(x)
