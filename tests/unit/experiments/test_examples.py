"""Every example spec parses and validates (models and datasets exist); none is run here."""

import pytest

from scaleprobe.experiments.colocate import load_colocate_spec
from scaleprobe.experiments.spec import check_points, load_spec
from scaleprobe.experiments.sweep import preflight

from ...conftest import ROOT

EXAMPLES = ROOT / "examples"
SWEEPS = sorted(EXAMPLES.glob("sweep_*.toml"))
COLOCATES = sorted(EXAMPLES.glob("colocate_*.toml"))
OTHERS = sorted(set(EXAMPLES.glob("*.toml")) - set(SWEEPS) - set(COLOCATES))


def test_the_reference_studies_have_examples():
    names = {p.stem for p in SWEEPS + COLOCATES}
    for want in ("sweep_batch_mobilenet_v2", "sweep_batch_mobilenet_v3_large",
                 "sweep_batch_resnet34_auto", "sweep_transform", "sweep_processes",
                 "colocate_three_mobilenets"):
        assert want in names


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_sweep_example_is_valid_and_small(path):
    sp = load_spec(path)
    pts = check_points(sp)
    cfgs = [sp.config(p) for p in pts]
    preflight(cfgs)
    assert all(isinstance(c.train.steps, int) and c.train.steps <= 20 for c in cfgs)
    assert all((c.data.image_size or 8) <= 64 for c in cfgs)
    assert "Full size" in path.read_text() or path.stem == "sweep_quickstart"


@pytest.mark.parametrize("path", COLOCATES, ids=lambda p: p.name)
def test_colocate_example_is_valid_and_small(path):
    cs = load_colocate_spec(path)
    assert len(cs.jobs) >= 2
    preflight([cfg for _, cfg in cs.jobs])
    assert all(cfg.train.max_seconds <= 5 for _, cfg in cs.jobs)


@pytest.mark.parametrize("path", OTHERS, ids=lambda p: p.name)
def test_every_other_example_spec_is_valid(path, tmp_path, monkeypatch):
    # the reference specs read the small datasets examples/README.md has you generate
    from scaleprobe.data.formats import write_dataset

    monkeypatch.chdir(tmp_path)
    write_dataset("voc", "data/voc", count=10)
    write_dataset("mnist", "data/ref", count=20)
    write_dataset("cifar10", "data/ref", count=20, overwrite=True)
    if "[[job]]" in path.read_text():
        load_colocate_spec(path)
        return
    sp = load_spec(path)
    preflight([sp.config(p) for p in check_points(sp)])
