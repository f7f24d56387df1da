"""Scaling table: speedup, efficiency and what the gap was lost to."""

from __future__ import annotations

import pytest

from scaleprobe.report import scale as S
from tests.unit.report.factory import run, scale_point


def _bd(data: float, comm: float, compute: float) -> dict[str, float]:
    return {"data": data, "h2d": 0.0, "forward": compute * 0.4, "backward": compute * 0.5,
            "optimizer": compute * 0.1, "comm": comm}


def _scale_records() -> list[dict]:
    one = run("n1", strategy="ddp", nproc=1, sps=100.0, bd=_bd(0.005, 0.0, 0.095),
              experiment=scale_point("sc", 1))
    two = run("n2", strategy="ddp", nproc=2, sps=162.0, bd=_bd(0.0112, 0.0148, 0.0975),
              experiment=scale_point("sc", 2))
    four = run("n4", status="failed", error="rank 3 lost", strategy="ddp", nproc=4,
               experiment=scale_point("sc", 4))
    return [four, two, one]


def test_scale_table_speedup_efficiency_and_losses():
    rows = S.scale_table(_scale_records())
    assert [r["nproc"] for r in rows] == [1, 2, 4]
    assert rows[0]["speedup"] == pytest.approx(1.0)
    two = rows[1]
    assert two["speedup"] == pytest.approx(1.62)
    assert two["efficiency"] == pytest.approx(0.81)
    total = 0.0112 + 0.0148 + 0.0975
    assert two["lost"]["communication"] == pytest.approx(0.0148 / total)
    assert two["lost"]["data wait"] == pytest.approx((0.0112 - 0.005) / total)
    assert two["lost"]["slower compute"] == pytest.approx((0.0975 - 0.095) / total)
    assert two["line"] == ("2 processes: 1.62x (81%); lost to: communication 12%, "
                           "data wait 5%, slower compute 2%")
    assert rows[2]["line"] == "4 processes: failed: rank 3 lost"
    assert S.scale_cells(rows[1])[2] == "1.62x"


def test_strong_scaling_expects_less_compute_per_step():
    base = run("g1", nproc=1, batch=64, sps=100.0, bd=_bd(0.0, 0.0, 0.64),
               experiment=scale_point("st", 1))
    half = run("g2", nproc=2, batch=32, sps=180.0, bd=_bd(0.0, 0.02, 0.34),
               experiment=scale_point("st", 2))
    two = S.scale_table([base, half])[1]
    assert two["lost"]["slower compute"] == pytest.approx((0.34 - 0.32) / 0.36)


def test_no_baseline_gives_no_speedup():
    rows = S.scale_table([run("n2", nproc=2, experiment=scale_point("x", 2))])
    assert rows[0]["speedup"] is None
    assert "no 1-process run" in rows[0]["line"]
