"""``scaleprobe wrap``: measure a user's own training script, unchanged (docs/WRAP.md).

``driver`` launches the ranks and records the run; ``boot`` is each rank's entry; ``hooks``
is what a rank sees of the script (steps, phases, the samples its DataLoader handed out)."""
