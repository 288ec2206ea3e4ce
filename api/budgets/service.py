"""Budget use cases: admins set a team's monthly budget; teams read theirs; the usage report
lists them; admission and the scheduler ask `remaining_usd`; the reconciler reads
`running_ledgers` to stop running jobs that would pass it (api.budgets.enforcement). All of them
go through the same holds and spend."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from api.auth import Principal
from api.budgets import repository
from api.budgets.enforcement import (
    CHECK_TICKS,
    OnBudgetExceeded,
    RunningJob,
    TeamLedger,
    running_hold,
    tick_us,
)
from api.budgets.spend import charge_cost_to, spent_microusd
from api.errors import Forbidden, NotFound
from api.models import Team, utcnow
from api.money import MICRO, microusd_per_hour, month_start
from api.settings import get_settings
from api.teams.service import get_by_name
from gpujobs.spec import JobSpec
from gpujobs.usage import Budget


def commitment_us(reconcile_interval_s: float | None = None) -> int:
    """How long a running job's burn is held for (api.budgets.enforcement), in microseconds:
    CHECK_TICKS reconcile ticks of the given interval (default: the settings')."""
    if reconcile_interval_s is None:
        reconcile_interval_s = get_settings().reconcile_interval_s
    return CHECK_TICKS * tick_us(reconcile_interval_s)


def _job_money(
    session: Session, *, job_ids: list[str], now: datetime
) -> dict[str, tuple[int, int]]:
    """Job id -> (micro-dollars all its attempts spent up to `now`, micro-dollars an hour its
    running attempts burn)."""
    charges = repository.job_charges(session, job_ids=job_ids)
    return {
        job_id: (
            sum(charge_cost_to(c, now, now=now) for c in found),
            sum(microusd_per_hour(c.price_per_hour) for c in found if c.ended_at is None),
        )
        for job_id, found in charges.items()
    }


def _outstanding(
    session: Session, *, team_id: str | None, now: datetime, horizon_us: int
) -> list[tuple[str, str, int]]:
    """(team id, job id, micro-dollars) per unfinished job that holds budget or runs: its hold
    less what it has spent so far, and while it runs never less than its burn over `horizon_us`
    (enforcement.running_hold). The quote's part shrinks as the job runs; all is gone when it
    ends."""
    committing = repository.commitments(session, team_id=team_id)
    money = _job_money(session, job_ids=list(committing), now=now)
    return [
        (
            owner,
            job_id,
            running_hold(
                hold_microusd=hold,
                spent_microusd=money[job_id][0],
                burn_microusd_per_hour=money[job_id][1],
                horizon_us=horizon_us,
            ),
        )
        for job_id, (owner, hold) in committing.items()
    ]


def outstanding_holds(
    session: Session, *, team_id: str, now: datetime, horizon_us: int | None = None
) -> dict[str, int]:
    """Job id -> what it still holds of the team's budget."""
    horizon = commitment_us() if horizon_us is None else horizon_us
    found = _outstanding(session, team_id=team_id, now=now, horizon_us=horizon)
    return {job_id: held for _, job_id, held in found}


def _month_spend(session: Session, *, team_id: str | None, now: datetime) -> dict[str, int]:
    """Team id -> this month's spend up to `now` (ended attempts' recorded cost plus running
    attempts accrued, by `api.budgets.spend`'s rule)."""
    first = month_start(now)
    charges = repository.charges(session, team_id=team_id, start=first, end=now)
    return {owner: spent_microusd(found, start=first, now=now) for owner, found in charges.items()}


def budgets(
    session: Session, *, team_id: str | None, now: datetime, horizon_us: int | None = None
) -> list[Budget]:
    """One team's (or, None, every team's) budget in the calendar month (UTC) of `now`, by team
    name: the monthly cap, this month's spend up to `now` and what unfinished jobs still hold
    (running ones at least their burn until the next checks, `horizon_us`, default
    `commitment_us()`). Every budget route, the usage report, admission, the scheduler and the
    reconciler's enforcement read budgets here."""
    now = now.astimezone(UTC)
    horizon = commitment_us() if horizon_us is None else horizon_us
    spent = _month_spend(session, team_id=team_id, now=now)
    held: dict[str, int] = defaultdict(int)
    for owner, _, amount in _outstanding(session, team_id=team_id, now=now, horizon_us=horizon):
        held[owner] += amount
    return [
        Budget(
            team=name,
            month_start=month_start(now),
            monthly_microusd=monthly,
            spent_microusd=spent.get(id_, 0),
            held_microusd=held[id_],
        )
        for id_, name, monthly in repository.teams(session, team_id=team_id)
    ]


def running_ledgers(session: Session, *, now: datetime, horizon_us: int) -> list[TeamLedger]:
    """What budget enforcement decides on: every team that has a budget and runs jobs, with its
    spend this month, what its other unfinished jobs hold, and its running jobs."""
    now = now.astimezone(UTC)
    running = repository.running_under_budget(session)
    money = _job_money(session, job_ids=[r.job_id for r in running], now=now)
    by_team: dict[str, list[repository.Running]] = defaultdict(list)
    for row in running:
        by_team[row.team_id].append(row)
    ledgers = []
    for team_id, rows in by_team.items():
        ids = {row.job_id for row in rows}
        outstanding = _outstanding(session, team_id=team_id, now=now, horizon_us=horizon_us)
        ledgers.append(
            TeamLedger(
                team_id=team_id,
                team_name=rows[0].team_name,
                budget_microusd=rows[0].budget_microusd,
                spent_microusd=_month_spend(session, team_id=team_id, now=now).get(team_id, 0),
                waiting_held_microusd=sum(a for _, job_id, a in outstanding if job_id not in ids),
                running=tuple(
                    RunningJob(
                        job_id=row.job_id,
                        priority=row.priority,
                        started_at=row.started_at,
                        burn_microusd_per_hour=money[row.job_id][1],
                        spent_microusd=money[row.job_id][0],
                        hold_microusd=row.hold_microusd,
                        on_budget_exceeded=_on_budget_exceeded(row.spec),
                        stopping=row.stopping,
                    )
                    for row in rows
                ),
            )
        )
    return ledgers


def _on_budget_exceeded(spec: dict[str, Any]) -> OnBudgetExceeded:
    """The job's choice; a spec that no longer loads is stopped, never left to spend on."""
    try:
        return JobSpec.from_stored(spec).capacity.on_budget_exceeded
    except ValidationError:
        return "reject"


def remaining_usd(
    session: Session, *, team_id: str, now: datetime, horizon_us: int | None = None
) -> float | None:
    """The team's monthly budget minus this month's spend minus what unfinished jobs still hold
    of it; None when the team has no budget. May be negative."""
    if repository.get(session, team_id=team_id) is None:
        return None  # the common case skips the spend queries
    found = budgets(session, team_id=team_id, now=now, horizon_us=horizon_us)
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
