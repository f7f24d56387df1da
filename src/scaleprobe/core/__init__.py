"""The bottom floor: the typed record and its figures, torch-free and mypy-strict.

``record`` (the records' base), ``result_model`` (a run's and a rank's record),
``experiment_records`` (the experiments' own) and ``results`` (reading and writing them), ``metrics``
(every reported figure, defined once), ``fmt`` (how a figure is printed), ``thresholds`` (the
bars a rule compares against), ``target`` (a quality target), ``traits`` (what a strategy
is), ``registry``, ``lmspec``, ``schema`` and ``errors`` (the mistakes a user can make, one
line each); the run's configuration (``config``, its cross-checks ``config_rules``), the
names ``--model`` and ``--dataset`` accept (``catalog``, with ``extras``: the optional
libraries), the link presets (``links``), the gradient noise scale's estimators (``gns``),
stopping on request (``interrupt``) and the copies of examples and docs that come with
scaleprobe (``bundled``). Nothing here imports a floor above it, or torch (pyproject.toml's import
contracts; docs/ARCHITECTURE.md).
"""
