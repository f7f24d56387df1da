"""Step timing, statistics and background monitors; communication measured in the step
and the collectives benchmark in ``measure/comm/``."""
