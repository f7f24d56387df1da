"""The step timeline (predict/timeline.py, predict/fluid.py), each case against a hand computation
written out in its docstring. Times in milliseconds in the comments, seconds in the code."""

import pytest

from scaleprobe.predict.fluid import Transfer, fair_rates, finish_times
from scaleprobe.predict.timeline import (
    WAKE_IDLE_S,
    Bucket,
    Compute,
    RankStep,
    Server,
    Unit,
    WorkerPath,
    ddp_steps,
    fsdp_steps,
    localsgd_steps,
    ps_steps,
    server_passes,
)

MS = 1e-3
C = Compute(data=0.0, h2d=0.0, forward=10 * MS, backward=30 * MS, optimizer=5 * MS)
THIRDS = [Bucket(1e6, 1 / 3), Bucket(1e6, 2 / 3), Bucket(1e6, 1.0)]


def _adds_up(s: RankStep) -> None:
    assert s.data + s.h2d + s.forward + s.backward + s.optimizer + s.comm == pytest.approx(
        s.step_s)


def test_ddp_buckets_overlap_backward_and_only_the_last_is_exposed():
    """Forward 10, backward 30, optimizer 5; buckets ready at 20, 30, 40 (a third of
    backward each), 5 ms of all-reduce each. All-reduces 20-25, 30-35, 40-45: the first two
    hide under backward, the last is exposed from its launch (40) to 45. Step 10 + 30 + 5 + 5
    = 50 ms; comm 5, backward 30."""
    (r0, r1), = ddp_steps([[C, C]], THIRDS, lambda b: 5 * MS)
    for s in (r0, r1):
        assert s.step_s == pytest.approx(50 * MS)
        assert s.comm == pytest.approx(5 * MS) and s.backward == pytest.approx(30 * MS)
        _adds_up(s)


def test_ddp_link_slower_than_compute_queues_the_buckets():
    """The same step with 20 ms per all-reduce: 20-40, then the second waits for the link
    (ready at 30, starts 40) 40-60, the third 60-80. Backward's compute ends at 40; the rank
    waits from the launch of its last bucket (40) to 80: comm 40, step 10 + 30 + 40 + 5 = 85.
    A sum of all-reduces without overlap would say 10 + 30 + 60 + 5 = 105."""
    (r0, _), = ddp_steps([[C, C]], THIRDS, lambda b: 20 * MS)
    assert r0.comm == pytest.approx(40 * MS) and r0.step_s == pytest.approx(85 * MS)
    _adds_up(r0)


def test_ddp_all_reduces_run_in_bucket_order_one_after_another():
    """Two buckets, in launch order: a big one ready half-way (at 25) costing 30, then a
    small one ready at 40 costing 1. The small one waits for the link: 55-56, comm 16, step
    10 + 30 + 16 + 5 = 61. Swapped costs (1 then 30): 25-26, then 40-70: comm 30, step 75.
    Each bucket's one-rank local time is paid on top of its transfer: local 2 ms on the
    last bucket moves the end to 58 (the one-rank backward already ends with those 2 ms,
    so its tail after the chain is 0)."""
    big_then_small = [Bucket(30e6, 0.5), Bucket(1e6, 1.0)]
    cost = {30e6: 30 * MS, 1e6: 1 * MS}
    (r0, _), = ddp_steps([[C, C]], big_then_small, lambda b: cost[b])
    assert r0.comm == pytest.approx(16 * MS) and r0.step_s == pytest.approx(61 * MS)
    swapped = {30e6: 1 * MS, 1e6: 30 * MS}
    (r0, _), = ddp_steps([[C, C]], big_then_small, lambda b: swapped[b])
    assert r0.comm == pytest.approx(30 * MS) and r0.step_s == pytest.approx(75 * MS)
    local = [Bucket(30e6, 0.5), Bucket(1e6, 1.0, local_s=2 * MS)]
    (r0, _), = ddp_steps([[C, C]], local, lambda b: cost[b])
    assert r0.comm == pytest.approx(18 * MS) and r0.step_s == pytest.approx(63 * MS)


def test_ddp_one_rank_is_the_run_itself_and_the_backward_tail_is_kept():
    """World size 1: the step is the measured compute, 45 ms, no comm. With two ranks and a
    one-rank chain that ends before backward does (last bucket ready at 0.8 x 30 = 24 ms
    into backward, 0 local time), the 6 ms tail (buckets copied back) follows the last
    all-reduce: ready at 10 + 24 = 34, all-reduce 34-44, backward ends 50, step 55."""
    (alone,), = ddp_steps([[C]], THIRDS, lambda b: 1.0)
    assert alone.step_s == pytest.approx(45 * MS) and alone.comm == 0.0
    (r0, _), = ddp_steps([[C, C]], [Bucket(1e6, 0.8)], lambda b: 10 * MS)
    assert r0.step_s == pytest.approx(55 * MS) and r0.comm == pytest.approx(10 * MS)


def test_ddp_fast_rank_waits_for_the_slow_one():
    """Rank 1's backward takes 60 ms: its last bucket is ready at 70, so the last
    all-reduce runs 70-75 for both ranks. Rank 0 launched its last bucket at 40 and waits
    35 ms; both steps end at 80."""
    slow = Compute(forward=10 * MS, backward=60 * MS, optimizer=5 * MS)
    (r0, r1), = ddp_steps([[C, slow]], THIRDS, lambda b: 5 * MS)
    assert r0.comm == pytest.approx(35 * MS) and r1.comm == pytest.approx(5 * MS)
    assert r0.step_s == pytest.approx(80 * MS) == pytest.approx(r1.step_s)


def test_fair_rates_share_and_respect_caps():
    assert fair_rates([None, None], 10.0) == [5.0, 5.0]
    assert fair_rates([None, 1.0], 10.0) == [9.0, 1.0]
    assert fair_rates([2.0, 3.0], 10.0) == [2.0, 3.0]


def test_fluid_transfers_on_one_link():
    """1 MB each at 10 MB/s: two at once share it and both end at 200 ms (the link moved
    2 MB); one starting 100 ms later: the first has the link alone and is done at 100, the
    second then alone ends at 200. A transfer capped at 1 MB/s beside an uncapped one: the
    other takes 9 MB/s and ends at 1/9 s; the capped one has moved 1/9 MB by then and needs
    8/9 s more: ends at 1 s."""
    assert finish_times([Transfer(0, 1e6), Transfer(0, 1e6)], 1e7) == pytest.approx([0.2, 0.2])
    assert finish_times([Transfer(0, 1e6), Transfer(0.1, 1e6)], 1e7) == pytest.approx(
        [0.1, 0.2])
    assert finish_times([Transfer(0, 1e6), Transfer(0, 1e6, cap_byte_s=1e6)], 1e7) == \
        pytest.approx([1 / 9, 1.0])


def test_parameter_server_link_carries_every_push_then_every_pull():
    """Two workers, 100 ms of compute each (forward 40 + backward 60), 1 MB of gradients,
    the server's link 10 MB/s, memory passes free, update 10 ms. Both pushes cross the
    server's link together: 2 MB at 10 MB/s, both in by 300. Update 300-310. Replies one
    after another at 10 MB/s: worker 0 at 410, worker 1 at 510. Steps 410 and 510 ms; the
    comm phase is everything after backward: 310 and 410."""
    w = Compute(forward=40 * MS, backward=60 * MS, optimizer=7 * MS)
    server = Server(capacity_byte_s=1e7, pass_s_per_byte=0.0, update_s=[10 * MS])
    (a, b), = ps_steps([[w, w]], 1e6, [WorkerPath(None, 0.0)] * 2, server)
    assert a.step_s == pytest.approx(410 * MS) and b.step_s == pytest.approx(510 * MS)
    assert a.comm == pytest.approx(310 * MS) and a.optimizer == 0.0  # workers do not step
    _adds_up(a)
    _adds_up(b)


def test_parameter_server_worker_behind_a_slow_cable_arrives_last():
    """As above, worker 1's cable at 1 MB/s: worker 0's push takes 9 MB/s and is in at
    100 + 111.1; worker 1's at 100 + 1000 = 1100. Update 1100-1110; replies in arrival
    order: worker 0 at 1210, worker 1 (1 MB at 1 MB/s) at 2210."""
    w = Compute(forward=40 * MS, backward=60 * MS)
    server = Server(1e7, 0.0, [10 * MS])
    (a, b), = ps_steps([[w, w]], 1e6, [WorkerPath(None, 0.0), WorkerPath(1e6, 0.0)], server)
    assert a.step_s == pytest.approx(1210 * MS) and b.step_s == pytest.approx(2210 * MS)


def test_parameter_server_memory_passes_and_latency():
    """One worker, 1 MB, a pass over touched memory 1 ms per MB, into a fresh buffer 3 ms,
    alpha 0.5 ms per message, link 10 MB/s, update 10 ms. Worker: compute 100, flatten and
    append into new tensors (2 fresh) 106; push 0.5 + 100 -> 206.5. Server: clone (1 fresh)
    209.5; stack, mean, flatten, append: server_passes(1) = 4 fresh, 0 warm -> 221.5; update
    231.5; reply 0.5 + 100 -> 332; the worker's first touch and copy (1 fresh): 335."""
    assert server_passes(1) == (4.0, 0.0) and server_passes(3) == (6.0, 1.0)
    w = Compute(forward=40 * MS, backward=60 * MS)
    server = Server(1e7, 1 * MS / 1e6, [10 * MS], fresh_s_per_byte=3 * MS / 1e6)
    (a,), = ps_steps([[w]], 1e6, [WorkerPath(None, 0.5 * MS)], server)
    assert a.step_s == pytest.approx(335 * MS)
    warm_only = Server(1e7, 1 * MS / 1e6, [10 * MS])  # no first-touch cost: 8 passes of 1 ms
    (a,), = ps_steps([[w]], 1e6, [WorkerPath(None, 0.5 * MS)], warm_only)
    assert a.step_s == pytest.approx(319 * MS)


def test_localsgd_averages_on_steps_0_k_2k():
    """K = 2, ranks computing 10 and 12 ms a step, 5 ms per averaging. Step 0 averages:
    both end at 12 + 5 = 17 (comm 7 and 5). Step 1 does not: 27 and 29. Step 2 averages
    once the slower is done: 41 + 5 = 46 for both."""
    a, b = Compute(forward=10 * MS), Compute(forward=12 * MS)
    out = localsgd_steps([[a, b]] * 3, 2, lambda n: 5 * MS, 1e6)
    assert [s.step_s for s in out[0]] == pytest.approx([17 * MS, 17 * MS])
    assert [s.comm for s in out[0]] == pytest.approx([7 * MS, 5 * MS])
    assert [s.comm for s in out[1]] == [0.0, 0.0]
    assert [s.step_s for s in out[2]] == pytest.approx([46 * MS - 27 * MS, 46 * MS - 29 * MS])


def test_fsdp_synchronous_collectives_and_prefetch():
    """Two units of equal share, forward 10, backward 20, optimizer 5, all-gather 2,
    reduce-scatter 3. Synchronous (gloo on the CPU): forward AG 0-2, unit 0 2-7, AG 7-9,
    unit 1 9-14; backward AG 14-16, unit 1 16-26, RS 26-29, AG 29-31, unit 0 31-41, RS
    41-44; optimizer: 49. Comm 2 + 2 + 2 + 3 + 2 + 3 = 14.
    Prefetch: AG 0-2, unit 0 2-7 (unit 1's AG issued at 2: 2-4), unit 1 7-12; backward AG
    12-14, unit 1 14-24, RS 24-27; unit 0's AG was issued at 14 but the link is busy until
    27: 27-29, unit 0 29-39, RS 39-42; optimizer: 47. Comm 2 + 2 + 5 + 3 = 12."""
    c = Compute(forward=10 * MS, backward=20 * MS, optimizer=5 * MS)
    units = [Unit(1e6, 0.5), Unit(1e6, 0.5)]
    (s, _), = fsdp_steps([[c, c]], units, lambda b: 2 * MS, lambda b: 3 * MS, prefetch=False)
    assert s.step_s == pytest.approx(49 * MS) and s.comm == pytest.approx(14 * MS)
    (p, _), = fsdp_steps([[c, c]], units, lambda b: 2 * MS, lambda b: 3 * MS, prefetch=True)
    assert p.step_s == pytest.approx(47 * MS) and p.comm == pytest.approx(12 * MS)
    _adds_up(s)
    _adds_up(p)


def test_steps_follow_each_other_per_rank():
    """Two steps of the slow-link case: every rank's second step starts where its first
    ended, so the sequence repeats (85 ms each)."""
    out = ddp_steps([[C, C], [C, C]], THIRDS, lambda b: 20 * MS)
    assert [s.step_s for s in out[1]] == pytest.approx([85 * MS, 85 * MS])


def test_ddp_collective_cpu_inside_backward_delays_it():
    """THIRDS with 5 ms all-reduces and the collective costing 1 ns of the rank's CPU per
    byte (1 ms per 1 MB bucket): the first two all-reduces (20-25, 30-35) run wholly inside
    backward (10-40), so backward's compute ends 2 ms later, at 42; the last bucket goes
    42-47. Step 52 ms, backward 32, comm 5. The last all-reduce runs after backward's compute:
    it takes nothing from it."""
    (r0, r1), = ddp_steps([[C, C]], THIRDS, lambda b: 5 * MS, cpu_s_per_byte=1e-9)
    for s in (r0, r1):
        assert s.step_s == pytest.approx(52 * MS)
        assert s.backward == pytest.approx(32 * MS) and s.comm == pytest.approx(5 * MS)
        _adds_up(s)
    (r,), = ddp_steps([[C]], THIRDS, lambda b: 5 * MS, cpu_s_per_byte=1e-9)
    assert r.step_s == pytest.approx(C.total)  # one rank: the run as measured


def test_a_collective_on_an_idle_link_costs_its_wake_once():
    """THIRDS with 5 ms all-reduces and a wake of 1 ms. The link is idle before each bucket
    (ready at 20, 30, 40; the one before ends at 26 and 36): 20-26, 30-36, 40-46, so the
    last is exposed 6 ms, step 51. With 20 ms all-reduces the buckets queue: only the first
    finds the link idle, 20-41, 41-61, 61-81: step 86, one wake, not three."""
    (r0, _), = ddp_steps([[C, C]], THIRDS, lambda b: 5 * MS, wake_s=1 * MS)
    assert r0.comm == pytest.approx(6 * MS) and r0.step_s == pytest.approx(51 * MS)
    _adds_up(r0)
    (q0, _), = ddp_steps([[C, C]], THIRDS, lambda b: 20 * MS, wake_s=1 * MS)
    assert q0.step_s == pytest.approx(86 * MS)


def test_fsdp_and_local_sgd_pay_the_wake_where_the_link_was_idle():
    """The synchronous FSDP case above (49 ms) with a wake of 1 ms: 5 of its 6 collectives are
    issued after compute, on an idle link; unit 0's backward all-gather follows unit 1's
    reduce-scatter at once (29), on a link still awake: 54 ms, comm 19. With prefetch, unit 1's forward
    all-gather is issued as unit 0's leaves the link (at 3) and unit 0's backward one while
    unit 1's reduce-scatter is on it (at 16, busy until 30): 4 wakes, 47 + 4 = 51 ms. Local SGD's averaging, always after compute: 17 + 1 = 18 at step 0."""
    c = Compute(forward=10 * MS, backward=20 * MS, optimizer=5 * MS)
    units = [Unit(1e6, 0.5), Unit(1e6, 0.5)]
    (s, _), = fsdp_steps([[c, c]], units, lambda b: 2 * MS, lambda b: 3 * MS, prefetch=False,
                         wake_s=1 * MS)
    assert s.step_s == pytest.approx(54 * MS) and s.comm == pytest.approx(19 * MS)
    (p, _), = fsdp_steps([[c, c]], units, lambda b: 2 * MS, lambda b: 3 * MS, prefetch=True,
                         wake_s=1 * MS)
    assert p.step_s == pytest.approx(51 * MS)
    _adds_up(s)
    _adds_up(p)
    a = Compute(forward=12 * MS)
    out = localsgd_steps([[a, a]], 2, lambda n: 5 * MS, 1e6, wake_s=1 * MS)
    assert [x.step_s for x in out[0]] == pytest.approx([18 * MS, 18 * MS])


def test_a_link_idle_for_less_than_the_threshold_is_still_awake():
    """gloo's threads sleep only after about 4 ms idle (WAKE_IDLE_S): the synchronous FSDP
    case with a forward of 6 ms (3 per unit) and a wake of 1 ms. AG 0-1-3 (the step's first:
    woken), unit 0 3-6, AG 6-8 (idle 3 ms: awake), unit 1 8-11; backward AG 11-13 (idle 3),
    unit 1 13-23, RS 23-24-27 (idle 10: woken), AG 27-29 (at once), unit 0 29-39, RS
    39-40-43; optimizer 43-48. Were every idle link woken, 50."""
    assert WAKE_IDLE_S == pytest.approx(4 * MS)
    c = Compute(forward=6 * MS, backward=20 * MS, optimizer=5 * MS)
    units = [Unit(1e6, 0.5), Unit(1e6, 0.5)]
    (s, _), = fsdp_steps([[c, c]], units, lambda b: 2 * MS, lambda b: 3 * MS, prefetch=False,
                         wake_s=1 * MS)
    assert s.step_s == pytest.approx(48 * MS) and s.comm == pytest.approx(17 * MS)
    _adds_up(s)


def test_the_root_is_not_gathered_again_for_backward():
    """FSDP keeps the root gathered from forward through backward: the synchronous case
    (49 ms) with unit 1 the root loses its backward all-gather, 2 ms: 47."""
    c = Compute(forward=10 * MS, backward=20 * MS, optimizer=5 * MS)
    units = [Unit(1e6, 0.5), Unit(1e6, 0.5, regather=False)]
    (s, _), = fsdp_steps([[c, c]], units, lambda b: 2 * MS, lambda b: 3 * MS, prefetch=False)
    assert s.step_s == pytest.approx(47 * MS) and s.comm == pytest.approx(12 * MS)
    _adds_up(s)
