"""What a report reads from the records: loaded and grouped (``records``), an experiment
point's repeats (``repeats``), like-for-like pairing (``pairing``), the machine's load
during a run (``machine_load``) and how a run's timed window ended (``window``)."""
