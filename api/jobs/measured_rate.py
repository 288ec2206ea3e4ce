"""The rate a running attempt trains at, as the scheduler counts the work left from it.

The trainer reports its samples a second over the few seconds since its last report. Taken
alone, one such window decides everything the scheduler derives from the rate: a window slowed
by a neighbour's start (a standby's trainer importing torch on the same two cores) read a tenth
of the attempt's steady rate, made the work left ten times longer, and moved the job to on-demand
and back (CI, stop 29). So the attempt's rate has a memory: each window moves it by the share
of a memory span that the window lasted, an exponential average over time, not over reports,
so a trainer that reports more often does not weigh more.

The span is the restart the deadline rule prices (Settings.restart_hours): reacting to a change
costs about a restart, and a slowdown shorter than one moves the finish by less than its own
length, so it is believed in proportion to how long it has lasted against a restart. A lasting
change is believed all but fully after a few spans (95% after three).
"""

from __future__ import annotations

import math


def smoothed(
    previous: float | None, measured: float, *, seconds: float, memory_seconds: float
) -> float:
    """The attempt's rate after a window of `seconds` measured at `measured`: the first window
    is taken as it is; later ones move it by 1 - exp(-seconds / memory_seconds) of the way."""
    if previous is None or previous <= 0 or not math.isfinite(previous) or memory_seconds <= 0:
        return measured
    share = -math.expm1(-max(0.0, seconds) / memory_seconds)
    return previous + share * (measured - previous)
