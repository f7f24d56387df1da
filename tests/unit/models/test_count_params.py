"""Parameter counts by name, built on the meta device (no weights, no download)."""

import pytest

from scaleprobe.core.errors import ConfigError
from scaleprobe.models.build import count_params


def test_torchvision_and_scaleprobe_models():
    assert count_params("resnet18") == 11_689_512
    assert count_params("resnet18", num_classes=10) == 11_181_642
    assert count_params("digits_cnn") > 10_000


def test_unknown_model_suggests():
    with pytest.raises(ConfigError, match="did you mean resnet50"):
        count_params("resnt50")
