"""The report written: the document model and its Markdown and HTML writers (``doc``),
figures (``plots``, ``critical_plot``, ``labels``), sections (``sections_runs``,
``sections_exp``, ``sections_comm``, ``whatif``), a sweep's and a co-location's tables
(``sweep_tables``, ``colocate``) and the whole report (``build_report``)."""
