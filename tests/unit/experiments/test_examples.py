"""Every example spec parses and validates (models and datasets exist); none is run here."""

import re

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
    assert sp.unused == []  # no setting the runs ignore (a loader on device-resident data)
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


DATAGEN = re.compile(r"scaleprobe datagen (\w+) --out (\S+)(?: --count \d+)?( --force)?")


@pytest.mark.parametrize("path", OTHERS, ids=lambda p: p.name)
def test_every_other_example_spec_reads_the_data_its_comments_generate(path, tmp_path,
                                                                        monkeypatch):
    """Each spec's header gives the `scaleprobe datagen` commands that make its data; run
    them (with few images) and every point must find and read its data. Bug caught: a spec
    that reads another folder than its commands write, or a name that builds nothing."""
    from scaleprobe.data.formats import write_dataset

    monkeypatch.chdir(tmp_path)
    text = path.read_text()
    written = set()
    for fmt, out, force in DATAGEN.findall(text):
        write_dataset(fmt, out, count=20, overwrite=bool(force))
        written.add(out)
    if "[[job]]" in text:
        cfgs = [cfg for _, cfg in load_colocate_spec(path).jobs]
    else:
        sp = load_spec(path)
        cfgs = [sp.config(p) for p in check_points(sp)]
    assert cfgs
    on_disk = {c.data.data_dir for c in cfgs if c.data.data_dir}
    assert on_disk <= written, f"read but not written by the spec's commands: {on_disk - written}"
    preflight(cfgs)  # ConfigError / DataError when a name builds nothing or data does not read
