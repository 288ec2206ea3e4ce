"""decide(): the shipped placement policy, a pure function of a snapshot.

Jobs are taken highest priority first (then earliest deadline), so scarce reservation slots and
budgets go to them. Per job: a free reservation slot first (prepaid, marginal cost 0); otherwise
the cheapest spot option by expected cost (not list price) and the cheapest on-demand option,
and the slack rule (slack.py) picks between spot, on-demand and waiting. A job whose deadline
on-demand can still meet is kept so: the rule's safety net puts it on on-demand before one more
step without progress would make the deadline unreachable, even when that costs more.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from api.placement.candidates import CandidateIndex, Candidates, SpotCandidate
from api.placement.decisions import Decision, Defer, Migrate, Place, Reject
from api.placement.estimate import MAX_HOURS
from api.placement.slack import Choice, SlackView, choose
from api.placement.snapshot import JobState, Reservation, Snapshot
from api.pricing.cost_model import Outcome, Risk, evaluate, young_daly_interval
from api.pricing.offers import Offer
from api.pricing.preemption import default_priors
from gpujobs.spec import CapacityType

FAR = datetime.max.replace(tzinfo=None)


@dataclass(slots=True)
class _Option:
    offer: Offer
    capacity: CapacityType
    price_per_hour: float  # whole job
    risk: Risk
    reservation: Reservation | None = None
    lifetime_hours: float = float("inf")


class _Round:
    """Mutable bookkeeping of one decide() call: reservation slots and budgets handed out."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.index = CandidateIndex(
            snapshot.offers,
            priors=snapshot.priors or default_priors(),
            rates=snapshot.rates,
            restart_hours=snapshot.restart_hours,
        )
        self.free = {r.id: r.free for r in snapshot.reservations}
        self.pools: dict[tuple[str, str], list[Reservation]] = {}
        for r in snapshot.reservations:
            self.pools.setdefault((r.zone, r.instance_type), []).append(r)
        self.budget: dict[str, float | None] = dict(snapshot.budgets)
        self.offer_by_key = {o.key: o for o in snapshot.offers}


def decide(snapshot: Snapshot) -> list[Decision]:
    """One decision per job that needs one; a running job that should stay returns nothing."""
    rnd = _Round(snapshot)

    def order(job: JobState) -> tuple[int, int, datetime, datetime, str]:
        deadline = job.deadline_at.replace(tzinfo=None) if job.deadline_at else FAR
        # Running jobs first within a priority: they already hold their slots.
        return (-job.spec.priority, job.state != "running", deadline, job.submitted_at, job.id)

    decisions: list[Decision] = []
    for job in sorted(snapshot.jobs, key=order):
        decision = _decide_job(rnd, job)
        if decision is not None:
            decisions.append(decision)
    return decisions


def _decide_job(rnd: _Round, job: JobState) -> Decision | None:
    snap = rnd.snapshot
    spec = job.spec
    cands = rnd.index.candidates(spec.resources)
    if not cands.any_offer:
        return Reject(job.id, "no offer in the catalog matches the requested resources")
    allowed = set(spec.capacity.types)
    hours_left = _hours(job.deadline_at - snap.now) if job.deadline_at else None
    current = job.placement if job.state == "running" else None

    reserved = _reserved_option(rnd, job, cands) if CapacityType.RESERVED in allowed else None
    if current is not None and current.capacity_type == CapacityType.RESERVED:
        return None  # prepaid and never preempted: nothing is cheaper or safer
    if reserved is not None:
        slack_ok = hours_left is None or (
            hours_left - job.remaining_hours - snap.restart_hours >= snap.step_hours
        )
        if current is None or slack_ok:
            return _commit(rnd, job, reserved, hours_left, "reserved capacity is prepaid")

    spot = _spot_option(rnd, job, cands) if CapacityType.SPOT in allowed else None
    od = _on_demand_option(rnd, job, cands) if CapacityType.ON_DEMAND in allowed else None
    if spot is None and od is None:
        if current is not None:
            return None
        return _nothing_available(job, cands, allowed)

    choice = _choice(job, snap, spot, od, hours_left)
    if choice is Choice.WAIT:
        if current is not None:
            return None
        return Defer(job.id, "waiting for spot capacity: the deadline's slack allows it")
    option = spot if choice is Choice.SPOT else od
    assert option is not None
    if current is not None:
        if option.capacity == current.capacity_type:
            return None
        return _migrate(rnd, job, option, hours_left)
    reason = (
        "spot: cheapest expected cost while slack remains"
        if option.capacity == CapacityType.SPOT
        else "on-demand: the deadline needs it or spot is not usable"
    )
    return _commit(rnd, job, option, hours_left, reason)


def _hours(delta: timedelta) -> float:
    return delta.total_seconds() / 3600.0


def _risk(snap: Snapshot, job: JobState, rate: float = 0.0, mtta: float = 0.0) -> Risk:
    return Risk(
        preemption_rate=rate,
        mtta_hours=mtta,
        restart_hours=snap.restart_hours,
        checkpoint_cost_hours=job.checkpoint_cost_seconds / 3600.0,
        checkpoint_on_notice=job.spec.trainer.checkpoint.on_preemption,
    )


def _within_price(job: JobState, price_per_hour: float) -> bool:
    cap = job.spec.capacity.max_price_per_hour
    return cap is None or price_per_hour <= cap + 1e-9


def _reserved_option(rnd: _Round, job: JobState, cands: Candidates) -> _Option | None:
    nodes = job.spec.resources.nodes
    for slot, offer in cands.by_slot.items():
        for pool in rnd.pools.get(slot, ()):
            if rnd.free[pool.id] >= nodes:
                return _Option(
                    offer,
                    CapacityType.RESERVED,
                    pool.price_per_hour * nodes,
                    _risk(rnd.snapshot, job),
                    reservation=pool,
                )
    return None


def _usable(snap: Snapshot, offer: Offer, capacity: CapacityType) -> bool:
    return (offer.zone, offer.instance_type, capacity) not in snap.unavailable


def _spot_option(rnd: _Round, job: JobState, cands: Candidates) -> _Option | None:
    snap, nodes = rnd.snapshot, job.spec.resources.nodes
    current = job.placement if job.state == "running" else None
    ordered: Iterator[SpotCandidate] = iter(cands.spot)
    if current is not None and current.capacity_type == CapacityType.SPOT:
        # Staying where it runs avoids a restart: try the current offer first.
        ordered = iter(sorted(cands.spot, key=lambda c: c.offer.key != current.offer_key))
    for c in ordered:
        price = (c.offer.spot_price or 0.0) * nodes
        # A job holds the spot capacity it runs on until it is preempted: "no spot here" is
        # news for new instances, not a reason to leave one that still runs.
        holds = (
            current is not None
            and current.capacity_type == CapacityType.SPOT
            and (c.offer.key == current.offer_key)
        )
        if not _within_price(job, price) or not (
            holds or _usable(snap, c.offer, CapacityType.SPOT)
        ):
            continue
        rate = c.prior.rate * nodes  # a gang stops when any node is preempted
        return _Option(
            c.offer,
            CapacityType.SPOT,
            price,
            _risk(snap, job, rate, c.prior.mtta_hours),
            lifetime_hours=1.0 / rate if rate > 0 else float("inf"),
        )
    return None


def _on_demand_option(rnd: _Round, job: JobState, cands: Candidates) -> _Option | None:
    snap, nodes = rnd.snapshot, job.spec.resources.nodes
    current = job.placement if job.state == "running" else None
    if current is not None and current.capacity_type == CapacityType.ON_DEMAND:
        offer = rnd.offer_by_key.get(current.offer_key)
        if offer is not None and offer.on_demand_price is not None:
            return _Option(
                offer, CapacityType.ON_DEMAND, offer.on_demand_price * nodes, _risk(snap, job)
            )
    for offer in cands.on_demand:
        price = (offer.on_demand_price or 0.0) * nodes
        if not _within_price(job, price):
            break  # sorted by price: the rest cost more
        if _usable(snap, offer, CapacityType.ON_DEMAND):
            return _Option(offer, CapacityType.ON_DEMAND, price, _risk(snap, job))
    return None


def _choice(
    job: JobState,
    snap: Snapshot,
    spot: _Option | None,
    od: _Option | None,
    hours_left: float | None,
) -> Choice:
    if od is None:
        return Choice.SPOT if spot is not None else Choice.WAIT
    if spot is None and (
        job.state == "running" or CapacityType.SPOT not in job.spec.capacity.types
    ):
        return Choice.ON_DEMAND
    if hours_left is None:
        # No deadline: no reason to pay on-demand while spot is there.
        return Choice.SPOT if spot is not None else Choice.ON_DEMAND
    current = job.placement if job.state == "running" else None
    on = Choice.WAIT
    changeover_left = 0.0
    if current is not None:
        on = Choice.SPOT if current.capacity_type == CapacityType.SPOT else Choice.ON_DEMAND
        ran = _hours(snap.now - current.started_at)
        changeover_left = max(0.0, snap.restart_hours - ran)
    window = _hours(job.deadline_at - job.submitted_at) if job.deadline_at else 0.0
    total_work = max(job.spec.estimated_hours or 0.0, job.remaining_hours)
    spot_price = spot.price_per_hour if spot is not None else od.price_per_hour
    view = SlackView(
        hours_left=hours_left,
        work_left=job.remaining_hours,
        on=on,
        changeover_left=changeover_left,
        spot_available=spot is not None,
        restart_hours=snap.restart_hours,
        step_hours=snap.step_hours,
        initial_slack=window - total_work - snap.restart_hours,
        window_hours=window,
        spot_lifetime_hours=spot.lifetime_hours if spot is not None else 0.0,
        price_ratio=od.price_per_hour / spot_price if spot_price > 0 else 1.0,
    )
    return choose(view)


def _outcome(job: JobState, option: _Option, hours_left: float | None, running: bool) -> Outcome:
    ckpt = job.spec.trainer.checkpoint
    return evaluate(
        work_hours=job.remaining_hours,
        price_per_hour=option.price_per_hour,
        capacity=option.capacity,
        risk=option.risk,
        hours_to_deadline=hours_left,
        checkpoint_every_seconds=ckpt.every_seconds,
        already_running=running,
    )


def _place(job: JobState, option: _Option, outcome: Outcome, now: datetime, reason: str) -> Place:
    ckpt = job.spec.trainer.checkpoint
    if ckpt.auto:
        every: float | None = young_daly_interval(
            job.checkpoint_cost_seconds, option.risk.preemption_rate
        )
    else:
        every = ckpt.every_seconds
    finish = now + timedelta(hours=min(outcome.expected_hours, MAX_HOURS))
    return Place(
        job_id=job.id,
        offer=option.offer,
        capacity_type=option.capacity,
        nodes=job.spec.resources.nodes,
        price_per_hour=option.price_per_hour,
        reservation_id=option.reservation.id if option.reservation else None,
        checkpoint_every_seconds=every,
        expected_cost=outcome.expected_cost,
        expected_finish=finish,
        p_meet_deadline=outcome.p_meet_deadline,
        reason=reason,
    )


def _over_budget(rnd: _Round, job: JobState, cost: float) -> bool:
    left = rnd.budget.get(job.team)
    return left is not None and cost > left + 1e-9


def _commit(
    rnd: _Round, job: JobState, option: _Option, hours_left: float | None, reason: str
) -> Decision:
    outcome = _outcome(job, option, hours_left, running=False)
    if _over_budget(rnd, job, outcome.expected_cost):
        left = rnd.budget.get(job.team)
        message = (
            f"expected cost ${outcome.expected_cost:.2f} exceeds team {job.team!r}'s remaining "
            f"budget ${left:.2f}"
        )
        if job.spec.capacity.on_budget_exceeded == "defer":
            return Defer(job.id, message)
        return Reject(job.id, message)
    _take(rnd, job, option, outcome)
    return _place(job, option, outcome, rnd.snapshot.now, reason)


def _migrate(
    rnd: _Round, job: JobState, option: _Option, hours_left: float | None
) -> Decision | None:
    outcome = _outcome(job, option, hours_left, running=False)
    if _over_budget(rnd, job, outcome.expected_cost):
        return None  # keep running where it is rather than move somewhere unaffordable
    _take(rnd, job, option, outcome)
    to = _place(job, option, outcome, rnd.snapshot.now, "migrate")
    if option.capacity == CapacityType.ON_DEMAND:
        reason = "the deadline's slack is down to its reserve: move to on-demand"
    elif option.capacity == CapacityType.SPOT:
        reason = "spot is back and the slack can absorb another restart: move to spot"
    else:
        reason = "a reserved slot is free: move to prepaid capacity"
    return Migrate(job.id, to, reason)


def _take(rnd: _Round, job: JobState, option: _Option, outcome: Outcome) -> None:
    if option.reservation is not None:
        rnd.free[option.reservation.id] -= job.spec.resources.nodes
    left = rnd.budget.get(job.team)
    if left is not None:
        rnd.budget[job.team] = left - outcome.expected_cost


def _nothing_available(job: JobState, cands: Candidates, allowed: set[CapacityType]) -> Decision:
    nodes = job.spec.resources.nodes
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
    return Defer(job.id, "no allowed capacity is available now")
