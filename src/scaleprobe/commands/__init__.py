"""One module per command: ``NAME``, ``HELP``, ``add_arguments(parser)``, ``run(args) -> int``."""
