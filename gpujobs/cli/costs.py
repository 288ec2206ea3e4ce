"""The commands on money and capacity: offers, estimate, usage, budget."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, TextIO

from gpujobs.cli import layout, render
from gpujobs.cli.common import OK, output_width, say_simulated
from gpujobs.cli.layout import Column
from gpujobs.client import Client
from gpujobs.plans import Plan
from gpujobs.usage import Budget, UsageReport

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
    layout.table(OFFER_COLUMNS, rows, out, width=output_width(args, out))
    out.write(f"{len(offers.items)} of {offers.total} offers\n")
    return OK


# The instance stays longest: without it, two plans in one zone read as the same row.
PLAN_COLUMNS = (
    Column("#"), Column(""), Column("WHERE", wrap=True), Column("INSTANCE"),
    Column("GPUS"), Column("CAPACITY"), Column("$/H", drop=2), Column("EXPECTED"),
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
        layout.write_wrapped(
            out, f"no plan can run this spec: {estimate.reason}", output_width(args, out)
        )
        return OK
    rows = [_plan_row(i + 1, plan) for i, plan in enumerate(estimate.plans)]
    width = output_width(args, out)
    layout.table(PLAN_COLUMNS, rows, out, width=width)
    layout.write_wrapped(out, f"{estimate.decision}: {estimate.reason}", width)
    if estimate.quote is not None:
        layout.write_wrapped(out, render.PLANS_NOTE, width)
        layout.write_wrapped(out, render.quote_line(estimate.quote), width)
    say_simulated(client.deployment(), args, out)
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
    width = output_width(args, out)
    layout.table(USAGE_COLUMNS, rows, out, width=width)
    if report.budgets:
        out.write("\n")
        _budget_table(report.budgets, out, width)
    say_simulated(client.deployment(), args, out)
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
    layout.table(headers, rows, out, width=width)


def cmd_budget(client: Client, args: argparse.Namespace, out: TextIO) -> int:
    budget = client.budget()
    if args.json:
        render.print_json(budget, out)
        return OK
    out.write(f"month from {render.when(budget.month_start)} UTC\n\n")
    _budget_table([budget], out, output_width(args, out))
    say_simulated(client.deployment(), args, out)
    return OK
