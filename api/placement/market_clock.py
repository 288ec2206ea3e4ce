"""The spot market's durations in words, on whichever clock the market runs.

The local launcher's simulated market (GPUJOBS_SPOT_MARKET, docs/spot-demo.md) replays spot
`time_scale` times faster than the wall clock: the lifetimes decide() weighs are the market's
hours, and at x60 an expected spot run of 1.2 h is over in 72 s here. A reason that said "1.2 h"
alone would have the reader wait an hour for what happens within two minutes.
"""

from __future__ import annotations

import math

REAL_TIME = 1.0  # a real market: its hours are the wall clock's


def market_duration(hours: float, *, time_scale: float = REAL_TIME) -> str:
    """`hours` of the market's clock in words; on a simulated clock (time_scale != 1) said so,
    with the wall-clock time they take here: "1.2 h simulated (72 s here)"."""
    said = _words(hours * 3600.0)
    if time_scale == REAL_TIME or math.isinf(hours):
        return said
    return f"{said} simulated ({_words(hours * 3600.0 / time_scale)} here)"


def _words(seconds: float) -> str:
    if math.isinf(seconds):
        return "unbounded"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
