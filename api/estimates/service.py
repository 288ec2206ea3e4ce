"""POST /v1/estimate: what running a spec would cost, without creating a job."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from api import workloads
from api.auth import Principal
from api.budgets.service import remaining_usd
from api.catalog import views as catalog_views
from api.database import read_session
from api.estimates import feasibility, local_machine, planning
from api.models import utcnow
from api.placement import Weighed
from api.placement.options import MAX_HOURS
from api.placement.quote import Quote
from api.pricing.catalog import Catalog, default_catalog
from api.pricing.preemption import Priors, default_priors
from api.reservations import repository as reservations
from api.settings import Settings, get_settings
from gpujobs import plans as contract
from gpujobs.resources import Quote as QuoteView
from gpujobs.spec import JobSpec

PLANS_SHOWN = 20


def slots(session: Session, *, now: datetime) -> list[feasibility.Slot]:
    """Reservations in force now or later, as feasibility sees them."""
    rows = reservations.active(session, now=now, upcoming=True)
    return [feasibility.Slot(r.zone, r.instance_type, r.count) for r in rows]


def estimate(
    factory: sessionmaker[Session],
    *,
    principal: Principal,
    spec: JobSpec,
    now: datetime | None = None,
    catalog: Catalog | None = None,
    priors: Priors | None = None,
    workload_prefixes: Sequence[str] = (),
    settings: Settings | None = None,
) -> contract.Estimate:
    """What the scheduler would do with the spec now (the chosen plan first) and why every other
    plan loses; a spec that nothing could run is a 422 naming the field."""
    principal.require_team_token()
    workloads.check(spec.trainer, allowed_prefixes=workload_prefixes)
    settings = settings or get_settings()
    local_machine.check(spec, settings=settings)
    now = now or utcnow()
    catalog = catalog or default_catalog()
    team_id = principal.team_id
    with read_session(factory) as session:
        feasibility.check(spec, catalog, slots=lambda: slots(session, now=now))
        remaining = remaining_usd(session, team_id=team_id, now=now) if team_id else None
        weighing = planning.read(
            session,
            spec=spec,
            team_id=team_id,
            team_name=principal.team_name,
            now=now,
            catalog=catalog,
            priors=priors or default_priors(),
            settings=settings,
            remaining_budget=remaining,
        )
    # Weighed with the session closed: a year-long quote computes for seconds, and must not hold
    # a connection (nor, on SQLite, the database) while it does.
    weighed = weighing.weigh(limit=PLANS_SHOWN)
    return contract.Estimate(
        decision=weighed.decision,
        reason=weighed.reason,
        plans=[plan(w) for w in weighed.plans],
        estimated_hours=spec.estimated_hours or 0.0,
        deadline_at=spec.deadline_at(now),
        remaining_budget=remaining,
        quote=_quote(weighed.quote, now),
        generated_at=now,
    )


def _quote(q: Quote | None, now: datetime) -> QuoteView | None:
    if q is None or not math.isfinite(q.hold_cost):
        return None
    return QuoteView(
        expected_cost=q.expected_cost,
        typical_cost=q.typical_cost,
        hold_cost=q.hold_cost,
        expected_finish=now + timedelta(hours=min(q.expected_hours, MAX_HOURS)),
        p_meet_deadline=q.p_meet_deadline,
    )


def plan(w: Weighed) -> contract.Plan:
    p = w.plan
    return contract.Plan(
        gpu_model=p.offer.gpu_model,
        instance_type=p.offer.instance_type,
        zone=p.offer.zone,
        capacity_type=p.capacity_type,
        nodes=p.nodes,
        price_per_hour=p.price_per_hour,
        expected_cost=p.expected_cost,
        expected_finish=p.expected_finish,
        p_meet_deadline=p.p_meet_deadline,
        checkpoint_every_seconds=p.checkpoint_every_seconds,
        reservation_id=p.reservation_id,
        offer=catalog_views.offer(p.offer),
        chosen=w.chosen,
        why=w.why,
        available=w.available,
    )
