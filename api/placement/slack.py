"""The deadline rule: spot, on-demand or wait, from a job's slack.

Slack is the time a job can still spend not making progress: hours left, minus work left, minus
one restart onto on-demand. Idle ticks and restarts spend it; running (spot or on-demand) keeps
it. Uniform Progress (Can't Be Late, NSDI'24) spends it at a constant rate; greedy spends it all
first and then gets stuck on on-demand until the end, unable to use spot that returns.

This rule keeps a reserve of slack that shrinks with the time left, faster than linearly:
reserve = RESERVE_SCALE * initial_slack * (time_left / window) ** RESERVE_SHAPE. Early on, waiting
for spot is cheap because most of the window remains to use it; later, the reserve is what lets
the job leave on-demand for spot that comes back (each such move spends a restart). While above
the reserve the job waits for spot instead of paying on-demand; at the reserve it runs on
on-demand; a move from on-demand to spot is taken only when the slack left after the restart
stays above the reserve and the expected spot lifetime pays for the two restarts it risks
(lifetime > 2kd/(k-1), k = on-demand/spot price: the paper's oracle condition with the learned
expected lifetime in place of the oracle). The safety net is exact: no choice other than
on-demand is made if, after one more step without progress, on-demand could no longer finish.
The two constants were chosen by a coarse sweep over all traces in aggregate (no per-trace
constants); see benchmarks/spot_policy.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

RESERVE_SCALE = 0.9
RESERVE_SHAPE = 1.5


class Choice(StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on_demand"
    WAIT = "wait"


@dataclass(frozen=True, slots=True)
class SlackView:
    hours_left: float
    work_left: float
    on: Choice  # WAIT when not running; reserved counts as ON_DEMAND
    changeover_left: float  # restart hours the current attempt still has to go through
    spot_available: bool
    restart_hours: float
    step_hours: float
    initial_slack: float  # window - total work - one restart
    window_hours: float  # deadline - submission
    spot_lifetime_hours: float
    price_ratio: float  # on-demand / spot


def reserve(v: SlackView) -> float:
    share = min(1.0, max(0.0, v.hours_left / v.window_hours)) if v.window_hours > 0 else 0.0
    return RESERVE_SCALE * max(0.0, v.initial_slack) * math.pow(share, RESERVE_SHAPE)


def _worth_spot(v: SlackView, restarts: int) -> bool:
    """Expected spot lifetime pays back `restarts` restarts: L > n k d / (k - 1)."""
    k = v.price_ratio
    if k <= 1.0:
        return False
    return v.spot_lifetime_hours > restarts * k * v.restart_hours / (k - 1.0)


def choose(v: SlackView) -> Choice:
    g, d, left = v.step_hours, v.restart_hours, v.hours_left
    work = v.work_left + (v.changeover_left if v.on is Choice.ON_DEMAND else 0.0)
    slack = left - work - d
    keep = reserve(v)
    if v.on is Choice.ON_DEMAND:
        if left - g < work + d:  # leaving now could not be undone in time
            return Choice.ON_DEMAND
        if v.spot_available and slack - d >= keep + g and _worth_spot(v, 2):
            return Choice.SPOT
        return Choice.ON_DEMAND
    progressing = v.on is Choice.SPOT and v.spot_available and v.changeover_left <= 0
    if left - g < work - (g if progressing else 0.0) + d:  # safety net
        return Choice.ON_DEMAND
    if v.spot_available:
        if v.on is Choice.SPOT:
            return Choice.SPOT
        if slack - d >= g and _worth_spot(v, 1):
            return Choice.SPOT
        return Choice.ON_DEMAND
    return Choice.WAIT if slack - g >= keep else Choice.ON_DEMAND
