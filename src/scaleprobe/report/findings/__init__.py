"""Findings: a verdict, the numbers behind it and what to do next (``finding``), for one
run (``diagnose``) or several (``across_runs``), told once (``grouped``), with concrete
advice (``advice``), the report's opening verdicts (``headline``; their rows in ``verdict``,
``verdicts_settings`` and ``verdicts_experiments``) and the commands that would decide them
(``rerun``)."""
