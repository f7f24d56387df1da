"""The bottom floor: the typed record, its figures and the errors, torch-free and mypy-strict.

``record`` (the records' base), ``result_model`` (a run's record, with its parts from
``run_metrics`` and ``run_parts``, and a rank's from ``rank_record``),
``experiment_records`` (the experiments' own), ``results`` (reading and writing them) and
``invariants`` (what every run result must hold); ``metrics`` (every reported figure, defined
once), ``claim`` (a verdict with its evidence), ``fmt`` (how a figure is printed) and
``thresholds`` (the bars a rule compares against); ``traits`` (what a strategy is),
``registry`` (names with close-match suggestions) and ``errors`` (the mistakes a user can make,
one line each). The features' rules on the record are the floor above (``features/``), the
run's configuration the one above that (``config/``). Nothing here imports a floor above it,
or torch (pyproject.toml's import contracts; docs/ARCHITECTURE.md).
"""
