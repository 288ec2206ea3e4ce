"""estimate(): what decide() would do with a spec now, and every plan it weighed.

The estimate runs decide() itself on the snapshot the scheduler would see (learned rates,
restart time, reservations, budgets, capacity known gone), with the spec as one more pending
job, so the plan it marks as chosen is the one the scheduler places. Every other plan comes from
the same enumeration (options.Market) with the same cost function, and says why it loses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from api.placement.decisions import Decision, Defer, Migrate, Place, Reject, Unweighable
from api.placement.options import Considered, Market, Option, outcome, plan
from api.placement.plan import Plan
from api.placement.policy import decide
from api.placement.quote import Quote, quote
from api.placement.situation import Situation, hours_until, situation
from api.placement.snapshot import JobState, Snapshot, unweighable
from gpujobs.spec import CapacityType


@dataclass(frozen=True, slots=True)
class Weighed:
    plan: Plan
    chosen: bool
    why: str  # why the scheduler takes it, or why it loses to the chosen one
    available: bool = True  # False: something stops it now (capacity, price cap, free nodes)


@dataclass(frozen=True, slots=True)
class Estimate:
    decision: Literal["place", "wait", "reject"]
    reason: str
    plans: list[Weighed]  # the chosen one, the best of each other kind, then by expected cost
    quote: Quote | None  # the policy as it will run (spot while slack lasts, then on-demand...)


def estimate(snapshot: Snapshot, job: JobState, *, limit: int = 20) -> Estimate:
    """The decision for `job` (pending, in `snapshot` or added to it) and the plans weighed."""
    found = unweighable(job)
    if found is not None:
        return Estimate("reject", Unweighable(job.id, *found).reason, [], None)
    jobs = [j for j in snapshot.jobs if j.id != job.id]
    market = Market(replace(snapshot, jobs=[*jobs, job]))
    # Quoted first: decide() weighs the job's budget by its quote's hold, as it will once the
    # job is admitted with that quote.
    quoted = policy_quote(market, job)
    if quoted is not None and not job.budget_held and math.isfinite(quoted.hold_cost):
        job = replace(job, quote_usd=quoted.hold_cost)
    snap = replace(snapshot, jobs=[*jobs, job])
    decision = _decision_for(decide(snap), job.id)
    if isinstance(decision, Unweighable):
        return Estimate("reject", decision.reason, [], None)
    chosen = decision.plan if isinstance(decision, Place) else None
    if isinstance(decision, Reject):
        quoted = None
    hours_left = hours_until(job.deadline_at, snap.now)
    allowed = set(job.spec.capacity.types)
    free = {r.id: r.free for r in snap.reservations}
    considered: list[Considered] = []
    if CapacityType.RESERVED in allowed:
        considered += market.reserved(job, free)
    if CapacityType.SPOT in allowed:
        considered += market.spot(job)
    if CapacityType.ON_DEMAND in allowed:
        considered += market.on_demand(job)
    weighed = []
    for c in considered:
        p = plan(job, c.option, outcome(job, c.option, hours_left), snap.now)
        is_chosen = chosen is not None and p.key == chosen.key
        if is_chosen:
            weighed.append(Weighed(chosen or p, True, decision.reason))
        else:
            why = c.unusable or _loses(p, chosen, decision)
            weighed.append(Weighed(p, False, why, available=c.unusable is None))
    weighed.sort(key=lambda w: (not w.chosen, w.plan.expected_cost, w.plan.offer.key))
    # The best of each capacity type right after the chosen plan, so a short list still shows
    # what on-demand (or spot) would cost.
    best = {w.plan.capacity_type: w for w in reversed(weighed) if not w.chosen}
    ahead = sorted(best.values(), key=lambda w: (w.plan.expected_cost, w.plan.offer.key))
    weighed = (
        [w for w in weighed if w.chosen]
        + ahead
        + [w for w in weighed if not w.chosen and w not in ahead]
    )
    if chosen is not None:
        return Estimate("place", decision.reason, weighed[:limit], quoted)
    return Estimate(
        "wait" if isinstance(decision, Defer) else "reject",
        decision.reason,
        weighed[:limit],
        quoted,
    )


def policy_quote(market: Market, job: JobState) -> Quote | None:
    """The quote of what decide() will do with the job from now on (see quote.py), from the
    situation decide() weighs: the pools it picks by what they showed lately (rates), each
    forecast for the whole run from the whole window (forecast_rates); a free reservation
    first, as decide() takes one."""
    snap = market.snapshot
    sit = situation(market, job, snap.now)
    if snap.forecast_rates is not None:
        sit = _forecast(sit, Market(replace(snap, rates=snap.forecast_rates)), job)
    reserved = market.reservation(
        job, {r.id: r.free for r in snap.reservations}, hours_left=sit.hours_left
    )
    pool = sit.pool
    spot_now = (
        pool is not None
        and (pool.offer.zone, pool.offer.instance_type, CapacityType.SPOT) not in snap.unavailable
    )
    return quote(sit, reserved=reserved, spot_available_now=spot_now)


def _forecast(sit: Situation, forecast: Market, job: JobState) -> Situation:
    """The situation with its spot pools as the forecast sees them: the same offers."""
    seen = {c.option.offer.key: c.option for c in forecast.spot(job)}

    def same(option: Option | None) -> Option | None:
        return None if option is None else seen.get(option.offer.key, option)

    return replace(sit, spot=same(sit.spot), pool=same(sit.pool))


def _decision_for(decisions: list[Decision], job_id: str) -> Decision:
    for d in decisions:
        if d.job_id == job_id:
            return d.to if isinstance(d, Migrate) else d
    raise AssertionError("decide() returns a decision for every pending job")


def _loses(p: Plan, chosen: Plan | None, decision: Decision) -> str:
    if chosen is None:
        return f"the scheduler would not place the job now: {decision.reason}"
    if p.p_meet_deadline == 0.0 < chosen.p_meet_deadline:
        return (
            f"cannot finish by the deadline on {p.nodes} x {p.offer.gpu_count} "
            f"{p.offer.gpu_model}: the chosen {chosen.offer.gpu_model} can"
        )
    if p.capacity_type == chosen.capacity_type:
        more = p.expected_cost - chosen.expected_cost
        if more > 0.005:
            return f"expected to cost ${more:,.2f} more than the chosen {chosen.offer.zone}"
        return f"no cheaper than the chosen {chosen.offer.zone}, which comes first"
    if chosen.capacity_type == CapacityType.RESERVED:
        return "a free reserved slot is prepaid: it costs nothing more"
    if chosen.capacity_type == CapacityType.SPOT:
        return "the deadline's slack allows spot, which is cheaper while it lasts"
    if p.capacity_type == CapacityType.SPOT:
        return f"spot loses now: {decision.reason}"
    return decision.reason
