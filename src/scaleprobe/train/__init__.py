"""One rank of the built-in training loop: its process entry (``worker.py``), the loop
(``engine``), its parts (``parts``) and its own communication measurements
(``calibrate``)."""
