"""What every command shares: exit codes, signature, output width, the simulated-mode notice."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TextIO

from gpujobs.cli import layout
from gpujobs.client import Client
from gpujobs.resources import Deployment

OK, JOB_NOT_SUCCEEDED, USAGE = 0, 1, 2
NOT_SUBMITTED = JOB_NOT_SUCCEEDED  # a script must not take "not submitted" for success
PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away
JOB_HELP = "the job's id, a unique start of it, or its name"

Command = Callable[[Client, argparse.Namespace, TextIO], int]


def output_width(args: argparse.Namespace, stream: TextIO) -> int | None:
    return layout.terminal_width(stream, wide=args.wide)


def say_simulated(deployment: Deployment, args: argparse.Namespace, stream: TextIO) -> bool:
    """Say, once per output for people that shows placements or costs, when the deployment's
    launcher is local: its clouds, instances and prices are simulated (scripts reading --json
    ask `Client.deployment()`)."""
    if deployment.notice:
        layout.write_wrapped(stream, deployment.notice, output_width(args, stream))
    return deployment.simulated
