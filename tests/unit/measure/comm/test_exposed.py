"""Exposed communication split into transfer + sync overhead, and the link it is compared on."""

import pytest

from scaleprobe.core.run_parts import Comm
from scaleprobe.measure.comm.exposed import measured_link, split_exposed
from scaleprobe.measure.comm.exposed import same_link_prediction as _same_link_prediction


def dominant(split):
    return Comm.from_dict(split).dominant()


def same_link_prediction(comm, dist_cfg=None):
    return _same_link_prediction(Comm.from_dict(comm), dist_cfg)


@pytest.mark.parametrize("exposed,standalone", [(0.025, 0.0003), (0.07, 0.06), (0.01, 0.03),
                                                (0.0, 0.004)])
def test_transfer_and_sync_overhead_add_up_to_exposed(exposed, standalone):
    """Catches a split whose parts do not add up to the exposed time the breakdown shows
    (e.g. a standalone transfer larger than the exposed time, hidden under backward)."""
    s = split_exposed(exposed, standalone)
    assert s["transfer_s"] + s["sync_overhead_s"] == pytest.approx(exposed)
    assert s["transfer_s"] <= exposed and s["sync_overhead_s"] >= 0
    assert s["transfer_s"] + s["transfer_hidden_s"] == pytest.approx(standalone)


def test_split_unknown_without_a_standalone_measurement():
    assert split_exposed(0.02, None) == dict.fromkeys(
        ("transfer_s", "sync_overhead_s", "transfer_hidden_s"))


def test_dominant_part():
    assert dominant(split_exposed(0.025, 0.0003)) == "sync_overhead"
    assert dominant(split_exposed(0.07, 0.06)) == "transfer"
    assert dominant(split_exposed(0.0, 0.004)) is None  # nothing exposed
    assert dominant({"exposed_s": 0.02}) is None  # not split


def test_measured_link_is_loopback_on_one_host_else_the_named_link():
    assert measured_link({"nnodes": 1, "link": "1gbit"})["name"] == "loopback"
    assert measured_link({"nnodes": 2, "link": "1000mbit"})["name"] == "1000mbit"
    assert measured_link({"nnodes": 2, "link": None})["name"] is None


def test_same_link_prediction_never_pairs_loopback_with_another_link():
    """Catches a run measured on loopback set against its --link 1gbit prediction."""
    loop, gbit = {"link": "loopback", "comm_s": 0.001}, {"link": "1gbit", "comm_s": 0.01}
    on_host = {"measured_link": {"name": "loopback"}}
    assert same_link_prediction({**on_host, "prediction": loop}) is loop
    assert same_link_prediction({**on_host, "prediction": gbit}) is None
    assert same_link_prediction({**on_host, "prediction": gbit,
                                 "prediction_measured_link": loop}) is loop
    # several hosts: --link names the link crossed; without it nothing is compared
    assert same_link_prediction({"measured_link": {"name": "1gbit"}, "prediction": gbit}) is gbit
    assert same_link_prediction({"measured_link": {"name": None}, "prediction": gbit}) is None
    # a record written before measured_link: placed by its config
    assert same_link_prediction({"prediction": gbit}, {"nnodes": 1, "link": "1gbit"}) is None
