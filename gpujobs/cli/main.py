"""`gpujobs` commands. Tables for people, `--json` for scripts, and exit codes that mean something:

  0  ok
  1  the job ended FAILED or CANCELLED (submit --wait)
  2  usage error or invalid spec (the field errors are printed)
  3  not found
  4  authentication or permission refused (401/403)
  5  server error, rate limited or the API unreachable (after retries)
  6  conflict (e.g. cancelling a job that already ended)
  7  --wait gave up (--timeout)
130  interrupted (Ctrl-C)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from gpujobs import errors
from gpujobs.cli import render
from gpujobs.client import Client
from gpujobs.resources import Job, JobStatus
from gpujobs.usage import UsageGroupBy, UsageReport

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

Command = Callable[[Client, argparse.Namespace, TextIO], int]


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", help="API URL (default: $GPUJOBS_URL, the credentials file)")
    common.add_argument("--token", help="API token (default: $GPUJOBS_TOKEN, the credentials file)")
    common.add_argument("--json", action="store_true", help="print JSON for scripts")
    common.add_argument(
        "--retries", type=int, default=4, metavar="N", help="tries per request (default 4)"
    )
    parser = argparse.ArgumentParser(
        prog="gpujobs",
        description="Run GPU training jobs cheaply and reliably.",
        epilog="exit codes: 0 ok, 1 job failed/cancelled, 2 usage/invalid spec, 3 not found, "
        "4 auth, 5 server/connection, 6 conflict, 7 wait timed out",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    submit = sub.add_parser("submit", parents=[common], help="submit a job spec (YAML)")
    submit.add_argument("file", metavar="FILE.yaml")
    submit.add_argument("--wait", action="store_true", help="wait for the job, showing progress")
    submit.add_argument("--idempotency-key", help="make re-running this command a no-op")
    submit.add_argument("--timeout", type=float, help="with --wait: give up after S seconds")
    submit.add_argument("--poll", type=float, default=2.0, help=argparse.SUPPRESS)
    submit.set_defaults(run=cmd_submit)

    ls = sub.add_parser("ls", parents=[common], help="list jobs, newest first")
    ls.add_argument(
        "--status", action="append", type=str.upper, choices=[s.value for s in JobStatus]
    )
    ls.add_argument("--limit", type=int, default=None, help="show at most N jobs")
    ls.set_defaults(run=cmd_ls)

    show = sub.add_parser("show", parents=[common], help="one job, with its attempts")
    show.add_argument("job_id", metavar="ID")
    show.set_defaults(run=cmd_show)

    logs = sub.add_parser("logs", parents=[common], help="a job's log")
    logs.add_argument("job_id", metavar="ID")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing as it grows")
    logs.set_defaults(run=cmd_logs)

    cancel = sub.add_parser("cancel", parents=[common], help="cancel a job")
    cancel.add_argument("job_id", metavar="ID")
    cancel.set_defaults(run=cmd_cancel)

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
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
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


def cmd_submit(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    job = client.submit(args.file, idempotency_key=args.idempotency_key)
    if not args.wait:
        if args.json:
            render.print_json(job, out)
        else:
            out.write(f"submitted {job.id}  {job.name}  {job.status.value}\n")
        return OK
    sys.stderr.write(f"submitted {job.id}  {job.name}; waiting (Ctrl-C stops waiting)\n")
    bar = render.ProgressBar(sys.stderr)

    def on_progress(current: Job) -> None:
        bar.update(current, render.cost_so_far(client.attempts(current.id)))

    try:
        job = client.wait(job.id, timeout=args.timeout, poll=args.poll, on_progress=on_progress)
    finally:
        bar.finish()
    if args.json:
        render.print_json(job, out)
    else:
        reason = f" ({job.status_reason})" if job.status_reason else ""
        out.write(f"{job.id}  {job.name}  {job.status.value}{reason}\n")
    return OK if job.status == JobStatus.SUCCEEDED else JOB_NOT_SUCCEEDED


def cmd_ls(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    jobs: list[Job] = []
    for job in client.list(status=args.status):
        jobs.append(job)
        if args.limit is not None and len(jobs) >= args.limit:
            break
    if args.json:
        render.print_json(jobs, out)
        return OK
    rows = [
        (
            j.id,
            j.name,
            j.team,
            j.status.value,
            render.progress_text(j),
            j.attempts,
            j.preemptions,
            render.when(j.created_at),
        )
        for j in jobs
    ]
    headers = ("ID", "NAME", "TEAM", "STATUS", "PROGRESS", "ATTEMPTS", "PREEMPTED", "CREATED")
    render.table(headers, rows, out)
    return OK


def cmd_show(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    job = client.get(args.job_id)
    attempts = client.attempts(job.id)
    if args.json:
        render.print_json({"job": job, "attempts": attempts}, out)
        return OK
    fields = [
        ("id", job.id),
        ("name", job.name),
        ("team", job.team),
        ("status", job.status.value + (f" ({job.status_reason})" if job.status_reason else "")),
        ("progress", render.progress_text(job)),
        ("created", render.when(job.created_at)),
        ("deadline", render.when(job.deadline_at)),
        ("attempts", job.attempts),
        ("preemptions", job.preemptions),
        ("restarts", job.restarts),
        ("resume from step", job.resume_from_step),
        ("cost so far", render.money(render.cost_so_far(attempts))),
    ]
    for name, value in fields:
        out.write(f"{name + ':':<18}{'-' if value is None else value}\n")
    if attempts:
        out.write("\n")
        rows = [
            (
                a.number,
                a.capacity_type.value,
                a.instance_type,
                a.zone,
                f"{a.gpu_count}x{a.nodes}",
                render.money(a.price_per_hour),
                render.when(a.started_at),
                render.when(a.ended_at),
                a.end_reason,
                render.money(a.cost),
            )
            for a in attempts
        ]
        headers = ("#", "CAPACITY", "INSTANCE", "ZONE", "GPUS", "$/H", "STARTED", "ENDED")
        render.table((*headers, "END", "COST"), rows, out)
    return OK


def cmd_logs(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    if not args.follow:
        out.write(client.logs(args.job_id))
        return OK
    for chunk in client.logs(args.job_id, follow=True):
        out.write(chunk)
        out.flush()
    return OK


def cmd_cancel(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    job = client.cancel(args.job_id)
    if args.json:
        render.print_json(job, out)
    else:
        out.write(f"{job.id}  {job.name}  {job.status.value}\n")
    return OK


PLAN_COLUMNS = (
    "gpu_model",
    "instance_type",
    "zone",
    "capacity_type",
    "nodes",
    "price_per_hour",
    "expected_cost",
    "p_meet_deadline",
    "expected_finish",
)


def _plan_cell(key: str, value: Any) -> str:
    if isinstance(value, float):
        if any(word in key for word in ("cost", "price", "usd")):
            return render.money(value)
        if key.startswith("p_") and 0 <= value <= 1:
            return f"{value:.0%}"
        return f"{value:.3g}" if abs(value) < 1 else f"{value:,.2f}"
    if isinstance(value, str) and len(value) >= 16 and value[4:5] == "-" and value[10:11] == "T":
        return value[:16].replace("T", " ")  # an ISO timestamp, to the minute
    return "-" if value is None else str(value)


def cmd_estimate(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    estimate = client.estimate(args.file)
    if args.json:
        render.print_json(estimate.model_dump(mode="json"), out)
        return OK
    if not estimate.plans:
        out.write(f"no plan can run this spec: {estimate.reason}\n")
        return OK
    rows = []
    for i, plan in enumerate(estimate.plans):
        shown = plan.model_dump(mode="json")
        cells = [_plan_cell(c, shown[c]) for c in PLAN_COLUMNS]
        rows.append([i + 1, "*" if plan.chosen else "", *cells, plan.why])
    render.table(["#", "", *(c.upper() for c in PLAN_COLUMNS), "WHY"], rows, out)
    out.write(f"{estimate.decision}: {estimate.reason}\n")
    q = estimate.quote
    if q is not None:
        out.write(
            f"quote (the policy as it will run): {render.money(q.expected_cost)} expected, "
            f"{render.money(q.hold_cost)} held of the budget, finish "
            f"{q.expected_finish.isoformat()[:16].replace('T', ' ')}, "
            f"P(deadline) {q.p_meet_deadline:.0%}\n"
        )
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
    headers = ("GROUP", "GPU-H", "COST", "ON-DEMAND", "SAVED", "SAVED%", "PREEMPT")
    render.table((*headers, "LOST GPU-H", "LOST $"), rows, out)
    if report.budgets:
        out.write("\n")
        budget_rows = [
            (b.team, render.money(b.monthly_budget), render.money(b.used), render.money(b.left))
            for b in report.budgets
        ]
        render.table(("TEAM", "MONTHLY BUDGET", "USED", "LEFT"), budget_rows, out)
    return OK


if __name__ == "__main__":
    sys.exit(main())
