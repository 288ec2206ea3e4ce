"""The commands on jobs: submit, ls, show, logs, events, cancel, download."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from gpujobs import errors
from gpujobs.cli import layout, render
from gpujobs.cli.common import JOB_NOT_SUCCEEDED, NOT_SUBMITTED, OK, output_width, say_simulated
from gpujobs.cli.layout import Column
from gpujobs.client import Client, load_spec
from gpujobs.resources import Job, JobStatus
from gpujobs.spec import JobSpec


def _confirm_plan(client: Client, args: argparse.Namespace, spec: JobSpec) -> bool:
    """Show where the scheduler would run the job now and what it is quoted, as `dstack apply`
    does; ask on a terminal. Without a terminal (scripts, CI) the plan is shown and submitted."""
    width = output_width(args, sys.stderr)
    try:
        estimate = client.estimate(spec)
    except errors.InvalidSpec as error:  # e.g. no estimated_hours: nothing to price it by
        message = f"no quote ({error.message}); the scheduler prices it once it runs"
        layout.write_wrapped(sys.stderr, message, width)
        estimate = None
    if estimate is not None:
        chosen = next((plan for plan in estimate.plans if plan.chosen), None)
        if chosen is not None:
            layout.write_wrapped(sys.stderr, f"plan: {render.plan_line(chosen)}", width)
        layout.write_wrapped(sys.stderr, f"{estimate.decision}: {estimate.reason}", width)
        if estimate.quote is not None:
            layout.write_wrapped(sys.stderr, render.quote_line(estimate.quote), width)
    if not sys.stdin.isatty():
        return True
    sys.stderr.write("Submit? [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer:
        sys.stderr.write("\nno answer: stdin is closed\n")
    return answer.strip().lower() in ("y", "yes")


def cmd_submit(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    spec = load_spec(args.file)  # a file that is no spec is refused before any request
    # Said before the plan, the quote and the placements it qualifies.
    simulated = say_simulated(client.deployment(), args, sys.stderr)
    if not args.yes and not _confirm_plan(client, args, spec):
        sys.stderr.write("not submitted (-y submits without asking)\n")
        return NOT_SUBMITTED
    job = client.submit(spec, idempotency_key=args.idempotency_key)
    width = output_width(args, sys.stderr)
    if args.yes and job.quote is not None:
        # Nothing was shown before: the quote admission recorded (and holds of the budget).
        layout.write_wrapped(sys.stderr, render.quote_line(job.quote), width)
    if not args.wait:
        if args.json:
            render.print_json(job, out)
        else:
            out.write(f"submitted {job.id}  {job.name}  {job.status.value}\n")
        return OK
    waiting = f"submitted {job.id}  {job.name}; waiting (Ctrl-C stops waiting)"
    layout.write_wrapped(sys.stderr, waiting, width)
    bar = render.ProgressBar(sys.stderr, columns=width)
    watch = render.Watch(bar, simulated=simulated)
    try:
        job = client.wait(
            job.id,
            timeout=args.timeout,
            poll=args.poll,
            on_poll=lambda current: watch.update(current, client.events(current.id)),
        )
    finally:
        bar.finish()
    if args.json:
        render.print_json(job, out)
    else:
        reason = render.reason_text(job)
        layout.write_wrapped(
            out, f"{job.id}  {job.name}  {job.status.value}{reason}", output_width(args, out)
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
    layout.table(LS_COLUMNS, rows, out, width=output_width(args, out))
    say_simulated(client.deployment(), args, out)
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
    width = output_width(args, out)
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
        layout.write_wrapped(out, line, width, indent=18)
    if attempts:
        out.write("\n")
        rows = [
            (
                a.number,
                render.capacity_name(a.capacity_type) + (" standby" if a.standby else ""),
                a.instance_type,
                a.zone,
                render.gpus_text(a.gpu_count, a.gpu_model, a.nodes),
                "-" if a.samples_per_s is None else f"{a.samples_per_s:,.1f}",
                render.money(a.price_per_hour),
                render.when(a.started_at),
                render.when(a.ended_at),
                render.words(a.end_reason),
                render.money(a.cost),
            )
            for a in attempts
        ]
        layout.table(ATTEMPT_COLUMNS, rows, out, width=width)
    # Standbys held and lost, handovers: what the attempts table cannot say.
    notes = [e for e in client.events(job.id) if e.from_status == e.to_status] if attempts else []
    if notes:
        out.write("\n")
        for event in notes:
            line = f"{render.when(event.at, seconds=True)}  {event.reason}"
            layout.write_wrapped(out, line, width, indent=10)
    say_simulated(deployment, args, out)
    return OK


def cmd_logs(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    chunks = client.logs(args.job_id, follow=True) if args.follow else [client.logs(args.job_id)]
    lines = render.LogLines(out, as_json=args.json, width=output_width(args, out))
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
            # "running" beside "SCHEDULED -> RUNNING" says nothing the change does not.
            "" if (e.reason or "").lower() == e.to_status.value.lower() else e.reason,
            render.event_figures(e.data),
        )
        for e in events
    ]
    layout.table(EVENT_COLUMNS, rows, out, width=output_width(args, out))
    say_simulated(client.deployment(), args, out)
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
