"""Money in integer micro-dollars, so that ledgers, usage reports and budgets agree to the cent.

An attempt's cost up to time t is one cumulative function: a closed attempt with a recorded
cost spreads it linearly over its run; a running one accrues its price by elapsed time.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gpujobs.usage import MICRO as MICRO  # the contract's unit, defined once there

US_PER_SECOND = 1_000_000  # time is counted in microseconds, so rates multiply exactly
US_PER_HOUR = 3_600 * US_PER_SECOND


def microusd_per_hour(price_per_hour: float) -> int:
    return round(price_per_hour * MICRO)


def div_round(numerator: int, denominator: int) -> int:
    """numerator / denominator rounded half up, in integers (both non-negative)."""
    return (2 * numerator + denominator) // (2 * denominator)


def elapsed_us(delta: timedelta) -> int:
    return max(0, (delta.days * 86_400 + delta.seconds) * US_PER_SECOND + delta.microseconds)


def cost_microusd(*, price_per_hour: float, started_at: datetime, ended_at: datetime) -> int:
    """What running at `price_per_hour` from `started_at` to `ended_at` costs."""
    return div_round(
        microusd_per_hour(price_per_hour) * elapsed_us(ended_at - started_at), US_PER_HOUR
    )


def cost_to(
    t: datetime,
    *,
    started_at: datetime,
    end: datetime,
    closed: bool,
    recorded_microusd: int | None,
    price_per_hour: float,
) -> int:
    """Micro-dollars an attempt running [started_at, end) had cost by `t`."""
    elapsed = elapsed_us(min(t, end) - started_at)
    if closed and recorded_microusd is not None:
        full = elapsed_us(end - started_at)
        if full == 0 or elapsed >= full:
            return recorded_microusd
        return div_round(recorded_microusd * elapsed, full)
    return div_round(microusd_per_hour(price_per_hour) * elapsed, US_PER_HOUR)


def month_start(now: datetime) -> datetime:
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
