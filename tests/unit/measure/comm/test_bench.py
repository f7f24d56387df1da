"""Message sizes, operation names, bus-bandwidth factors and iteration plans (no processes)."""

import pytest

from scaleprobe.core.errors import ConfigError
from scaleprobe.measure.comm.bench import (
    BYTES_BUDGET_PER_POINT,
    DEFAULT_OPS,
    MIN_TIMED_ITERS,
    OPS,
    busbw_factor,
    make_row,
    parse_ops,
    parse_sizes,
    plan_iters,
)


def test_sizes_are_powers_of_1024_sorted_and_unique():
    assert parse_sizes("1K,1M,16M,256M") == [1024, 1 << 20, 16 << 20, 256 << 20]
    assert parse_sizes("256M, 1K ,1KiB,2kb") == [1024, 2048, 256 << 20]
    assert parse_sizes("4096,1G,0.5K") == [512, 4096, 1 << 30]


@pytest.mark.parametrize("bad", ["", "1X", "abc", "2", "1K,,", "-1M"])
def test_bad_sizes_are_one_line_config_errors(bad):
    with pytest.raises(ConfigError) as e:
        parse_sizes(bad)
    assert "\n" not in str(e.value)


def test_ops_validated_with_suggestion():
    assert parse_ops("all_reduce, ps_push_pull,all_reduce") == ["all_reduce", "ps_push_pull"]
    with pytest.raises(ConfigError, match="did you mean all_reduce"):
        parse_ops("allreduce")
    with pytest.raises(ConfigError):
        parse_ops(" , ")


@pytest.mark.parametrize(
    "op,n,factor",
    [("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
     ("all_gather", 2, 0.5), ("all_gather", 4, 0.75), ("broadcast", 8, 1.0),
     ("reduce", 8, 1.0), ("ps_push_pull", 2, 2.0), ("ps_push_pull", 4, 6.0),
     ("reduce_scatter", 2, 0.5), ("reduce_scatter", 4, 0.75), ("fsdp_step", 2, 1.5),
     ("fsdp_step", 4, 2.25), ("all_gather_flat", 4, 0.75)],
)
def test_busbw_factors(op, n, factor):
    assert busbw_factor(op, n) == pytest.approx(factor)


def test_rows_carry_algbw_and_busbw():
    row = make_row("all_reduce", 1_000_000_000, 2.0, 4)
    assert row["algbw_gbyte_s"] == pytest.approx(0.5)
    assert row["busbw_gbyte_s"] == pytest.approx(0.75)
    assert set(row) == {"op", "size_bytes", "time_s", "algbw_gbyte_s", "busbw_gbyte_s"}
    assert set(OPS) == {"all_reduce", "broadcast", "reduce", "all_gather", "ps_push_pull",
                        "reduce_scatter", "fsdp_step", "all_gather_flat"}
    # `scaleprobe comm` runs the classic five unless --ops names the FSDP ones
    assert DEFAULT_OPS == ("all_reduce", "broadcast", "reduce", "all_gather", "ps_push_pull")


def test_big_messages_get_fewer_iterations():
    assert plan_iters(1024, 20, 5) == (20, 5)
    timed, warm = plan_iters(256 << 20, 20, 5)
    assert timed == max(MIN_TIMED_ITERS, BYTES_BUDGET_PER_POINT // (256 << 20)) and warm == 1
    assert plan_iters(1 << 34, 20, 5) == (MIN_TIMED_ITERS, 1)
    assert plan_iters(1 << 34, 2, 0) == (2, 0)
