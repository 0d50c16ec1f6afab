"""One module per ``numforge`` sub-command, each with ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``,
and the exit statuses they all share (``cli.main`` turns errors into them)."""

EXIT_OK = 0
EXIT_FAILED = 1  # the job ran and failed: a gradient check off, a training run that diverged
EXIT_BAD_INPUT = 2  # a bad flag, file or path (argparse's usage errors too)
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT); any stop signal exits 128 + its number: 143 for SIGTERM
EXIT_CLOSED_PIPE = 141  # 128 + SIGPIPE: the reader of stdout went away (numforge params | head)
