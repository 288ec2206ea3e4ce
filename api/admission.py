"""The default admission check at submit: refuse what no capacity could run, what the scheduler
would reject, and what the team's budget cannot pay for (unless the spec asks to wait for budget
with on_budget_exceeded: defer); quote what is accepted and hold that quote against the budget.

Installed by create_app when no other check is given; jobs.service.submit calls it before the
job is inserted, so a refused spec leaves nothing behind. It weighs the spec exactly as the
scheduler will (api.estimates.planning.weigh: the same snapshot and decide() itself), and quotes
the policy as it will run (api.placement.quote). The hold is the quote's 90th percentile
(quote.HOLD_PERCENTILE): budgets count it until the job ends, less what the job has spent.
Admissions of one team are serialized on its budget row (SELECT ... FOR UPDATE), so concurrent
submits see each other's holds and cannot overshoot. A running job holds at least its burn until
the next checks, and the reconciler stops running jobs whose team would pass its budget
(api.budgets.enforcement): a job that understates `estimated_hours` is held to its budget while
it runs, not only here.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from api.budgets import repository as budgets
from api.budgets.service import commitment_us, remaining_usd
from api.errors import BudgetExceeded, InvalidRequest
from api.estimates import feasibility, planning
from api.estimates.service import slots
from api.jobs.service import Admitted
from api.models import Team
from api.money import MICRO
from api.placement.options import MAX_HOURS
from api.pricing.catalog import Catalog, default_catalog
from api.pricing.preemption import Priors, default_priors
from api.settings import Settings, get_settings
from gpujobs.resources import FieldError
from gpujobs.spec import JobSpec

# Quotes are kept in 64-bit micro-dollars. A trillion dollars is past any job a spec may ask
# for (256 nodes of the dearest offer for the longest planned run come to about $2e8); a figure
# beyond it comes from an input no bound caught, and is refused as such, never overflowed (500).
MAX_QUOTE_USD = 1e12


class Admission:
    """Callable as `admission(session=..., team_id=..., spec=..., now=...)`; raises a 422."""

    def __init__(
        self,
        *,
        catalog: Catalog | None = None,
        priors: Priors | None = None,
        settings: Settings | None = None,
    ) -> None:
        self._catalog = catalog
        self._priors = priors
        self._settings = settings

    def __call__(
        self, *, session: Session, team_id: str, spec: JobSpec, now: datetime
    ) -> Admitted | None:
        catalog = self._catalog or default_catalog()
        feasibility.check(spec, catalog, slots=lambda: slots(session, now=now))
        if spec.estimated_hours is None:
            return None  # without a work estimate there is nothing to quote; the scheduler checks
        settings = self._settings or get_settings()
        team = session.get(Team, team_id)
        team_name = team.name if team is not None else team_id
        budget = budgets.lock(session, team_id=team_id)
        remaining = (
            None
            if budget is None
            else remaining_usd(
                session,
                team_id=team_id,
                now=now,
                horizon_us=commitment_us(settings.reconcile_interval_s),
            )
        )
        weighed = planning.weigh(
            session,
            spec=spec,
            team_id=team_id,
            team_name=team_name,
            now=now,
            catalog=catalog,
            priors=self._priors or default_priors(),
            settings=settings,
            remaining_budget=None,  # compared below, with the numbers in the message
        )
        if weighed.decision == "reject":
            raise InvalidRequest(
                f"capacity: {weighed.reason}",
                fields=[FieldError(field="capacity", reason=weighed.reason)],
            )
        q = weighed.quote
        if q is None or not math.isfinite(q.hold_cost):
            return None
        if max(q.expected_cost, q.typical_cost, q.hold_cost) > MAX_QUOTE_USD:
            reason = (
                f"the job is quoted at ${q.hold_cost:,.3g}, more than any job can cost here "
                f"(${MAX_QUOTE_USD:,.0f}); check estimated_hours and the resources"
            )
            raise InvalidRequest(
                reason, fields=[FieldError(field="estimated_hours", reason=reason)]
            )
        admitted = Admitted(
            quote_cost_microusd=round(q.expected_cost * MICRO),
            quote_typical_microusd=round(q.typical_cost * MICRO),
            quote_hold_microusd=round(q.hold_cost * MICRO),
            quote_finish_at=now + timedelta(hours=min(q.expected_hours, MAX_HOURS)),
            quote_p_meet=q.p_meet_deadline,
            holds_budget=True,
        )
        if remaining is None or q.hold_cost <= remaining + 1e-9:
            return admitted
        if spec.capacity.on_budget_exceeded == "defer":
            # Accepted as PENDING without a hold; the scheduler defers it until the budget allows.
            return replace(admitted, holds_budget=False)
        reason = (
            f"the job is quoted at ${q.expected_cost:,.2f} expected and ${q.hold_cost:,.2f} at the "
            f"90th percentile (held while it runs), more than team {team_name!r}'s remaining "
            f"budget this month (${remaining:,.2f}); set capacity.on_budget_exceeded: defer to "
            "wait for budget"
        )
        raise BudgetExceeded(reason, fields=[FieldError(field="capacity", reason=reason)])
