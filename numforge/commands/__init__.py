"""One module per ``numforge`` sub-command, each with ``add_arguments(parser)`` and ``run(args) -> int``."""
