"""The torch-free tables of names (catalog.py) against what the builders really build."""

import pytest

from scaleprobe.config import catalog
from scaleprobe.core.errors import ConfigError


def test_torchvision_names_read_from_source_match_its_registry():
    """Bug caught: a model registered under a decorator this reader misses (torchvision's
    detectors stack a multi-line @handle_legacy_interface under @register_model) would be
    refused as unknown."""
    import torchvision

    assert catalog.torchvision_models() == tuple(sorted(
        torchvision.models.list_models(module=torchvision.models)))
    from scaleprobe.tasks.detection import detectors

    assert catalog.detectors() == tuple(detectors())


def test_the_tables_name_what_the_registries_build():
    from scaleprobe.data.datasets import DATASETS
    from scaleprobe.models.build import SMALL

    assert sorted(catalog.DATASETS) == DATASETS.names()
    assert dict(DATASETS.describe()) == catalog.DATASETS
    assert set(SMALL) == set(catalog.SMALL_MODELS)


@pytest.mark.parametrize("task,name,needle", [
    ("classification", "resnet35", "unknown model 'resnet35'; did you mean resnet50, resnet34"),
    ("classification", "zzzz", "unknown model 'zzzz' (see `scaleprobe models`)"),
    ("detection", "resnet18", "needs a detection model, not 'resnet18'"),
    ("detection", "maskrcnn_resnet50_fpn", "needs a detection model"),  # needs masks
    ("face", "nope.py:build", "model file not found: nope.py"),
])
def test_unknown_models_are_one_line(task, name, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", "\\(").replace(")", "\\)")):
        catalog.check_model(task, name)


@pytest.mark.parametrize("task,name", [("classification", "resnet18"), ("face", "linear"),
                                       ("classification", "vit_b_16"),
                                       ("detection", "ssdlite320_mobilenet_v3_large"),
                                       ("classification", "pkg.mod:build")])
def test_known_models_pass(task, name):
    catalog.check_model(task, name)


def test_without_a_readable_torchvision_the_build_decides(monkeypatch):
    monkeypatch.setattr(catalog, "torchvision_models", lambda group="": None)
    catalog.check_model("classification", "resnet35")  # left to the build, as before
    catalog.check_model("detection", "resnet18")
