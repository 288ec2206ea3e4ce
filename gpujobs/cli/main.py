"""`gpujobs` commands. Tables for people, `--json` for scripts, and exit codes that mean something:

  0  ok
  1  the job ended FAILED or CANCELLED (submit --wait), or nothing was submitted (the question
     was answered no, or not at all)
  2  usage error or invalid spec (the field errors are printed)
  3  not found
  4  authentication or permission refused (401/403)
  5  server error, rate limited or the API unreachable (after retries)
  6  conflict
  7  --wait gave up (--timeout)
130  interrupted (Ctrl-C)
141  the output's reader went away (`gpujobs ls | head`): stopped quietly, as a shell would

Tables fit the terminal (`COLUMNS`, else its width; no limit off a terminal): they leave out
their least useful columns and wrap long text. `--wide` shows every column in full.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from gpujobs import errors
from gpujobs.cli import layout
from gpujobs.cli.common import JOB_HELP, PIPE_CLOSED
from gpujobs.cli.costs import cmd_budget, cmd_estimate, cmd_offers, cmd_usage
from gpujobs.cli.jobs import (
    cmd_cancel,
    cmd_download,
    cmd_events,
    cmd_logs,
    cmd_ls,
    cmd_show,
    cmd_submit,
)
from gpujobs.client import Client
from gpujobs.resources import JobStatus
from gpujobs.spec import CapacityType
from gpujobs.usage import UsageGroupBy
from gpujobs.version import __version__

EXIT_CODES: dict[type[errors.GpuJobsError], int] = {
    errors.WaitTimeout: 7,
    errors.InvalidSpec: 2,
    errors.BadRequest: 2,
    errors.NotFound: 3,
    errors.Unauthorized: 4,
    errors.Forbidden: 4,
    errors.RateLimited: 5,
    errors.ServerError: 5,
    errors.ConnectionFailed: 5,
    errors.Conflict: 6,
}


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", help="API URL (default: $GPUJOBS_URL, the credentials file)")
    common.add_argument("--token", help="API token (default: $GPUJOBS_TOKEN, the credentials file)")
    common.add_argument("--json", action="store_true", help="print JSON for scripts")
    common.add_argument(
        "--wide", action="store_true", help="every column in full, however wide the terminal"
    )
    common.add_argument(
        "--retries", type=int, default=4, metavar="N", help="tries per request (default 4)"
    )
    parser = argparse.ArgumentParser(
        prog="gpujobs",
        description="Run GPU training jobs cheaply and reliably.",
        epilog="exit codes: 0 ok, 1 job failed/cancelled or not submitted, 2 usage/invalid "
        "spec, 3 not found, 4 auth, 5 server/connection, 6 conflict, 7 wait timed out",
    )
    parser.add_argument("--version", action="version", version=f"gpujobs {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    submit = sub.add_parser("submit", parents=[common], help="submit a job spec (YAML)")
    submit.add_argument("file", metavar="FILE.yaml")
    submit.add_argument("--wait", action="store_true", help="wait for the job, showing progress")
    submit.add_argument("--idempotency-key", help="make re-running this command a no-op")
    submit.add_argument("--timeout", type=float, help="with --wait: give up after S seconds")
    submit.add_argument("--poll", type=float, default=2.0, help=argparse.SUPPRESS)
    submit.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="submit without showing the plan and asking (the quote is shown)",
    )
    submit.set_defaults(run=cmd_submit)

    ls = sub.add_parser("ls", parents=[common], help="list jobs, newest first")
    ls.add_argument(
        "--status", action="append", type=str.upper, choices=[s.value for s in JobStatus]
    )
    ls.add_argument("--limit", type=int, default=None, help="show at most N jobs")
    ls.set_defaults(run=cmd_ls)

    show = sub.add_parser("show", parents=[common], help="one job, with its attempts")
    show.add_argument("job_id", metavar="JOB", help=JOB_HELP)
    show.set_defaults(run=cmd_show)

    events = sub.add_parser("events", parents=[common], help="a job's decisions and changes")
    events.add_argument("job_id", metavar="JOB", help=JOB_HELP)
    events.set_defaults(run=cmd_events)

    logs = sub.add_parser("logs", parents=[common], help="a job's log (-f: follow it)")
    logs.add_argument("job_id", metavar="JOB", help=JOB_HELP)
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing as it grows, until the job ends"
    )
    # Following was the default once: its way out is still accepted.
    logs.add_argument("--no-follow", dest="follow", action="store_false", help=argparse.SUPPRESS)
    logs.set_defaults(run=cmd_logs, follow=False)

    cancel = sub.add_parser("cancel", parents=[common], help="cancel a job")
    cancel.add_argument("job_id", metavar="JOB", help=JOB_HELP)
    cancel.set_defaults(run=cmd_cancel)

    download = sub.add_parser(
        "download", parents=[common], help="a job's trained weights (or a checkpoint)"
    )
    download.add_argument("job_id", metavar="JOB", help=JOB_HELP)
    download.add_argument("--step", type=int, help="a checkpoint's step (default: the final one)")
    download.add_argument("-o", "--output", default=".", help="folder (default: here)")
    download.set_defaults(run=cmd_download)

    offers = sub.add_parser("offers", parents=[common], help="the price catalog, cheapest first")
    offers.add_argument("--gpu", action="append", default=[], help="GPU model, e.g. A100")
    offers.add_argument("--region", action="append", default=[])
    offers.add_argument("--cloud", action="append", default=[])
    offers.add_argument("--gpus", type=int, help="GPUs per node")
    offers.add_argument(
        "--capacity", choices=[c.value for c in CapacityType], help="sort by this capacity's price"
    )
    offers.add_argument("--limit", type=int, default=20)
    offers.set_defaults(run=cmd_offers)

    estimate = sub.add_parser("estimate", parents=[common], help="price a spec without running it")
    estimate.add_argument("file", metavar="FILE.yaml")
    estimate.set_defaults(run=cmd_estimate)

    usage = sub.add_parser("usage", parents=[common], help="spend, savings and budgets")
    usage.add_argument("--from", dest="from_", metavar="ISO", help="start (default: 1st of month)")
    usage.add_argument("--to", metavar="ISO", help="end (default: now)")
    usage.add_argument(
        "--group-by", default="team", choices=[g.value for g in UsageGroupBy], help="default team"
    )
    usage.set_defaults(run=cmd_usage)

    budget = sub.add_parser("budget", parents=[common], help="your team's budget this month")
    budget.set_defaults(run=cmd_budget)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        code = _main(argv, out)
        for stream in (out, sys.stdout, sys.stderr):
            stream.flush()
    except BrokenPipeError:  # `gpujobs ls | head`: the reader has all it wanted
        _drop_closed_output()
        return PIPE_CLOSED
    return code


def _drop_closed_output() -> None:
    """Point stdout and stderr, where their reader went away, at /dev/null: Python flushes them
    at exit and would print a BrokenPipeError there (the recipe of Python's `signal` docs)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            os.dup2(devnull, stream.fileno())


def _main(argv: Sequence[str] | None, out: TextIO) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        with Client(args.url, args.token, max_attempts=args.retries) as client:
            return int(args.run(client, args, out))
    except errors.GpuJobsError as error:
        _report(error)
        return _exit_code(error)
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        return 130


def _exit_code(error: errors.GpuJobsError) -> int:
    for cls, code in EXIT_CODES.items():
        if isinstance(error, cls):
            return code
    return 5


def _report(error: errors.GpuJobsError) -> None:
    width = layout.terminal_width(sys.stderr)  # an error fits the terminal as any line does
    layout.write_wrapped(sys.stderr, f"error: {error.message}", width)
    lines = [f"{field.field}: {field.reason}" for field in error.fields]
    if any(line not in error.message for line in lines):  # the message summarises a few
        for line in lines:
            layout.write_wrapped(sys.stderr, f"  {line}", width, indent=6)
    if isinstance(error, errors.Unauthorized):
        sys.stderr.write("  (set GPUJOBS_TOKEN, pass --token, or run `make run` once)\n")


if __name__ == "__main__":
    sys.exit(main())
