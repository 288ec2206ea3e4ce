"""The default admission check at submit: refuse what no capacity could run, and what the team's
budget cannot pay for (unless the spec asks to wait for budget with on_budget_exceeded: defer).

Installed by create_app when no other check is given; jobs.service.submit calls it before the
job is inserted, so a refused spec leaves nothing behind.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from api.budgets.service import remaining_usd
from api.errors import BudgetExceeded
from api.estimates import feasibility, planning
from api.estimates.service import slots
from api.pricing.catalog import Catalog, default_catalog
from api.pricing.preemption import Priors, default_priors
from api.reservations import repository as reservations
from gpujobs.resources import FieldError
from gpujobs.spec import JobSpec


class Admission:
    """Callable as `admission(session=..., team_id=..., spec=..., now=...)`; raises a 422."""

    def __init__(self, *, catalog: Catalog | None = None, priors: Priors | None = None) -> None:
        self._catalog = catalog
        self._priors = priors

    def __call__(self, *, session: Session, team_id: str, spec: JobSpec, now: datetime) -> None:
        catalog = self._catalog or default_catalog()
        feasibility.check(spec, catalog, slots=lambda: slots(session, now=now))
        if spec.estimated_hours is None:
            return  # without a work estimate there is no cost to compare; the scheduler checks
        remaining = remaining_usd(session, team_id=team_id, now=now)
        if remaining is None:
            return
        ranked = planning.plans(
            spec,
            catalog=catalog,
            priors=self._priors or default_priors(),
            now=now,
            reservations=reservations.with_usage(session, now=now),
        )
        if not ranked:
            return
        cheapest = min(ranked, key=lambda p: (p.expected_cost, p.offer.key))
        if cheapest.expected_cost <= remaining + 1e-9:
            return
        if spec.capacity.on_budget_exceeded == "defer":
            return  # accepted as PENDING; the scheduler defers it until the budget allows
        reason = (
            f"the cheapest plan ({cheapest.capacity_type} {cheapest.nodes} x "
            f"{cheapest.offer.instance_type} in {cheapest.offer.zone}) is expected to cost "
            f"${cheapest.expected_cost:,.2f}, more than the team's remaining budget this month "
            f"(${remaining:,.2f}); set capacity.on_budget_exceeded: defer to wait for budget"
        )
        raise BudgetExceeded(reason, fields=[FieldError(field="capacity", reason=reason)])


default_admission = Admission()
