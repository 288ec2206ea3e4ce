"""Spend in a period from attempts, in integer micro-dollars, by the usage ledger's rules.

An attempt's cost up to time t is one cumulative function C(t): a closed attempt with a recorded
`cost_microusd` spreads it linearly over its run; a running attempt (or a closed one without a
recorded cost) accrues `price_per_hour` by elapsed time up to `now`. Spend in [start, end) is
C(end) - C(start), so an attempt that crosses the month's first instant counts only its share.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from api.money import cost_to


@dataclass(frozen=True, slots=True)
class Charge:
    """One attempt as spend needs it."""

    price_per_hour: float  # whole attempt
    started_at: datetime
    ended_at: datetime | None
    cost_microusd: int | None


def charge_cost_to(charge: Charge, t: datetime, *, now: datetime) -> int:
    """C(t): micro-dollars the attempt had cost by `t`."""
    return cost_to(
        t,
        started_at=charge.started_at,
        end=max(charge.started_at, charge.ended_at or now),
        closed=charge.ended_at is not None,
        recorded_microusd=charge.cost_microusd,
        price_per_hour=charge.price_per_hour,
    )


def spent_microusd(charges: Iterable[Charge], *, start: datetime, now: datetime) -> int:
    """What the attempts cost in [start, now)."""
    return sum(charge_cost_to(c, now, now=now) - charge_cost_to(c, start, now=now) for c in charges)
