"""The cost of one median confidence interval, as the adaptive stopping rule asks for it every
few steps inside the measured window: scaleprobe's (order statistics picked with
scipy.stats.binom) against scipy.stats.quantile_test(...).confidence_interval().

    python benchmarks/median_ci.py
Prints one line per sample size: milliseconds per call of each, and their ratio.
"""

import random
import timeit

from scipy.stats import quantile_test

from scaleprobe.measure.stats import median_ci

rng = random.Random(0)
for n in (50, 1000, 5000):
    xs = [1 + rng.gauss(0, 0.05) for _ in range(n)]
    ours = min(timeit.repeat(lambda xs=xs: median_ci(xs), number=200, repeat=3)) / 200
    lib = min(timeit.repeat(lambda xs=xs: quantile_test(xs, p=0.5).confidence_interval(0.95),
                            number=200, repeat=3)) / 200
    print(f"n={n}: median_ci {ours * 1e3:.3f} ms, quantile_test {lib * 1e3:.3f} ms, "
          f"ratio {lib / ours:.1f}x")
