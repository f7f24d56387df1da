"""One run: the driver (``driver.py``) over a workload, the built-in training loop
(``builtin.py``) or the user's own script (``script.py``); ``workloads.py`` picks one for a
configuration; ``finalize.py`` writes the record; ``failure.py`` names how a run ended."""
