"""The check before launching N ranks (run/resources.py): cores and memory, --force."""

import pytest

from scaleprobe.core.errors import ConfigError
from scaleprobe.run import resources as R

MIB = 1 << 20


@pytest.fixture
def host(monkeypatch):
    """A 2-core host with 24 GiB available and ranks of 281 MiB each at least."""
    figures = {"cores": 2, "free": 24 << 30, "floor": 281 * MIB}
    monkeypatch.setattr(R, "host_cores", lambda: figures["cores"])
    monkeypatch.setattr(R, "available_bytes", lambda: figures["free"])
    monkeypatch.setattr(R, "rank_floor_bytes", lambda: figures["floor"])
    return figures


def test_64_ranks_on_2_cores_are_refused_with_the_figures(host):
    with pytest.raises(ConfigError) as e:
        R.check_fits(64, on_cpu=True, force=False)
    assert str(e.value) == ("--nproc 64 does not fit this machine: 64 ranks on 2 cores is "
                            "32.0 per core (at most 2: more time-share the cores); use fewer "
                            "ranks, or --force to start them anyway")


def test_ranks_that_cannot_fit_the_memory_available_are_refused(host):
    host["free"] = 1 << 30
    with pytest.raises(ConfigError, match=r"4 ranks need at least 4 x 281 MiB = 1.1 GiB of "
                                          r"memory .* and 1.0 GiB is available"):
        R.check_fits(4, on_cpu=True, force=False)


def test_what_fits_and_what_is_forced_starts(host):
    R.check_fits(4, on_cpu=True, force=False)  # 2 a core: the README's --nproc 1,2,4
    R.check_fits(64, on_cpu=True, force=True)
    R.check_fits(8, on_cpu=False, force=False)  # a GPU each: the cores are not held to it


def test_force_is_an_option_that_does_not_change_a_runs_key():
    """--force says how the ranks were let start, not what they measure: a sweep resumes
    runs made with and without it alike."""
    from scaleprobe.config import runconfig as C

    plain = C.build({"strategy": "ddp", "nproc": 2})
    forced = C.build({"strategy": "ddp", "nproc": 2, "dist.force": True})
    assert forced.dist.force is True and plain.key() == forced.key()
