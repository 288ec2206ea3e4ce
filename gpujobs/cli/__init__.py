"""The `gpujobs` command line: submit, list, show, follow logs, cancel, estimate, usage."""

from gpujobs.cli.main import EXIT_CODES, main

__all__ = ["EXIT_CODES", "main"]
