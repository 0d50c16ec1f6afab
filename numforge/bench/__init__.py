"""Benchmarks behind ``numforge bench``: each module has ``add_arguments(parser)`` and ``run(args)``."""
