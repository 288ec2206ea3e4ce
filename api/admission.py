"""The default admission check at submit: refuse what no capacity could run, what the scheduler
would reject, and what the team's budget cannot pay for (unless the spec asks to wait for budget
with on_budget_exceeded: defer).

Installed by create_app when no other check is given; jobs.service.submit calls it before the
job is inserted, so a refused spec leaves nothing behind. It weighs the spec exactly as the
scheduler will (api.estimates.planning.weigh: the same snapshot and decide() itself).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from api.budgets.service import remaining_usd
from api.errors import BudgetExceeded, InvalidRequest
from api.estimates import feasibility, planning
from api.estimates.service import slots
from api.models import Team
from api.pricing.catalog import Catalog, default_catalog
from api.pricing.preemption import Priors, default_priors
from api.settings import Settings, get_settings
from gpujobs.resources import FieldError
from gpujobs.spec import JobSpec


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

    def __call__(self, *, session: Session, team_id: str, spec: JobSpec, now: datetime) -> None:
        catalog = self._catalog or default_catalog()
        feasibility.check(spec, catalog, slots=lambda: slots(session, now=now))
        if spec.estimated_hours is None:
            return  # without a work estimate there is no cost to compare; the scheduler checks
        team = session.get(Team, team_id)
        team_name = team.name if team is not None else team_id
        remaining = remaining_usd(session, team_id=team_id, now=now)
        weighed = planning.weigh(
            session,
            spec=spec,
            team_id=team_id,
            team_name=team_name,
            now=now,
            catalog=catalog,
            priors=self._priors or default_priors(),
            settings=self._settings or get_settings(),
            remaining_budget=None,  # compared below, with the numbers in the message
        )
        if weighed.decision == "reject":
            raise InvalidRequest(
                f"capacity: {weighed.reason}",
                fields=[FieldError(field="capacity", reason=weighed.reason)],
            )
        if remaining is None:
            return
        # Waiting (no spot now): the cheapest plan it could be placed on is the least it costs.
        candidates = [w for w in weighed.plans if w.chosen] or weighed.plans
        if not candidates:
            return
        best = min(candidates, key=lambda w: (w.plan.expected_cost, w.plan.offer.key)).plan
        if best.expected_cost <= remaining + 1e-9:
            return
        if spec.capacity.on_budget_exceeded == "defer":
            return  # accepted as PENDING; the scheduler defers it until the budget allows
        reason = (
            f"the plan the scheduler would choose ({best.capacity_type} {best.nodes} x "
            f"{best.offer.instance_type} in {best.offer.zone}) is expected to cost "
            f"${best.expected_cost:,.2f}, more than team {team_name!r}'s remaining budget this "
            f"month (${remaining:,.2f}); set capacity.on_budget_exceeded: defer to wait for budget"
        )
        raise BudgetExceeded(reason, fields=[FieldError(field="capacity", reason=reason)])


default_admission = Admission()
