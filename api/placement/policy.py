"""decide(): the shipped placement policy, a pure function of a snapshot.

Jobs are taken highest priority first (then earliest deadline), so scarce reservation slots and
budgets go to them. Per job: a free reservation slot first (prepaid, marginal cost 0); otherwise
the cheapest spot option by expected cost (not list price) and the cheapest on-demand option,
and the verdict (verdict.py: the slack rule, slack.py, and whether a standby is worth holding
beside on-demand, standby.py) picks between spot, on-demand and waiting; the quote's simulation
asks the same verdict. A job whose deadline on-demand can still meet is kept so: the rule's
safety net puts it on on-demand before one more step without progress would make the deadline
unreachable, even when that costs more.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from api.placement.decisions import (
    Decision,
    Defer,
    Migrate,
    Place,
    Reject,
    Standby,
    Unweighable,
    Withdraw,
)
from api.placement.market_clock import market_duration
from api.placement.options import Market, Option, outcome, plan
from api.placement.situation import Situation, hours_until, situation
from api.placement.slack import Choice, SlackView, Verdict, wait_hours
from api.placement.snapshot import JobState, Snapshot, unweighable
from api.placement.standby import keeps_fallback
from api.placement.verdict import Hold, Ruling, ruling
from api.pricing.cost_model import Outcome
from gpujobs.spec import CapacityType

FAR = datetime.max.replace(tzinfo=None)


class _Round:
    """Mutable bookkeeping of one decide() call: reservation slots and budgets handed out."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.market = Market(snapshot)
        self.free = {r.id: r.free for r in snapshot.reservations}
        self.budget: dict[str, float | None] = dict(snapshot.budgets)


def decide(snapshot: Snapshot) -> list[Decision]:
    """One decision per job that needs one; a running job that should stay returns nothing."""
    rnd = _Round(snapshot)

    def order(job: JobState) -> tuple[int, int, datetime, datetime, str]:
        deadline = job.deadline_at.replace(tzinfo=None) if job.deadline_at else FAR
        # Running jobs first within a priority: they already hold their slots.
        return (-job.spec.priority, job.state != "running", deadline, job.submitted_at, job.id)

    decisions: list[Decision] = []
    for job in sorted(snapshot.jobs, key=order):
        decision = _isolated(rnd, job)
        if decision is not None:
            decisions.append(decision)
    return decisions


class _NotFinite(ArithmeticError):
    def __init__(self, field: str, value: float) -> None:
        super().__init__(field, value)
        self.field, self.value = field, value


def _isolated(rnd: _Round, job: JobState) -> Decision | None:
    """The job's decision, or Unweighable where its state holds a number out of bounds, where
    weighing it raises, or where the plan it yields is not a finite figure: one job's state,
    whoever wrote it, never stops the others' decisions. What it took of the round (reservation
    slots, budget) before it failed is given back."""
    found = unweighable(job)
    if found is not None:
        return Unweighable(job.id, *found)
    free, budget = dict(rnd.free), dict(rnd.budget)
    try:
        decision = _decide_job(rnd, job)
        _check_finite(decision)
    except _NotFinite as bad:
        rnd.free, rnd.budget = free, budget
        return Unweighable(job.id, bad.field, f"came to {bad.value}, not a finite number")
    except Exception as error:  # any error: the point is that it stays this job's
        rnd.free, rnd.budget = free, budget
        return Unweighable(job.id, "its state", f"failed to weigh: {type(error).__name__}: {error}")
    return decision


def _check_finite(decision: Decision | None) -> None:
    to = decision.to if isinstance(decision, Migrate | Standby) else decision
    if not isinstance(to, Place):
        return
    figures = {
        "expected_cost": to.plan.expected_cost,
        "p_meet_deadline": to.plan.p_meet_deadline,
        "checkpoint_every_seconds": to.plan.checkpoint_every_seconds or 1.0,
    }
    for name, value in figures.items():
        if not math.isfinite(value):
            raise _NotFinite(name, value)


def _decide_job(rnd: _Round, job: JobState) -> Decision | None:
    snap, market = rnd.snapshot, rnd.market
    spec = job.spec
    if not market.candidates(job).any_offer:
        return Reject(job.id, "no offer in the catalog matches the requested resources")
    allowed = set(spec.capacity.types)
    hours_left = hours_until(job.deadline_at, snap.now)
    current = job.current if job.state == "running" else None

    if current is not None and current.capacity_type == CapacityType.RESERVED:
        return None  # prepaid and never preempted: nothing is cheaper or safer
    reserved = market.reservation(
        job,
        rnd.free,
        hours_left=hours_left,
        affordable=lambda od: (
            not _over_budget(rnd, job, _budget_cost(job, outcome(job, od, hours_left)))
        ),
    )
    if reserved is not None:
        return _commit(rnd, job, reserved, hours_left, "reserved capacity is prepaid")

    sit = situation(market, job, snap.now)
    spot, od = sit.spot, sit.on_demand
    if spot is None and od is None:
        if current is not None:
            return None
        return _nothing_available(rnd, job, allowed)

    judged = ruling(sit)
    verdict, view = judged.verdict, judged.view
    if verdict.choice is Choice.WAIT:
        if current is not None:
            return None
        why = f"waiting for spot capacity: {verdict.why}{_next(snap, view)}"
        return Defer(job.id, why + _assumed(job))
    option = spot if verdict.choice is Choice.SPOT else od
    assert option is not None
    if current is not None:
        if job.standby is not None:
            return _withdraw(rnd, job, sit)  # the handover, not a move, moves it
        if current.capacity_type == CapacityType.ON_DEMAND and snap.standby and spot is not None:
            held = _standby(rnd, job, sit, judged)
            if held is not None:
                return held
            if option.capacity == CapacityType.SPOT and hours_left is not None:
                return None  # no room to keep the fallback through a handover: not by a move either
        if option.capacity == current.capacity_type:
            return None
        return _migrate(rnd, job, option, hours_left)
    reason = (
        "spot: cheapest expected cost while slack remains"
        if option.capacity == CapacityType.SPOT
        else f"on-demand: {verdict.why}"
    )
    return _commit(rnd, job, option, hours_left, reason + _assumed(job))


def _next(snap: Snapshot, view: SlackView | None) -> str:
    """When a waiting job moves to on-demand if spot stays out: the rule knows it."""
    if view is None:
        return ""
    now = snap.now.astimezone(UTC).replace(tzinfo=None) if snap.now.tzinfo else snap.now
    at = now + timedelta(hours=wait_hours(view))
    if at.second or at.microsecond:  # "by": rounded up, so the move is never later than said
        at = at.replace(second=0, microsecond=0) + timedelta(minutes=1)
    shown = f"{at:%H:%M}" if at.date() == now.date() else f"{at:%b %d %H:%M}"
    return f"; moves to on-demand by {shown} UTC unless spot returns"


def _assumed(job: JobState) -> str:
    """Without estimated_hours or a measured rate, the work is a default (the worker's)."""
    if job.spec.estimated_hours is None and job.step_seconds is None:
        return f"; no estimated_hours: assumed {job.remaining_hours:.2g} h"
    return ""


def _budget_cost(job: JobState, out: Outcome) -> float:
    """What placing the job commits of its team's budget: nothing more when its quote is already
    held; else the quote's hold (the policy as it will run), or this option's expected cost."""
    if job.budget_held:
        return 0.0
    return job.quote_usd if job.quote_usd is not None else out.expected_cost


def _over_budget(rnd: _Round, job: JobState, cost: float) -> bool:
    left = rnd.budget.get(job.team)
    return left is not None and cost > left + 1e-9


def _commit(
    rnd: _Round, job: JobState, option: Option, hours_left: float | None, reason: str
) -> Decision:
    out = outcome(job, option, hours_left)
    cost = _budget_cost(job, out)
    if _over_budget(rnd, job, cost):
        left = rnd.budget.get(job.team) or 0.0
        message = (
            f"expected cost ${cost:.2f} exceeds team {job.team_name or job.team!r}'s "
            f"remaining budget ${left:.2f}"
        )
        if job.spec.capacity.on_budget_exceeded == "defer":
            return Defer(job.id, message)
        return Reject(job.id, message)
    _take(rnd, job, option, out)
    return Place(job.id, plan(job, option, out, rnd.snapshot.now), reason)


def _migrate(
    rnd: _Round, job: JobState, option: Option, hours_left: float | None
) -> Decision | None:
    out = outcome(job, option, hours_left)
    if _over_budget(rnd, job, _budget_cost(job, out)):
        return None  # keep running where it is rather than move somewhere unaffordable
    _take(rnd, job, option, out)
    to = Place(job.id, plan(job, option, out, rnd.snapshot.now), "migrate")
    if option.capacity == CapacityType.ON_DEMAND:
        reason = "the deadline's slack is down to its reserve: move to on-demand"
    elif option.capacity == CapacityType.SPOT:
        reason = "spot is back and the slack can absorb another restart: move to spot"
    else:
        reason = "a reserved slot is free: move to prepaid capacity"
    return Migrate(job.id, to, reason)


def _standby(rnd: _Round, job: JobState, sit: Situation, judged: Ruling) -> Decision | None:
    """A standby on spot beside on-demand where the verdict holds one (api.placement.verdict),
    on an offer where none of this job's failed before, and within its budget; None: keep
    on-demand alone."""
    spot = sit.spot
    assert spot is not None
    if spot.offer.key in job.no_standby or judged.standby is None:
        return None
    out = outcome(job, spot, sit.hours_left)
    if _over_budget(rnd, job, _budget_cost(job, out)):
        return None
    _take(rnd, job, spot, out)
    reason = _standby_reason(rnd, sit, judged.standby, judged.verdict)
    return Standby(job.id, Place(job.id, plan(job, spot, out, rnd.snapshot.now), "standby"), reason)


def _withdraw(rnd: _Round, job: JobState, sit: Situation) -> Decision | None:
    """The standby held beside on-demand, judged again by the verdict that held it, on its own
    offer (the verdict as if that offer were the spot to go to): kept while it would still be
    held (its start is spent either way), withdrawn when it would not. Left alone once it is
    being stopped or its handover has begun, and where the market cannot judge its offer: gone
    from the catalog, or short of capacity for new instances only (the standby holds its own, or
    shows it has none)."""
    held = job.standby
    assert held is not None
    if held.stopping or held.attempt_id is None or not rnd.snapshot.standby:
        return None
    found = next((c for c in rnd.market.spot(job) if c.option.offer.key == held.offer_key), None)
    if found is None or (found.unusable is not None and found.transient):
        return None
    spot = found.option
    judged = ruling(replace(sit, spot=spot, pool=spot), held=True)
    if judged.standby is not None:
        return None
    view = judged.view
    if view is not None and not keeps_fallback(view):
        # What changed since it was held, so the withdrawal follows from the hold.
        why = (
            "the fallback to on-demand would no longer fit after a handover: the deadline is "
            "now too near to risk a preemption on spot"
        )
    elif sit.hours_left is None:
        why = "without a deadline, the rule would no longer move the job to spot"
    else:
        scale = rnd.snapshot.time_scale
        why = (
            "it no longer pays for itself: expected spot run "
            f"{market_duration(spot.lifetime_hours, time_scale=scale)} "
            f"against a changeover of {market_duration(sit.restart_hours)}"
        )
    return Withdraw(job.id, held.attempt_id, why)


def _standby_reason(rnd: _Round, sit: Situation, hold: Hold, verdict: Verdict) -> str:
    """Why the standby is held, in words a job's status can show."""
    if hold is Hold.SPOT_BACK:
        return "spot is back: a standby takes over from on-demand at its checkpoint"
    spot = sit.spot
    assert spot is not None
    # Why on-demand stays, too: held beside it, the standby read as the rule's reversal.
    stays = f" (on-demand stays: {verdict.why})" if verdict.choice is Choice.ON_DEMAND else ""
    # The lifetime is the market's, on its clock; the changeover is this launcher's own
    # (a process start, a node's provisioning), on the wall clock whatever the market's.
    lifetime = market_duration(spot.lifetime_hours, time_scale=rnd.snapshot.time_scale)
    return (
        f"a standby on spot pays for itself: expected spot run {lifetime} against a "
        f"changeover of {market_duration(sit.restart_hours)}, hidden while on-demand "
        f"trains{stays}"
    )


def _take(rnd: _Round, job: JobState, option: Option, out: Outcome) -> None:
    if option.reservation is not None:
        rnd.free[option.reservation.id] -= job.spec.resources.nodes
    left = rnd.budget.get(job.team)
    if left is not None:
        rnd.budget[job.team] = left - _budget_cost(job, out)


def _nothing_available(rnd: _Round, job: JobState, allowed: set[CapacityType]) -> Decision:
    nodes = job.spec.resources.nodes
    cands = rnd.market.candidates(job)
    prices = [
        p * nodes
        for o in cands.on_demand + tuple(c.offer for c in cands.spot)
        for cap, p in (
            (CapacityType.ON_DEMAND, o.on_demand_price),
            (CapacityType.SPOT, o.spot_price),
        )
        if p is not None and cap in allowed
    ]
    cap = job.spec.capacity.max_price_per_hour
    if cap is not None and prices and min(prices) > cap:
        return Reject(
            job.id,
            f"max_price_per_hour ${cap:.2f} is below the cheapest matching offer "
            f"(${min(prices):.2f}/h for the whole job)",
        )
    if not prices and CapacityType.RESERVED not in allowed:
        return Reject(job.id, "no matching offer is sold on the allowed capacity types")
    if allowed == {CapacityType.SPOT}:
        reasons = [c.unusable for c in rnd.market.spot(job)]
        if reasons and all(r is not None and "never finish" in r for r in reasons):
            return Reject(
                job.id,
                f"every matching spot pool {reasons[0]}; allow on_demand or use fewer nodes",
            )
    return Defer(job.id, "no allowed capacity is available now")
