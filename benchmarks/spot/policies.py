"""The online baseline policies: on_demand, greedy and uniform_progress (the paper's rules 1-3
plus the safety net)."""

from __future__ import annotations

from benchmarks.spot.simulator import IDLE, ON_DEMAND, SPOT, View


def _must_take_on_demand(v: View) -> bool:
    """Safety net: a non-on-demand tick now could leave too little time to finish on on-demand.

    Idling (or a spot tick that is lost next tick) leaves, next tick, D - t - 1 ticks for the
    remaining work plus a changeover; a spot tick that makes progress removes one tick of work.
    """
    s = v.setting
    if v.current == ON_DEMAND:
        return True  # callers ask only when not on on-demand; staying is always safe
    left = s.deadline - v.tick
    remaining = s.work - v.progress
    progresses = v.current == SPOT and v.spot_available and v.changeover_left == 0
    return left - 1 < remaining - (1 if progresses else 0) + s.changeover


def on_demand_policy(v: View) -> str:
    return ON_DEMAND


def greedy_policy(v: View) -> str:
    """Spot when available, else idle; on-demand to the end once the safety net fires."""
    if v.current == ON_DEMAND:
        return ON_DEMAND
    if _must_take_on_demand(v):
        return ON_DEMAND
    return SPOT if v.spot_available else IDLE


def uniform_progress_policy(v: View) -> str:
    """Uniform Progress with hysteresis (paper §5.2.2), plus the Safety Net rule.

    ep(t) = t * W / D. On on-demand: stay until cp(t) >= ep(t + 2d) (hysteresis), then spot if
    available, else idle. Otherwise: spot whenever available (taking risks; stay until
    preempted); when spot is unavailable, on-demand if cp(t) < ep(t), else idle. The safety net
    (the greedy one above) puts the job on on-demand for good.
    """
    s = v.setting
    rate = s.work / s.deadline
    if v.current == ON_DEMAND:
        if v.progress < rate * (v.tick + 2 * s.changeover):
            return ON_DEMAND
        left = s.deadline - v.tick
        # Leaving on-demand must keep a later restart on on-demand possible.
        if left - 1 < s.work - v.progress + s.changeover:
            return ON_DEMAND
        return SPOT if v.spot_available else IDLE
    if _must_take_on_demand(v):
        return ON_DEMAND
    if v.spot_available:
        return SPOT
    return ON_DEMAND if v.progress < rate * v.tick else IDLE
