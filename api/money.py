"""Money in integer micro-dollars, so that ledgers, usage reports and budgets agree to the cent.

An attempt's cost up to time t is one cumulative function: a closed attempt with a recorded
cost spreads it linearly over its run; a running one accrues its price by elapsed time.
"""

from __future__ import annotations

from datetime import datetime

# The unit and the pricing rule are the contract's, so the CLI's running totals agree with ours.
from gpujobs.money import MICRO as MICRO
from gpujobs.money import US_PER_HOUR as US_PER_HOUR
from gpujobs.money import US_PER_SECOND as US_PER_SECOND
from gpujobs.money import cost_microusd as cost_microusd
from gpujobs.money import div_round as div_round
from gpujobs.money import elapsed_us as elapsed_us
from gpujobs.money import microusd_per_hour as microusd_per_hour


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
