"""Figures as the reports print them (core/fmt.py)."""

from scaleprobe.core import fmt


def test_flops_in_the_unit_that_reads():
    """Catches a small model's count printed as '0.00 GFLOP' and a unit prefix off by 1000."""
    assert fmt.flops(214_016) == "214 kFLOP"
    assert fmt.flops(2.781e10) == "27.8 GFLOP"
    assert fmt.flops(9.89e14, per_s=True) == "989 TFLOP/s"
    assert fmt.flops(3.71e6, per_s=True) == "3.71 MFLOP/s"
    assert fmt.flops(2.5e18) == "2,500 PFLOP" and fmt.flops(12) == "12 FLOP"
    assert fmt.flops(None) == fmt.NA


def test_a_long_error_in_a_cell_is_cut_at_a_word():
    """Bug: a failed point's cell was cut at 80 characters mid-word ("... per rank: l")."""
    text = ("failed: the dataset has 1,438 samples, fewer than one batch of 2,048 per rank: "
            "lower --batch-size to 1,438 or less")
    got = fmt.clipped(text)
    assert got == "failed: the dataset has 1,438 samples, fewer than one batch of 2,048 per ..."
    assert len(got) <= 80
    assert fmt.clipped("out of\nmemory") == "out of memory"
    assert fmt.clipped("x" * 100) == "x" * 76 + " ..."
