"""A small MLP-Mixer (Tolstikhin et al. 2021) as a user's own model: ``--model
examples/models/mixer.py:build``. Images are cut into 4x4 patches; each block mixes across
the patches (a token MLP) and then across the channels (a channel MLP), each behind a
LayerNorm and a residual. Random weights; about 0.6 M parameters at 32 px.

    scaleprobe run --model examples/models/mixer.py:build --image-size 32 --batch-size 16

scaleprobe calls ``build`` with the arguments it names (``num_classes``, ``image_size``).
The blocks sit in ``self.blocks`` (an ``nn.ModuleList``): under ``--strategy fsdp`` each
block becomes one unit.
"""

from torch import nn


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, dim: int, token_hidden: int, channel_hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, token_hidden), nn.GELU(),
                                       nn.Linear(token_hidden, tokens))
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mlp = nn.Sequential(nn.Linear(dim, channel_hidden), nn.GELU(),
                                         nn.Linear(channel_hidden, dim))

    def forward(self, x):  # x: [batch, tokens, dim]
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self, num_classes: int, image_size: int, patch: int = 4, dim: int = 128,
                 depth: int = 4) -> None:
        super().__init__()
        if image_size % patch:
            raise ValueError(f"image size {image_size} is not a multiple of the patch {patch}")
        tokens = (image_size // patch) ** 2
        self.stem = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.blocks = nn.ModuleList(MixerBlock(tokens, dim, tokens * 2, dim * 4)
                                    for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)  # [batch, tokens, dim]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(dim=1))


def build(num_classes: int = 10, image_size: int = 32) -> nn.Module:
    return Mixer(num_classes, image_size)
