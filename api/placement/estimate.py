"""estimate(): ranked plans for a spec before it is submitted (POST /v1/estimate)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from api.placement.candidates import CandidateIndex
from api.placement.snapshot import Reservation
from api.pricing.catalog import Catalog
from api.pricing.cost_model import Risk, evaluate
from api.pricing.offers import Offer
from api.pricing.preemption import Priors
from gpujobs.spec import CapacityType, JobSpec

# Plans below this chance of meeting the deadline rank after those above it.
LIKELY = 0.9
# Beyond ten years a finish time means nothing (and soon is not a representable datetime).
MAX_HOURS = 24 * 3650


@dataclass(frozen=True, slots=True)
class Plan:
    offer: Offer
    capacity_type: CapacityType
    nodes: int
    price_per_hour: float  # whole job
    reservation_id: str | None
    expected_cost: float  # marginal USD (0 on reserved)
    expected_finish: datetime
    p_meet_deadline: float
    checkpoint_every_seconds: float


def estimate(
    spec: JobSpec,
    catalog: Catalog,
    priors: Priors,
    now: datetime,
    *,
    reservations: Sequence[Reservation] = (),
    unavailable: frozenset[tuple[str, str, CapacityType]] = frozenset(),
    remaining_hours: float | None = None,
    submitted_at: datetime | None = None,
    restart_hours: float = 0.2,
    checkpoint_cost_seconds: float = 30.0,
    limit: int = 20,
) -> list[Plan]:
    """Plans ranked: likely to meet the deadline first, then cheapest expected cost, then
    soonest finish. Each offer appears at most once per capacity type; spot is evaluated with
    the offer's preemption prior. Raises ValueError without a work estimate."""
    work = remaining_hours if remaining_hours is not None else spec.estimated_hours
    if work is None:
        raise ValueError("estimated_hours is needed to estimate cost and finish time")
    deadline = spec.deadline_at(submitted_at or now)
    hours_left = (deadline - now).total_seconds() / 3600.0 if deadline else None
    nodes = spec.resources.nodes
    index = CandidateIndex(catalog.offers, priors=priors, rates={}, restart_hours=restart_hours)
    cands = index.candidates(spec.resources)
    allowed = set(spec.capacity.types)
    cap = spec.capacity.max_price_per_hour
    risk = Risk(
        restart_hours=restart_hours,
        checkpoint_cost_hours=checkpoint_cost_seconds / 3600.0,
        checkpoint_on_notice=spec.trainer.checkpoint.on_preemption,
    )
    options: list[tuple[Offer, CapacityType, float, Risk, str | None]] = []
    if CapacityType.RESERVED in allowed:
        for r in reservations:
            offer = cands.by_slot.get((r.zone, r.instance_type))
            if offer is not None and r.free >= nodes:
                options.append((offer, CapacityType.RESERVED, r.price_per_hour * nodes, risk, r.id))
    if CapacityType.ON_DEMAND in allowed:
        for offer in cands.on_demand:
            options.append(
                (offer, CapacityType.ON_DEMAND, (offer.on_demand_price or 0) * nodes, risk, None)
            )
    if CapacityType.SPOT in allowed:
        for c in cands.spot:
            rate = c.prior.rate * nodes
            spot_risk = Risk(
                rate,
                c.prior.mtta_hours,
                risk.restart_hours,
                risk.checkpoint_cost_hours,
                risk.checkpoint_on_notice,
            )
            options.append(
                (c.offer, CapacityType.SPOT, (c.offer.spot_price or 0) * nodes, spot_risk, None)
            )
    plans = []
    for offer, capacity, price, option_risk, reservation_id in options:
        if capacity != CapacityType.RESERVED and cap is not None and price > cap + 1e-9:
            continue
        if (offer.zone, offer.instance_type, capacity) in unavailable:
            continue
        out = evaluate(
            work_hours=work,
            price_per_hour=price,
            capacity=capacity,
            risk=option_risk,
            hours_to_deadline=hours_left,
            checkpoint_every_seconds=spec.trainer.checkpoint.every_seconds,
        )
        if out.expected_hours == float("inf"):
            continue
        plans.append(
            Plan(
                offer=offer,
                capacity_type=capacity,
                nodes=nodes,
                price_per_hour=price,
                reservation_id=reservation_id,
                expected_cost=out.expected_cost,
                expected_finish=now + timedelta(hours=min(out.expected_hours, MAX_HOURS)),
                p_meet_deadline=out.p_meet_deadline,
                checkpoint_every_seconds=out.checkpoint_every_seconds,
            )
        )
    plans.sort(
        key=lambda p: (p.p_meet_deadline < LIKELY, p.expected_cost, p.expected_finish, p.offer.key)
    )
    return plans[:limit]
