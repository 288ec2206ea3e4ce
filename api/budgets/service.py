"""Budget use cases: admins set a team's monthly budget; teams read theirs; admission and the
scheduler ask `remaining_usd`."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from api.auth import Principal
from api.budgets import repository
from api.budgets.spend import charge_cost_to, spent_microusd
from api.errors import Forbidden, NotFound
from api.models import Team, utcnow
from api.money import MICRO, month_start
from api.teams.service import get_by_name
from gpujobs.plans import Budget


def spent_this_month(session: Session, *, team_id: str, now: datetime) -> int:
    """Micro-dollars the team has spent this calendar month (UTC) up to `now`."""
    now = now.astimezone(UTC)
    start = month_start(now)
    charges = repository.charges(session, team_id=team_id, start=start, end=now)
    return spent_microusd(charges, start=start, now=now)


def outstanding_holds(session: Session, *, team_id: str, now: datetime) -> dict[str, int]:
    """Per unfinished job that holds budget: its hold less what it has spent so far (never below
    zero). The hold shrinks as the job runs and is gone when it ends."""
    holds = repository.holds(session, team_id=team_id)
    charges = repository.job_charges(session, job_ids=list(holds))
    return {
        job_id: max(0, hold - sum(charge_cost_to(c, now, now=now) for c in charges[job_id]))
        for job_id, hold in holds.items()
    }


def remaining_usd(session: Session, *, team_id: str, now: datetime) -> float | None:
    """The team's monthly budget minus this month's spend (ended attempts' recorded cost plus
    running attempts accrued to `now`) minus what unfinished jobs still hold of it; None when
    the team has no budget. May be negative."""
    budget = repository.get(session, team_id=team_id)
    if budget is None:
        return None
    spent = spent_this_month(session, team_id=team_id, now=now)
    held = sum(outstanding_holds(session, team_id=team_id, now=now).values())
    return (budget.monthly_microusd - spent - held) / MICRO


def status(session: Session, *, team: Team, now: datetime | None = None) -> Budget:
    now = (now or utcnow()).astimezone(UTC)
    budget = repository.get(session, team_id=team.id)
    spent = spent_this_month(session, team_id=team.id, now=now)
    held = sum(outstanding_holds(session, team_id=team.id, now=now).values())
    monthly = None if budget is None else budget.monthly_microusd
    return Budget(
        team=team.name,
        month_start=month_start(now),
        monthly_usd=None if monthly is None else monthly / MICRO,
        spent_usd=spent / MICRO,
        held_usd=held / MICRO,
        remaining_usd=None if monthly is None else (monthly - spent - held) / MICRO,
    )


def _admin_team(session: Session, *, principal: Principal, team_name: str) -> Team:
    principal.require_team_token()
    principal.require_admin()
    team = get_by_name(session, name=team_name)
    if team is None:
        raise NotFound(f"team {team_name!r} not found")
    return team


def put_budget(
    session: Session, *, principal: Principal, team_name: str, monthly_usd: float
) -> Budget:
    team = _admin_team(session, principal=principal, team_name=team_name)
    repository.put(session, team_id=team.id, monthly_microusd=round(monthly_usd * MICRO))
    return status(session, team=team)


def get_budget(session: Session, *, principal: Principal, team_name: str) -> Budget:
    return status(session, team=_admin_team(session, principal=principal, team_name=team_name))


def delete_budget(session: Session, *, principal: Principal, team_name: str) -> None:
    """Remove the cap (idempotent): the team is no longer limited."""
    team = _admin_team(session, principal=principal, team_name=team_name)
    repository.delete(session, team_id=team.id)


def own_budget(session: Session, *, principal: Principal) -> Budget:
    principal.require_team_token()
    team = session.get(Team, principal.team_id) if principal.team_id else None
    if team is None:
        raise Forbidden("this token belongs to no team; admins read /v1/admin/teams/{team}/budget")
    return status(session, team=team)
