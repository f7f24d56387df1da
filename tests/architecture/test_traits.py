"""Strategies declare what they are; code asks the traits, never the name string."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.traits import TRAITS, traits_of

SRC = Path(__file__).resolve().parents[2] / "src" / "scaleprobe"
# `strategy == "ps"`, `d.strategy in ("single", "dp")`, `strategy != "single"`, ...
NAME_TEST = re.compile(r"""strategy\b[\w.\]"')]*\s*(==|!=|\bnot in\b|\bin\b)\s*[("']""")


def test_every_strategy_class_carries_its_own_traits():
    import importlib

    from scaleprobe.strategies import CLASSES

    assert set(CLASSES) == set(TRAITS)
    for name, (module, cls) in CLASSES.items():
        klass = getattr(importlib.import_module(module), cls)
        assert klass.traits is TRAITS[name] and klass.name == name
        assert klass.has_overlapped_comm == klass.traits.overlapped_comm
        assert klass.explicit_comm == klass.traits.explicit_comm
        assert klass.distributed == klass.traits.launched


def test_traits_answer_what_the_name_tests_did():
    assert [n for n, t in TRAITS.items() if t.in_process] == ["single", "dp"]
    assert traits_of("ps").training_ranks(3) == 2 and traits_of("ddp").training_ranks(3) == 3
    assert traits_of("ps").min_world == 2 and traits_of("ps").needs_any_source_recv
    assert {n for n, t in TRAITS.items() if t.audits_shards} == {"ddp", "localsgd", "ps",
                                                                 "fsdp"}
    with pytest.raises(ConfigError, match="did you mean .*ddp"):
        traits_of("dpp")


def test_fsdp_is_launched_shards_its_state_and_measures_comm_in_the_step():
    t = traits_of("fsdp")
    assert t.launched and t.audits_shards and t.overlapped_comm and not t.bucketed
    assert t.shards_state and t.comm_in_step and not t.has_server
    assert t.sync_collective == "fsdp_step" and t.comm_pattern == "fsdp"
    assert not t.fp16_loss_scaling  # --amp fp16 is refused (config_rules)
    assert {n for n, t in TRAITS.items() if t.shards_state or t.comm_in_step} == {"fsdp"}


def test_no_code_tests_a_strategy_name():
    """Catches a new `if cfg.dist.strategy == "ps"` (or `in ("single", "dp")`): what a
    strategy is belongs in scaleprobe/core/traits.py, where every caller sees one answer."""
    hits = [f"{p.relative_to(SRC)}:{i}: {line.strip()}"
            for p in SRC.rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if NAME_TEST.search(line)]
    assert hits == []


def test_traits_and_report_advice_import_without_torch():
    code = ("import sys; import scaleprobe.core.traits, scaleprobe.report.findings.advice, "
            "scaleprobe.report.findings.diagnose, scaleprobe.measure.comm.exposed; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
