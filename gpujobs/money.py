"""Money in integer micro-dollars, and the one rule for what running at a price costs.

The server's ledger (`api.money`) and the CLI's running totals both use these, so a figure the
CLI shows for a running attempt is the one the ledger will record."""

from __future__ import annotations

from datetime import datetime, timedelta

MICRO = 1_000_000  # micro-dollars per dollar
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
