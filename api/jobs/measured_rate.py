"""The rate a running attempt trains at, as the scheduler counts the work left from it.

The trainer reports its samples a second over the few seconds since its last report. Taken
alone, one such window decides everything the scheduler derives from the rate: a window slowed
by a neighbour's start (a standby's trainer importing torch on the same two cores) read a tenth
of the attempt's steady rate, made the work left ten times longer, and moved the job to on-demand
and back (CI, stop 29). So the attempt's rate is the mean of its windows weighted by how long
each lasted, older seconds discounted by exp(-age / MEMORY_S): samples over time, as the work
left needs, and over time, not over reports, so a trainer that reports more often weighs no more.
- MEMORY_S is a minute: several of the trainer's reports (every 5 s), longer than a neighbouring
  process's start, and short beside any deadline: a lasting change is believed 63% in a minute
  and 95% in three, so the deadline's safety net is late by at most that.
- An attempt's first window holds its warm-up (the first step's compile and autotune, the data
  loader's first batch): it stands for the rate until the next window, which replaces it.
- One window counts for at most MEMORY_S, however long ago the report before it came (an API
  outage, a paused trainer): a window is a few seconds of the trainer's, whatever the gap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MEMORY_S = 60.0


@dataclass(frozen=True, slots=True)
class Rate:
    samples_per_s: float
    seconds: float  # the windows behind it, each second discounted by its age (0: warm-up only)


def after(previous: Rate | None, measured: float, *, seconds: float) -> Rate:
    """The attempt's rate once a window of `seconds` measured `measured` samples a second;
    `previous`: None for the attempt's first window."""
    if previous is None:
        return Rate(measured, 0.0)
    window = min(max(0.0, seconds), MEMORY_S)
    if window <= 0.0:
        return previous  # the same instant again: nothing measured over time
    kept = previous.seconds * math.exp(-window / MEMORY_S)
    rate = (previous.samples_per_s * kept + measured * window) / (kept + window)
    return Rate(rate, kept + window)
