"""Budget use cases: admins set a team's monthly budget; teams read theirs; the usage report
lists them; admission and the scheduler ask `remaining_usd`. All of them go through `budgets`."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from api.auth import Principal
from api.budgets import repository
from api.budgets.spend import charge_cost_to, spent_microusd
from api.errors import Forbidden, NotFound
from api.models import Team, utcnow
from api.money import MICRO, month_start
from api.teams.service import get_by_name
from gpujobs.usage import Budget


def _outstanding(
    session: Session, *, team_id: str | None, now: datetime
) -> list[tuple[str, str, int]]:
    """(team id, job id, micro-dollars) per unfinished job that holds budget: its hold less what
    it has spent so far (never below zero). The hold shrinks as the job runs and is gone when it
    ends."""
    holds = repository.holds(session, team_id=team_id)
    charges = repository.job_charges(session, job_ids=list(holds))
    return [
        (
            owner,
            job_id,
            max(0, hold - sum(charge_cost_to(c, now, now=now) for c in charges[job_id])),
        )
        for job_id, (owner, hold) in holds.items()
    ]


def outstanding_holds(session: Session, *, team_id: str, now: datetime) -> dict[str, int]:
    """Job id -> what it still holds of the team's budget."""
    return {job_id: held for _, job_id, held in _outstanding(session, team_id=team_id, now=now)}


def budgets(session: Session, *, team_id: str | None, now: datetime) -> list[Budget]:
    """One team's (or, None, every team's) budget in the calendar month (UTC) of `now`, by team
    name: the monthly cap, this month's spend up to `now` (ended attempts' recorded cost plus
    running attempts accrued, by `api.budgets.spend`'s rule) and what unfinished jobs still hold.
    Every budget route, the usage report, admission and the scheduler read budgets here."""
    now = now.astimezone(UTC)
    first = month_start(now)
    charges = repository.charges(session, team_id=team_id, start=first, end=now)
    held: dict[str, int] = defaultdict(int)
    for owner, _, amount in _outstanding(session, team_id=team_id, now=now):
        held[owner] += amount
    return [
        Budget(
            team=name,
            month_start=first,
            monthly_microusd=monthly,
            spent_microusd=spent_microusd(charges.get(id_, []), start=first, now=now),
            held_microusd=held[id_],
        )
        for id_, name, monthly in repository.teams(session, team_id=team_id)
    ]


def remaining_usd(session: Session, *, team_id: str, now: datetime) -> float | None:
    """The team's monthly budget minus this month's spend minus what unfinished jobs still hold
    of it; None when the team has no budget. May be negative."""
    if repository.get(session, team_id=team_id) is None:
        return None  # the common case skips the spend queries
    found = budgets(session, team_id=team_id, now=now)
    return found[0].remaining_usd if found else None


def status(session: Session, *, team: Team, now: datetime | None = None) -> Budget:
    (budget,) = budgets(session, team_id=team.id, now=now or utcnow())
    return budget


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
