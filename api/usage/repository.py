"""Every query the usage report's ledger needs: attempts overlapping a period. (Its budgets are
`api.budgets.service.budgets`.)"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from api.models import Job, JobAttempt, Team
from api.usage.ledger import LedgerRow
from gpujobs.reasons import EndReason


def ledger_rows(
    session: Session, *, team_id: str | None, start: datetime, end: datetime
) -> list[LedgerRow]:
    """Attempts that ran during [start, end), or were preempted in it (None team_id = all)."""
    ran = and_(
        JobAttempt.started_at.is_not(None),
        JobAttempt.started_at < end,
        or_(JobAttempt.ended_at.is_(None), JobAttempt.ended_at >= start),
    )
    preempted_before_start = and_(
        JobAttempt.started_at.is_(None),
        JobAttempt.end_reason == EndReason.PREEMPTED,
        JobAttempt.ended_at >= start,
        JobAttempt.ended_at < end,
    )
    query = (
        select(JobAttempt, Job.name, Team.name)
        .join(Job, Job.id == JobAttempt.job_id)
        .join(Team, Team.id == JobAttempt.team_id)
        .where(or_(ran, preempted_before_start))
        .order_by(JobAttempt.id)
    )
    if team_id is not None:
        query = query.where(JobAttempt.team_id == team_id)
    return [
        LedgerRow(
            team=team_name,
            job_id=attempt.job_id,
            job_name=job_name,
            placement=attempt.placement,
            started_at=attempt.started_at,
            ended_at=attempt.ended_at,
            end_reason=attempt.end_reason,
            cost_microusd=attempt.cost_microusd,
            resume_from_step=attempt.resume_from_step,
            end_step=attempt.end_step,
            steps_lost=attempt.steps_lost,
            checkpoint_every_seconds=attempt.checkpoint_every_seconds,
        )
        for attempt, job_name, team_name in session.execute(query)
    ]
