"""The deadline rule: spot, on-demand or wait, from a job's slack.

Slack is the time a job can still spend not making progress: hours left, minus work left, minus
one restart onto on-demand. Idle hours and restarts spend it; running (spot or on-demand) keeps
it. Uniform Progress (Can't Be Late, NSDI'24) spends it at a constant rate; greedy spends it all
first and then gets stuck on on-demand until the end, unable to use spot that returns.

This rule spends slack waiting for spot down to a reserve derived from the job's own quantities
(no fitted constants): remaining work w, restart (changeover) time d, the pool's learned spot
lifetime L and mean outage M, and the price ratio k = on-demand / spot per hour of work.
Work is counted in hours of the on-demand fallback's GPU; a spot GPU of another model takes
`spot_pace` times as long (api.pricing.gpu_speed).
- Outages to come: the rest of the work on spot would be preempted about n = w / L times
  (w in spot hours).
- If the slack could wait out all of them (slack >= n (M + d)), nothing is kept: wait for spot.
- Otherwise reserve = d n: riding out an outage on on-demand costs one restart more than waiting
  for spot to return (onto on-demand; the restart back onto spot is spent either way), so d n is
  what the job keeps to cover the outages still to come with on-demand. It is never more than
  Uniform Progress keeps (the initial slack in proportion to the time left), and nothing is
  kept when going back to spot would not pay for its two restarts (L > 2kd/(k-1), the paper's
  oracle condition with the learned lifetime).
While above the reserve the job waits for spot instead of paying on-demand; at the reserve it
runs on on-demand. A move from on-demand to spot stops on-demand before spot is tried (the
scheduler migrates by stopping first), so it is taken only when the slack left after the restart
stays above the reserve and the bet pays: with p the chance the pool is back (two-state model,
from "out" when the job left spot), p (L (k - 1) - d (1 + k)) > (1 - p) d k. The safety net is
exact: no choice other than on-demand is made if, after one more step without progress,
on-demand could no longer finish; but where a restart onto on-demand would miss the deadline
even now (a jump in the measured rate can land a job there between two steps), on-demand can no
longer save it, and a job running on spot stays there when that finishes no later in
expectation: spot may still make it, the move would certainly not. For a job on spot at the
on-demand GPU's pace, past its changeover, that is always so: such a job is never moved by the
net, whose condition for it is that very point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum


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
    # expected wait for spot to come back once it is gone; inf: unknown (never assume it short)
    spot_outage_hours: float = math.inf
    on_hours: float = math.inf  # how long the current attempt has run
    # Spot hours per hour of work_left, which counts hours of the on-demand fallback's GPU:
    # 2.0 when the spot GPU is half as fast.
    spot_pace: float = 1.0
    # The spot pool judged (its lifetime, pace) is the one the job runs on: not so where the
    # held pool was dropped as unusable (over the price cap, gone from the catalog) for another.
    spot_held: bool = False


def reserve(v: SlackView) -> float:
    """Slack to keep for returning to spot after the outages still to come."""
    if not _worth_spot(v, 2):
        return 0.0
    share = min(1.0, max(0.0, v.hours_left / v.window_hours)) if v.window_hours > 0 else 0.0
    uniform = max(0.0, v.initial_slack) * share
    if math.isinf(v.spot_lifetime_hours):
        return 0.0
    outages = v.work_left * v.spot_pace / v.spot_lifetime_hours
    slack = v.hours_left - v.work_left - v.restart_hours
    if slack >= outages * (v.spot_outage_hours + v.restart_hours):
        return 0.0  # enough to wait out every outage to come: nothing to keep on-demand for
    return min(uniform, v.restart_hours * outages)


def _worth_spot(v: SlackView, restarts: int) -> bool:
    """Expected spot lifetime pays back `restarts` restarts: L > n k d / (k - 1) (a restart on
    on-demand costs d k, in spot price per hour of work, times the spot pace)."""
    k = v.price_ratio
    if k <= 1.0:
        return False
    return v.spot_lifetime_hours > restarts * k * v.restart_hours * v.spot_pace / (k - 1.0)


def _spot_back(v: SlackView) -> float:
    """Probability the pool has capacity again, on-demand having run `on_hours` since the job
    left spot (gone then): the two-state pool (up for the lifetime, out for the outage) from
    "out", p(s) = a (1 - exp(-s (1/L + 1/M))), a = L / (L + M) its long-run availability."""
    life, out = v.spot_lifetime_hours, v.spot_outage_hours
    if out <= 0 or math.isinf(out) or math.isinf(v.on_hours) or math.isinf(life):
        return 1.0  # nothing known to go by: as if it were back
    a = life / (life + out)
    return a * -math.expm1(-v.on_hours * (1.0 / life + 1.0 / out))


def _worth_trying(v: SlackView) -> bool:
    """Leaving on-demand stops it before the spot launch is tried (the scheduler migrates by
    stopping first): worth it when p * (spot run's saving - its two restarts) exceeds (1 - p) *
    the on-demand restart a failed launch costs, in spot-price units:
    p (L (k - 1) - d (1 + k)) > (1 - p) d k."""
    p, k, d = _spot_back(v), v.price_ratio, v.restart_hours
    od_restart = d * k * v.spot_pace  # in spot price per hour of work
    life = min(v.spot_lifetime_hours, v.work_left * v.spot_pace)
    return p * (life * (k - 1.0) - d - od_restart) > (1.0 - p) * od_restart


def _late_either_way(v: SlackView) -> bool:
    """The job runs on spot and a restart onto on-demand now would certainly miss the deadline
    (a jump in the measured rate can put it there between two steps): on-demand can no longer
    save it, so the job stays on spot where that finishes no later in expectation, and may still
    make it. Spot finishes after its changeover left and the work at its pace, plus a restart
    onto on-demand if the pool is lost first (1 - exp(-w / L)); on-demand after a restart and
    the work. A preemption's notice checkpoint keeps the work done, as a move's stop does."""
    if v.on is not Choice.SPOT or not v.spot_available or not v.spot_held:
        return False
    if v.hours_left >= v.work_left + v.restart_hours:
        return False  # on-demand still meets it: the safety net's move stands
    spot_hours = v.work_left * v.spot_pace
    life = v.spot_lifetime_hours  # inf: never lost (-expm1(-0) is 0)
    lost = -math.expm1(-spot_hours / life) if life > 0 else 1.0
    on_spot = v.changeover_left + spot_hours + lost * v.restart_hours
    return on_spot <= v.restart_hours + v.work_left


def choose(v: SlackView) -> Choice:
    return rule(v).choice


@dataclass(frozen=True, slots=True)
class Verdict:
    choice: Choice
    why: str  # which condition decided, in words a job's status can show


def rule(v: SlackView) -> Verdict:
    """choose()'s choice, and which of its conditions made it."""
    g, d, left = v.step_hours, v.restart_hours, v.hours_left
    work = v.work_left + (v.changeover_left if v.on is Choice.ON_DEMAND else 0.0)
    slack = left - work - d
    keep = reserve(v)
    if v.on is Choice.ON_DEMAND:
        if left - g < work + d:  # leaving now could not be undone in time
            return Verdict(Choice.ON_DEMAND, "leaving on-demand could not be undone in time")
        if v.spot_available and slack - d >= keep + g and _worth_spot(v, 2) and _worth_trying(v):
            return Verdict(Choice.SPOT, "spot is back and the slack can absorb another restart")
        return Verdict(Choice.ON_DEMAND, "going back to spot would not pay its restarts now")
    progressing = v.on is Choice.SPOT and v.spot_available and v.changeover_left <= 0
    if left - g < work - (g / v.spot_pace if progressing else 0.0) + d:  # safety net
        if _late_either_way(v):
            return Verdict(
                Choice.SPOT,
                "a restart onto on-demand would miss the deadline too: spot finishes no later "
                "in expectation, and may still make it",
            )
        return Verdict(
            Choice.ON_DEMAND,
            "the deadline needs it: the slack cannot absorb a wait or a spot restart",
        )
    if v.spot_available:
        if v.on is Choice.SPOT:
            return Verdict(Choice.SPOT, "the spot instance still runs")
        if slack - d < g:
            return Verdict(Choice.ON_DEMAND, "the deadline needs it: no slack for a spot restart")
        if _worth_spot(v, 1):
            return Verdict(Choice.SPOT, "cheapest expected cost while slack remains")
        return Verdict(
            Choice.ON_DEMAND, "spot's expected lifetime does not pay for a restart at its price"
        )
    if slack - g >= keep:
        return Verdict(Choice.WAIT, "the deadline's slack allows it")
    return Verdict(
        Choice.ON_DEMAND, "spot has no capacity and the deadline's slack is down to its reserve"
    )


def wait_hours(v: SlackView) -> float:
    """How long the rule keeps waiting for spot if spot stays out and nothing else changes.

    Slack falls by an hour per hour waited, the reserve by less (it is at most Uniform
    Progress's share of the initial slack, which is below the window), so the rule waits over
    one interval from now: its end is found by bisection on the rule itself."""

    def waits(after: float) -> bool:
        return choose(replace(v, spot_available=False, hours_left=v.hours_left - after)) is (
            Choice.WAIT
        )

    lo, hi = 0.0, max(0.0, v.hours_left)
    if not waits(lo):
        return 0.0
    for _ in range(40):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if waits(mid) else (lo, mid)
    return hi
