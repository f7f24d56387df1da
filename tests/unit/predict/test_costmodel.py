"""Cost-model formulas against hand-computed numbers, and the needed-link inversion."""

import math

import pytest

from scaleprobe.core.errors import ConfigError
from scaleprobe.features.links import PRESETS, Link, link_from_comm, resolve_link, with_alpha
from scaleprobe.predict.costmodel import (
    comm_time_s,
    modelled_efficiency,
    needed_bandwidth_gbit_s,
    pattern,
    predict_for_run,
)

S = 1e8  # bytes of gradients
LINK = Link("test", 10.0, 20e-6, "test")  # 1.25e9 bytes/s, 20 us per hop


def test_ring_allreduce_by_hand():
    # 2(n-1) alpha + 2(n-1)/n S/B, n = 4: 6 * 20 us + 1.5e8 / 1.25e9
    assert comm_time_s("allreduce", S, 4, LINK) == pytest.approx(120e-6 + 0.12)
    assert comm_time_s("ddp", S, 2, LINK) == pytest.approx(40e-6 + 0.08)


def test_parameter_server_by_hand():
    # 2 alpha + 2(n-1) S/B: push then pull over the server's link, no overlap
    assert comm_time_s("ps", S, 4, LINK) == pytest.approx(40e-6 + 0.48)
    # two hosts of 2: only the 2 workers on the other host cross the server's link
    assert comm_time_s("ps", S, 4, LINK, nnodes=2) == pytest.approx(40e-6 + 0.32)


def test_local_sgd_divides_the_allreduce():
    assert comm_time_s("localsgd", S, 4, LINK, average_every=4) == pytest.approx(
        (120e-6 + 0.12) / 4)


def test_one_process_has_no_communication():
    for s in ("allreduce", "ps", "localsgd"):
        assert comm_time_s(s, S, 1, LINK) == 0.0


def test_efficiency_and_overlap():
    assert modelled_efficiency(0.5, 0.12012) == pytest.approx(0.5 / 0.62012)
    assert modelled_efficiency(0.5, 0.1, overlap=0.5) == pytest.approx(0.5 / 0.55)
    with pytest.raises(ConfigError):
        modelled_efficiency(0.5, 0.1, overlap=1.0)


def test_needed_bandwidth_by_hand_and_inverts_efficiency():
    pat = pattern("allreduce", S, 4)
    need = needed_bandwidth_gbit_s(pat, 20e-6, 0.5, 0.9)
    # budget 0.5 (1/0.9 - 1) = 0.05556 s, minus 120 us of latency, for 1.5e8 bytes
    assert need == pytest.approx(1.5e8 / (0.5 / 9 - 120e-6) * 8 / 1e9)
    at_need = Link("x", need, 20e-6, "x")
    assert modelled_efficiency(0.5, pat.time_s(at_need)) == pytest.approx(0.9)
    for strategy, k in (("ps", 1), ("localsgd", 8)):
        p = pattern(strategy, S, 8, average_every=k)
        gbit = needed_bandwidth_gbit_s(p, 50e-6, 0.2, 0.75, overlap=0.3)
        t = p.time_s(Link("x", gbit, 50e-6, "x"))
        assert modelled_efficiency(0.2, t, overlap=0.3) == pytest.approx(0.75)


def test_needed_bandwidth_edge_cases():
    assert needed_bandwidth_gbit_s(pattern("allreduce", S, 1), 1e-3, 0.1) == 0.0
    # 2(n-1) hops of 1 ms exceed the whole budget: no link is fast enough
    assert needed_bandwidth_gbit_s(pattern("allreduce", S, 64), 1e-3, 0.1) is None
    with pytest.raises(ConfigError):
        needed_bandwidth_gbit_s(pattern("allreduce", S, 2), 0, 0.1, target_eff=1.0)


def test_predict_for_run_fields():
    p = predict_for_run("ddp", 2, 2, S, 0.5, "10gbit", average_every=4)
    assert {"strategy", "link", "bandwidth_gbit_s", "alpha_s", "grad_bytes", "comm_s",
            "efficiency", "needed_gbit_s", "formula"} <= set(p)
    assert p["strategy"] == "allreduce" and p["link"] == "10gbit"
    assert p["comm_s"] == pytest.approx(6 * PRESETS["10gbit"].alpha_s + 1.5 * S / 1.25e9)
    assert p["average_every"] is None
    none = predict_for_run("localsgd", 2, 1, S, None, average_every=8)
    assert none["efficiency"] is None and none["needed_gbit_s"] is None
    assert none["link"] == "loopback" and none["average_every"] == 8
    assert predict_for_run("ps", 2, 2, S, 0.1)["link"] == "10gbit"  # default across hosts


def test_bad_strategy_and_world():
    with pytest.raises(ConfigError, match="no communication model"):
        pattern("dp", S, 2)
    with pytest.raises(ConfigError):
        pattern("allreduce", S, 3, nnodes=2)


def test_links_presets_rates_and_errors():
    assert resolve_link("1GBIT").bandwidth_gbit_s == 1.0
    assert resolve_link("200mbit").bandwidth_gbit_s == pytest.approx(0.2)
    assert resolve_link("2.5gbit").bandwidth_byte_s == pytest.approx(2.5e9 / 8)
    assert resolve_link(None, nnodes=1).name == "loopback"
    assert with_alpha(LINK, 1e-3).alpha_s == 1e-3
    with pytest.raises(ConfigError, match="did you mean 10gbit"):
        resolve_link("10gbt")


def test_link_from_comm_record():
    # all_reduce over 4 ranks: beta 1.2e-9 s/B -> bus bandwidth 1.5 / 1.2e-9 B/s = 10 Gbit/s;
    # alpha 120 us over 2(n-1) = 6 hops -> 20 us per hop
    rec = {"kind": "comm", "backend": "gloo", "world_size": 4,
           "fit": {"all_reduce": {"alpha_s": 120e-6, "beta_s_per_byte": 1.2e-9}}}
    link = resolve_link(rec)
    assert link.bandwidth_gbit_s == pytest.approx(10.0)
    assert link.alpha_s == pytest.approx(20e-6)
    assert link.cpu_s_per_byte == 0.0  # a record without CPU times: none charged
    rec["fit"]["all_reduce"]["cpu_s_per_byte"] = 1.1e-9
    assert resolve_link(rec).cpu_s_per_byte == 1.1e-9
    assert link.wake_s == 0.0  # none measured: none charged
    rec["fit"]["all_reduce"]["wake_s"] = 2e-3
    assert resolve_link(rec).wake_s == 2e-3
    assert with_alpha(resolve_link(rec), 1e-5).wake_s == 0.0  # a latency given replaces it
    with pytest.raises(ConfigError, match="no all_reduce fit"):
        link_from_comm({"kind": "comm", "world_size": 2, "fit": {}})


def test_cpu_per_byte_is_the_median_over_sizes_from_1_mib():
    from scaleprobe.commands.comm import cpu_per_byte

    mib = 1 << 20
    rows = [{"op": "all_reduce", "size_bytes": 256 << 10, "cpu_s": 1.0},  # fixed cost: left out
            {"op": "all_reduce", "size_bytes": mib, "cpu_s": 3e-3},
            {"op": "all_reduce", "size_bytes": 4 * mib, "cpu_s": 4 * mib * 1e-9},
            {"op": "all_reduce", "size_bytes": 16 * mib, "cpu_s": 16 * mib * 2e-9},
            {"op": "broadcast", "size_bytes": mib, "cpu_s": 9.0}]
    assert cpu_per_byte(rows, "all_reduce") == pytest.approx(2e-9)
    assert cpu_per_byte([{"op": "all_reduce", "size_bytes": mib}], "all_reduce") is None


def test_wake_is_the_median_of_each_size_s_extra_after_compute():
    """Per size, the call after compute less the call after a barrier (never below 0), the
    median over the sizes timed both ways; other operations and sizes timed once are left
    out."""
    from scaleprobe.commands.comm import wake

    rows = [{"op": "all_reduce", "size_bytes": 1024, "time_s": 1e-3, "after_compute_s": 4e-3},
            {"op": "all_reduce", "size_bytes": 65536, "time_s": 1e-3, "after_compute_s": 2e-3},
            {"op": "all_reduce", "size_bytes": 1 << 20, "time_s": 3e-3,
             "after_compute_s": 2e-3},  # faster after compute: 0, not -1 ms
            {"op": "all_reduce", "size_bytes": 16 << 20, "time_s": 20e-3},
            {"op": "broadcast", "size_bytes": 1024, "time_s": 1e-3, "after_compute_s": 9.0}]
    assert wake(rows, "all_reduce") == pytest.approx(1e-3)
    assert wake(rows[:2], "all_reduce") == pytest.approx(2e-3)  # (3 + 1) / 2
    assert wake(rows[3:4], "all_reduce") is None


def test_cpu_fits_take_the_lower_quartile_of_each_sizes_calls():
    """gloo's small calls on the CPU are bimodal: ten calls of 0.3 ms or 3.3 ms, six of them
    slow, have a median in the slow mode (3.3 ms) and a lower quartile in the fast one
    (0.3 ms: the 25% point lies between the 3rd and the 4th of ten, both fast). The fit and
    the wake-up read the quartile; a row without its calls (an older record) or timed on CUDA
    (no ``cpu_s``) keeps its median."""
    from scaleprobe.commands.comm import fit_summary, fit_times

    fast, slow = 0.3e-3, 3.3e-3
    calls = [fast] * 4 + [slow] * 6
    after = [fast + 1e-3] * 4 + [slow + 1e-3] * 6
    rows = [{"op": "all_reduce", "size_bytes": n, "time_s": slow + n * 1e-9, "cpu_s": 1e-3,
             "times_s": [t + n * 1e-9 for t in calls],
             "after_compute_s": slow + 1e-3 + n * 1e-9,
             "after_compute_times_s": [t + n * 1e-9 for t in after]}
            for n in (1 << 16, 1 << 20, 1 << 24)]
    got = fit_times(rows)
    assert got[0]["time_s"] == pytest.approx(fast + (1 << 16) * 1e-9)
    assert got[0]["after_compute_s"] == pytest.approx(fast + 1e-3 + (1 << 16) * 1e-9)
    fit = fit_summary(rows, 2)["all_reduce"]
    assert fit["alpha_s"] == pytest.approx(fast, rel=1e-3)  # not the slow mode's 3.3 ms
    assert fit["wake_s"] == pytest.approx(1e-3)
    assert rows[0]["time_s"] == pytest.approx(slow + (1 << 16) * 1e-9)  # the record's own
    cuda = [dict(r, cpu_s=None) for r in rows]
    assert fit_summary(cuda, 2)["all_reduce"]["alpha_s"] == pytest.approx(slow, rel=1e-3)
    old = [{k: v for k, v in r.items() if not k.endswith("times_s")} for r in rows]
    assert fit_times(old) == old


def test_a_benchmark_with_the_socket_threads_at_sched_batch_is_fitted_from_the_median():
    """Calls measured with ``--gloo-io batch`` come out in one mode: their fit takes each
    size's median (six calls of 0.4 ms and four of 0.2 ms: 0.4), not the quartile (0.2)."""
    from scaleprobe.commands.comm import fit_quantile, fit_summary

    calls = [0.2e-3] * 4 + [0.4e-3] * 6
    rows = [{"op": "all_reduce", "size_bytes": n, "time_s": 0.4e-3 + n * 1e-9, "cpu_s": 1e-4,
             "times_s": [t + n * 1e-9 for t in calls]} for n in (1 << 16, 1 << 20, 1 << 24)]
    assert fit_quantile("batch") == 0.5 and fit_quantile("default") == fit_quantile(None) == 0.25
    batch = fit_summary(rows, 2, "batch")["all_reduce"]
    assert batch["alpha_s"] == pytest.approx(0.4e-3, rel=1e-3)
    assert fit_summary(rows, 2, "default")["all_reduce"]["alpha_s"] == pytest.approx(
        0.2e-3, rel=1e-3)


def test_link_from_results_file(tmp_path):
    from scaleprobe.core.results import append_jsonl

    path = tmp_path / "results.jsonl"
    with pytest.raises(ConfigError):
        resolve_link(str(tmp_path))  # a folder without comm results
    append_jsonl(path, {"kind": "comm", "world_size": 2, "backend": "gloo",
                        "fit": {"all_reduce": {"alpha_s": 4e-4, "beta_s_per_byte": 1e-9}}})
    link = resolve_link(str(path))
    assert link.bandwidth_gbit_s == pytest.approx(8.0) and link.alpha_s == pytest.approx(2e-4)
    assert resolve_link(str(tmp_path)).bandwidth_gbit_s == pytest.approx(8.0)


def test_a_prediction_across_nodes_uses_the_comm_results_measured_across_nodes(tmp_path):
    """A results file with a loopback measurement (1 node) after a cluster one (2 nodes, e.g.
    `comm --nnodes 2 --executor slurm`). Bugs caught: a 2-node prediction from the loopback
    fit (the latest record, 10x too fast a network), a 1-host prediction from the cluster's,
    and a fallback to the other kind that does not say so."""
    from scaleprobe.core.results import append_jsonl

    path = tmp_path / "results.jsonl"
    fit = {"all_reduce": {"alpha_s": 4e-4, "beta_s_per_byte": 1e-8}}  # 0.8 Gbit/s
    append_jsonl(path, {"kind": "comm", "world_size": 2, "nnodes": 2, "backend": "gloo",
                        "fit": fit})
    append_jsonl(path, {"kind": "comm", "world_size": 2, "nnodes": 1, "backend": "gloo",
                        "fit": {"all_reduce": {"alpha_s": 4e-5, "beta_s_per_byte": 1e-9}}})
    across = resolve_link(str(path), nnodes=2)
    assert across.bandwidth_gbit_s == pytest.approx(0.8)
    assert across.name == "measured (gloo, 2 ranks on 2 nodes)"
    assert "not crossed" not in across.source
    assert resolve_link(str(path), nnodes=1).bandwidth_gbit_s == pytest.approx(8.0)

    only_local = tmp_path / "local.jsonl"
    append_jsonl(only_local, {"kind": "comm", "world_size": 2, "nnodes": 1, "backend": "gloo",
                              "fit": fit})
    link = resolve_link(str(only_local), nnodes=2)
    assert "the network between nodes was not crossed" in link.source


def test_fsdp_by_hand():
    """Two all-gathers and a reduce-scatter of the parameters: 3(n-1) alpha + 3(n-1)/n S/B.
    n = 4: 9 x 20 us + 0.75 x 3 x 1e8 / 1.25e9 = 180 us + 0.18 s, 1.5x ddp's ring transfer."""
    assert comm_time_s("fsdp", S, 4, LINK) == pytest.approx(180e-6 + 0.18)
    assert comm_time_s("fsdp", S, 2, LINK) == pytest.approx(60e-6 + 0.12)
    assert comm_time_s("fsdp", S, 1, LINK) == 0.0
    pat = pattern("fsdp", S, 4)
    assert pat.link_bytes == pytest.approx(2.25e8) and pat.hops == 9
    assert predict_for_run("fsdp", 2, 1, S, 0.5, LINK)["strategy"] == "fsdp"


def test_fsdp_collectives_have_their_own_fits_on_a_measured_link():
    # over 2 ranks: all_gather_flat alpha 1 ms over (n-1) = 1 hop, beta 2e-9 s/B of the full
    # tensor -> bus (n-1)/n / beta = 2.5e8 B/s = 2 Gbit/s; reduce_scatter 4 Gbit/s
    rec = {"kind": "comm", "backend": "gloo", "world_size": 2,
           "fit": {"all_reduce": {"alpha_s": 400e-6, "beta_s_per_byte": 1e-9},
                   "all_gather_flat": {"alpha_s": 1e-3, "beta_s_per_byte": 2e-9},
                   "reduce_scatter": {"alpha_s": 2e-3, "beta_s_per_byte": 1e-9}}}
    link = resolve_link(rec)
    ag, rs = link.for_op("all_gather"), link.for_op("reduce_scatter")
    assert (ag.alpha_s, ag.bandwidth_gbit_s) == pytest.approx((1e-3, 2.0))
    assert (rs.alpha_s, rs.bandwidth_gbit_s) == pytest.approx((2e-3, 4.0))
    assert link.for_op("all_reduce") is link  # the link's own
    # a latency set by hand applies to every collective
    assert with_alpha(link, 1e-4).for_op("all_gather").alpha_s == 1e-4
    # the loopback preset carries the measured fits of FSDP's collectives
    assert {x[0] for x in PRESETS["loopback"].ops} == {"all_gather", "reduce_scatter"}
    # a fit per size range: the one whose range holds the bytes
    two = Link("lo", 8.0, 0.0, "t", ops=(("all_gather", 1e-3, 4.0, 0.0),
                                         ("all_gather", 2e-3, 1.0, 32e6)))
    assert two.for_op("all_gather", 1e6).bandwidth_gbit_s == 4.0
    assert two.for_op("all_gather", 40e6).bandwidth_gbit_s == 1.0


def test_fsdp_collectives_get_a_fit_below_32_mib_and_one_from_it():
    """gloo's FSDP collectives move a byte more slowly from 32 MiB up (fresh buffers): a comm
    record with two sizes or more below and one or more from there gets a fit per range, and
    the link prices a 64 MiB unit at the upper one (1 ms + 2 ns per byte below, a line through
    the origin at 4 ns per byte above), not at one line through both."""
    from scaleprobe.commands.comm import fit_summary, size_ranges

    mib = 1 << 20
    rows = [{"op": "all_gather_flat", "size_bytes": s * mib,
             "time_s": (1e-3 + 2e-9 * s * mib) if s < 32 else 4e-9 * s * mib}
            for s in (1, 4, 16, 64)]
    rows += [{"op": "reduce_scatter", "size_bytes": s * mib, "time_s": 1e-3 + 2e-9 * s * mib}
             for s in (1, 4, 16)]
    fits = fit_summary(rows, 2)
    lo, hi = fits["all_gather_flat"]["ranges"]
    assert (lo["from_bytes"], hi["from_bytes"]) == (0, 32 * mib)
    assert lo["alpha_s"] == pytest.approx(1e-3, rel=1e-3)
    assert lo["beta_s_per_byte"] == pytest.approx(2e-9, rel=1e-3)
    assert hi["alpha_s"] == 0.0 and hi["beta_s_per_byte"] == pytest.approx(4e-9)
    assert fits["reduce_scatter"]["ranges"] is None  # nothing measured from 32 MiB
    assert size_ranges(rows[2:4]) is None  # one size below: no line to draw there
    rec = {"kind": "comm", "backend": "gloo", "world_size": 2, "fit": fits}
    fits["all_reduce"] = {"alpha_s": 1e-3, "beta_s_per_byte": 1e-9}
    link = link_from_comm(rec)
    # bus bandwidth (n-1)/n / beta: 1/2 / 4e-9 B/s = 1 Gbit/s from 32 MiB, 2 Gbit/s below
    assert link.for_op("all_gather", 64 * mib).bandwidth_gbit_s == pytest.approx(1.0)
    assert link.for_op("all_gather", 4 * mib).bandwidth_gbit_s == pytest.approx(2.0, rel=1e-3)
    assert link.for_op("reduce_scatter", 64 * mib).bandwidth_gbit_s == pytest.approx(2.0,
                                                                                    rel=1e-3)


def test_latency_bound_sizes_get_a_fit_of_their_own():
    """Over a link with 1 ms each way gloo's all-gather took 2.5-2.9 ms from 16 KiB to 256
    KiB, whatever the size (it waits out the round trips), then grew with the bytes: one line
    through every size prices a 128 KiB unit short. Below the knee (where the line's latency
    and bandwidth terms are equal) a fit of its own, flat here: all latency, its bandwidth
    infinite, and the link prices a small unit at the time those sizes took."""
    from scaleprobe.commands.comm import fit_summary

    kib = 1 << 10
    flat = {16: 2.87e-3, 64: 2.48e-3, 128: 2.61e-3}
    rows = [{"op": "all_gather_flat", "size_bytes": k * kib, "time_s": t}
            for k, t in flat.items()]
    rows += [{"op": "all_gather_flat", "size_bytes": k * kib, "time_s": 1e-3 + 4.8e-9 * k * kib}
             for k in (1024, 4096, 16384)]
    rows += [{"op": "all_reduce", "size_bytes": k * kib, "time_s": 1e-3 + 9e-9 * k * kib}
             for k in (256, 1024, 4096)]
    fits = fit_summary(rows, 2)
    small, rest = fits["all_gather_flat"]["ranges"]
    assert small["from_bytes"] == 0 and 128 * kib < rest["from_bytes"] < 1024 * kib
    assert small["beta_s_per_byte"] == 0.0  # flat: the bytes cost nothing to see
    assert small["alpha_s"] == pytest.approx(2.65e-3, rel=0.05)
    assert rest["beta_s_per_byte"] == pytest.approx(4.8e-9, rel=1e-3)
    assert fits["all_reduce"]["ranges"] is None  # every size past the knee: one line
    link = link_from_comm({"kind": "comm", "backend": "gloo", "world_size": 2, "fit": fits})
    low = link.for_op("all_gather", 100 * kib)
    assert low.bandwidth_gbit_s == math.inf and low.alpha_s == pytest.approx(2.65e-3, rel=0.05)
    one_line = fit_summary(rows[3:], 2)["all_gather_flat"]
    assert one_line["ranges"] is None  # the sizes past the knee alone: nothing to split
    assert one_line["alpha_s"] + one_line["beta_s_per_byte"] * 100 * kib < 1.6e-3
