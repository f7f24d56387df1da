"""build_model by name, on the meta device (no weights, no download)."""

import torch

from scaleprobe.models.build import build_model


def test_vgg_gets_the_small_input_head_only_at_a_small_known_size():
    """32 px: global pooling and a 512-wide head; no size given (image_size=None): torchvision's
    own 7x7 pooling and 4096-wide head, where it once compared None with 64 (TypeError)."""
    with torch.device("meta"):
        small = build_model("vgg11", 10, 32)
        unknown = build_model("vgg11", 10, None)
        large = build_model("vgg11", 10, 224)
    assert small.classifier[0].in_features == 512
    assert unknown.classifier[0].in_features == large.classifier[0].in_features == 512 * 7 * 7
    assert unknown.classifier[-1].out_features == 10
