"""Communication measured: DDP's all-reduces timed in the step through its comm hook
(``hook``), the per-step figure with its interval (``instep``), exposed communication split
into transfer and synchronisation (``exposed``), and the collectives benchmark (``bench``,
``scaleprobe comm``)."""
