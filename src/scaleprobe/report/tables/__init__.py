"""The report's analyses as typed rows (``rows``): batch size (``batch``, its rule
``batch_rule``, with a target ``batch_target``), loader workers (``workers``), scaling
(``scale``), time to target (``time_to_target``), the critical batch (``critical``) and
a sweep's points (``sweep_points``). Usable outside the report."""
