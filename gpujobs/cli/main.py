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
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from gpujobs import errors
from gpujobs.cli import render
from gpujobs.cli.render import Column
from gpujobs.client import Client
from gpujobs.plans import Plan
from gpujobs.resources import Deployment, Job, JobStatus
from gpujobs.spec import CapacityType
from gpujobs.usage import Budget, UsageGroupBy, UsageReport
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
OK, JOB_NOT_SUCCEEDED, USAGE = 0, 1, 2
NOT_SUBMITTED = JOB_NOT_SUCCEEDED  # a script must not take "not submitted" for success
PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away
JOB_HELP = "the job's id, a unique start of it, or its name"

Command = Callable[[Client, argparse.Namespace, TextIO], int]


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
    sys.stderr.write(f"error: {error.message}\n")
    lines = [f"{field.field}: {field.reason}" for field in error.fields]
    if any(line not in error.message for line in lines):  # the message summarises a few
        for line in lines:
            sys.stderr.write(f"  {line}\n")
    if isinstance(error, errors.Unauthorized):
        sys.stderr.write("  (set GPUJOBS_TOKEN, pass --token, or run `make run` once)\n")


# -- commands ------------------------------------------------------------------------------------


def _width(args: argparse.Namespace, stream: TextIO) -> int | None:
    return render.terminal_width(stream, wide=args.wide)


def _say_simulated(deployment: Deployment, args: argparse.Namespace, stream: TextIO) -> bool:
    """Say, once per output for people that shows placements or costs, when the deployment's
    launcher is local: its clouds, instances and prices are simulated (scripts reading --json
    ask `Client.deployment()`)."""
    if deployment.notice:
        render.write_wrapped(stream, deployment.notice, _width(args, stream))
    return deployment.simulated


def _confirm_plan(client: Client, args: argparse.Namespace) -> bool:
    """Show where the scheduler would run the job now and what it is quoted, as `dstack apply`
    does; ask on a terminal. Without a terminal (scripts, CI) the plan is shown and submitted."""
    width = _width(args, sys.stderr)
    try:
        estimate = client.estimate(args.file)
    except errors.InvalidSpec as error:  # e.g. no estimated_hours: nothing to price it by
        message = f"no quote ({error.message}); the scheduler prices it once it runs"
        render.write_wrapped(sys.stderr, message, width)
        estimate = None
    if estimate is not None:
        chosen = next((plan for plan in estimate.plans if plan.chosen), None)
        if chosen is not None:
            render.write_wrapped(sys.stderr, f"plan: {render.plan_line(chosen)}", width)
        render.write_wrapped(sys.stderr, f"{estimate.decision}: {estimate.reason}", width)
        if estimate.quote is not None:
            render.write_wrapped(sys.stderr, render.quote_line(estimate.quote), width)
    if not sys.stdin.isatty():
        return True
    sys.stderr.write("Submit? [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer:
        sys.stderr.write("\nno answer: stdin is closed\n")
    return answer.strip().lower() in ("y", "yes")


def cmd_submit(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    # Said before the plan, the quote and the placements it qualifies.
    simulated = _say_simulated(client.deployment(), args, sys.stderr)
    if not args.yes and not _confirm_plan(client, args):
        sys.stderr.write("not submitted (-y submits without asking)\n")
        return NOT_SUBMITTED
    job = client.submit(args.file, idempotency_key=args.idempotency_key)
    width = _width(args, sys.stderr)
    if args.yes and job.quote is not None:
        # Nothing was shown before: the quote admission recorded (and holds of the budget).
        render.write_wrapped(sys.stderr, render.quote_line(job.quote), width)
    if not args.wait:
        if args.json:
            render.print_json(job, out)
        else:
            out.write(f"submitted {job.id}  {job.name}  {job.status.value}\n")
        return OK
    waiting = f"submitted {job.id}  {job.name}; waiting (Ctrl-C stops waiting)"
    render.write_wrapped(sys.stderr, waiting, width)
    bar = render.ProgressBar(sys.stderr, columns=width)
    watch = render.Watch(bar, simulated=simulated)
    try:
        job = client.wait(
            job.id,
            timeout=args.timeout,
            poll=args.poll,
            on_progress=lambda current: watch.update(current, client.events(current.id)),
        )
    finally:
        bar.finish()
    if args.json:
        render.print_json(job, out)
    else:
        reason = render.reason_text(job)
        render.write_wrapped(
            out, f"{job.id}  {job.name}  {job.status.value}{reason}", _width(args, out)
        )
    return OK if job.status == JobStatus.SUCCEEDED else JOB_NOT_SUCCEEDED


# What each table gives up first when the terminal is narrower than it: `drop` ranks.
LS_COLUMNS = (
    Column("ID"), Column("NAME"), Column("TEAM", drop=1), Column("STATUS"),
    Column("PROGRESS"), Column("RESOURCES", drop=4), Column("CAPACITY", drop=5), Column("COST"),
    Column("ATTEMPTS", drop=3), Column("PREEMPTED", drop=2), Column("CREATED", drop=6),
)  # fmt: skip


def cmd_ls(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    jobs: list[Job] = []
    for job in client.list(status=args.status):
        jobs.append(job)
        if args.limit is not None and len(jobs) >= args.limit:
            break
    if args.json:
        render.print_json(jobs, out)
        return OK
    ids = render.short_ids([j.id for j in jobs])
    rows = [
        (
            ids[j.id],
            j.name,
            j.team,
            j.status.value,
            render.progress_text(j),
            render.resources_text(j),
            render.capacity_text(j.placement),
            render.money(j.cost),
            j.attempts,
            j.preemptions,
            render.when(j.created_at),
        )
        for j in jobs
    ]
    render.table(LS_COLUMNS, rows, out, width=_width(args, out))
    _say_simulated(client.deployment(), args, out)
    return OK


ATTEMPT_COLUMNS = (
    Column("#"), Column("CAPACITY"), Column("INSTANCE", drop=4), Column("ZONE", drop=3),
    Column("GPUS"), Column("SAMPLES/S", drop=1), Column("$/H", drop=5), Column("STARTED"),
    Column("ENDED", drop=2), Column("END", wrap=True), Column("COST"),
)  # fmt: skip


def cmd_show(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    job = client.get(args.job_id)
    attempts = client.attempts(job.id)
    if args.json:
        render.print_json({"job": job, "attempts": attempts}, out)
        return OK
    width = _width(args, out)
    deployment = client.deployment()
    fields = [
        ("id", job.id),
        ("name", job.name),
        ("team", job.team),
        ("status", job.status.value + render.reason_text(job)),
        ("progress", render.progress_text(job)),
        ("created", render.when(job.created_at)),
        ("deadline", render.when(job.deadline_at)),
        ("attempts", job.attempts),
        ("preemptions", job.preemptions),
        ("restarts", job.restarts),
        ("resume from step", job.resume_from_step),
        ("resources", render.resources_text(job)),
        ("placement", render.placement_text(job.placement, simulated=deployment.simulated)),
        ("cost" if job.status.terminal else "cost so far", render.money(job.cost)),
    ]
    for name, value in fields:
        line = f"{name + ':':<18}{'-' if value is None else value}"
        render.write_wrapped(out, line, width, indent=18)
    if attempts:
        out.write("\n")
        rows = [
            (
                a.number,
                render.capacity_name(a.capacity_type),
                a.instance_type,
                a.zone,
                render.gpus_text(a.gpu_count, a.gpu_model, a.nodes),
                "-" if a.samples_per_s is None else f"{a.samples_per_s:,.1f}",
                render.money(a.price_per_hour),
                render.when(a.started_at),
                render.when(a.ended_at),
                a.end_reason,
                render.money(a.cost),
            )
            for a in attempts
        ]
        render.table(ATTEMPT_COLUMNS, rows, out, width=width)
    _say_simulated(deployment, args, out)
    return OK


def cmd_logs(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    chunks = client.logs(args.job_id, follow=True) if args.follow else [client.logs(args.job_id)]
    lines = render.LogLines(out, as_json=args.json)
    for chunk in chunks:
        lines.feed(chunk)
    lines.close()
    return OK


EVENT_COLUMNS = (
    Column("AT"),
    Column("CHANGE"),
    Column("REASON", wrap=True),
    Column("FIGURES", below=True),
)


def cmd_events(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    job = client.get(args.job_id)
    events = client.events(job.id)
    if args.json:
        render.print_json(events, out)
        return OK
    rows = [
        (
            render.when(e.at, seconds=True),
            f"{e.from_status.value if e.from_status else '-'} -> {e.to_status.value}",
            e.reason,
            render.event_figures(e.data),
        )
        for e in events
    ]
    render.table(EVENT_COLUMNS, rows, out, width=_width(args, out))
    _say_simulated(client.deployment(), args, out)
    return OK


def cmd_cancel(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    # As the API answers: a job already cancelled is fine (0); one that ended otherwise has
    # nothing to cancel, a conflict (6), so a script learns that its cancel changed nothing.
    job = client.cancel(args.job_id)
    if args.json:
        render.print_json(job, out)
    else:
        out.write(f"{job.id}  {job.name}  {job.status.value}\n")
    return OK


def cmd_download(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    job = client.get(args.job_id)
    folder = client.download(job.id, args.output, step=args.step)
    if args.json:
        render.print_json({"job_id": job.id, "path": str(folder)}, out)
    else:
        out.write(f"{folder}\n")
    return OK


OFFER_COLUMNS = (
    Column("CLOUD"), Column("REGION", drop=2), Column("ZONE"), Column("INSTANCE"), Column("GPUS"),
    Column("GPU GB", drop=1), Column("ON-DEMAND/H"), Column("SPOT/H"),
)  # fmt: skip


def cmd_offers(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    offers = client.offers(
        gpu_models=args.gpu, regions=args.region, clouds=args.cloud, gpu_count=args.gpus,
        capacity=args.capacity, limit=args.limit,
    )  # fmt: skip
    if args.json:
        render.print_json(offers, out)
        return OK
    rows = [
        (
            o.cloud, o.region, o.zone, o.instance_type, f"{o.gpu_count}x{o.gpu_model}",
            "-" if o.gpu_memory_gb is None else f"{o.gpu_memory_gb:g}",
            render.money(o.on_demand_price), render.money(o.spot_price),
        )
        for o in offers.items
    ]  # fmt: skip
    render.table(OFFER_COLUMNS, rows, out, width=_width(args, out))
    out.write(f"{len(offers.items)} of {offers.total} offers\n")
    return OK


PLAN_COLUMNS = (
    Column("#"), Column(""), Column("WHERE", wrap=True), Column("INSTANCE", drop=2),
    Column("GPUS"), Column("CAPACITY"), Column("$/H", drop=3), Column("EXPECTED"),
    Column("P(MEET)"), Column("FINISH", drop=1), Column("WHY", below=True),
)  # fmt: skip


def _plan_row(rank: int, plan: Plan) -> tuple[object, ...]:
    o = plan.offer
    return (
        rank,
        "*" if plan.chosen else "",
        f"{o.cloud}/{o.region}/{o.zone}",
        o.instance_type,
        render.gpus_text(o.gpu_count, o.gpu_model, plan.nodes),
        render.capacity_name(plan.capacity_type),
        render.money(plan.price_per_hour),
        render.money(plan.expected_cost),
        f"{plan.p_meet_deadline:.0%}",
        render.when(plan.expected_finish),
        plan.why,
    )


def cmd_estimate(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    estimate = client.estimate(args.file)
    if args.json:
        render.print_json(estimate, out)
        return OK
    if not estimate.plans:
        render.write_wrapped(
            out, f"no plan can run this spec: {estimate.reason}", _width(args, out)
        )
        return OK
    rows = [_plan_row(i + 1, plan) for i, plan in enumerate(estimate.plans)]
    width = _width(args, out)
    render.table(PLAN_COLUMNS, rows, out, width=width)
    render.write_wrapped(out, f"{estimate.decision}: {estimate.reason}", width)
    if estimate.quote is not None:
        render.write_wrapped(out, render.PLANS_NOTE, width)
        render.write_wrapped(out, render.quote_line(estimate.quote), width)
    _say_simulated(client.deployment(), args, out)
    return OK


def _usage_row(key: str, g: Any) -> tuple[Any, ...]:
    pct = "-" if g.savings_pct is None else f"{g.savings_pct:.1f}%"
    return (
        key,
        f"{g.gpu_hours:,.1f}",
        render.money(g.cost),
        render.money(g.on_demand_cost),
        render.money(g.savings),
        pct,
        g.preemptions,
        f"{g.lost_gpu_hours:,.1f}",
        render.money(g.lost_cost),
    )


USAGE_COLUMNS = (
    Column("GROUP", wrap=True), Column("GPU-H"), Column("COST"), Column("ON-DEMAND", drop=4),
    Column("SAVED"), Column("SAVED%", drop=3), Column("PREEMPT", drop=2),
    Column("LOST GPU-H", drop=1), Column("LOST $"),
)  # fmt: skip


def cmd_usage(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    report: UsageReport = client.usage(from_=args.from_, to=args.to, group_by=args.group_by)
    if args.json:
        render.print_json(report, out)
        return OK
    out.write(
        f"{render.when(report.from_)} -> {render.when(report.to)} UTC, by {args.group_by}\n\n"
    )
    rows = [_usage_row(g.label and f"{g.label} ({g.key[:8]})" or g.key, g) for g in report.groups]
    rows.append(_usage_row("TOTAL", report.total))
    width = _width(args, out)
    render.table(USAGE_COLUMNS, rows, out, width=width)
    if report.budgets:
        out.write("\n")
        _budget_table(report.budgets, out, width)
    _say_simulated(client.deployment(), args, out)
    return OK


def _budget_table(budgets: Sequence[Budget], out: TextIO, width: int | None) -> None:
    rows = [
        (
            b.team,
            render.money(b.monthly_usd),
            render.money(b.spent_usd),
            render.money(b.held_usd),
            render.money(b.remaining_usd),
        )
        for b in budgets
    ]
    headers = (Column("TEAM", wrap=True), "MONTHLY BUDGET", "SPENT", "HELD", "LEFT")
    render.table(headers, rows, out, width=width)


def cmd_budget(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    budget = client.budget()
    if args.json:
        render.print_json(budget, out)
        return OK
    out.write(f"month from {render.when(budget.month_start)} UTC\n\n")
    _budget_table([budget], out, _width(args, out))
    _say_simulated(client.deployment(), args, out)
    return OK


if __name__ == "__main__":
    sys.exit(main())
