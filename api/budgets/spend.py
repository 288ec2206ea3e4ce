"""Spend in a period from attempts, in integer micro-dollars, by the usage ledger's rules.

An attempt's cost up to time t is one cumulative function C(t): a closed attempt with a recorded
`cost_microusd` spreads it linearly over its run; a running attempt (or a closed one without a
recorded cost) accrues `price_per_hour` by elapsed time up to `now`. Spend in [start, end) is
C(end) - C(start), so an attempt that crosses the month's first instant counts only its share.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from api.budgets.repository import Charge

MICRO = 1_000_000
US_PER_HOUR = 3_600 * MICRO


def month_start(now: datetime) -> datetime:
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _us(delta: timedelta) -> int:
    return max(0, (delta.days * 86_400 + delta.seconds) * MICRO + delta.microseconds)


def _div_round(numerator: int, denominator: int) -> int:
    return (2 * numerator + denominator) // (2 * denominator)


def cost_to(charge: Charge, t: datetime, *, now: datetime) -> int:
    """C(t): micro-dollars the attempt had cost by `t`."""
    end = max(charge.started_at, charge.ended_at or now)
    elapsed = _us(min(t, end) - charge.started_at)
    if charge.ended_at is not None and charge.cost_microusd is not None:
        full = _us(end - charge.started_at)
        if full == 0 or elapsed >= full:
            return charge.cost_microusd
        return _div_round(charge.cost_microusd * elapsed, full)
    return _div_round(round(charge.price_per_hour * MICRO) * elapsed, US_PER_HOUR)


def spent_microusd(charges: Iterable[Charge], *, start: datetime, now: datetime) -> int:
    """What the attempts cost in [start, now)."""
    return sum(cost_to(c, now, now=now) - cost_to(c, start, now=now) for c in charges)
