"""The usage report: who may see what, the period's defaults, and the month's budgets."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from api.auth import Principal
from api.budgets import service as budgets
from api.errors import InvalidRequest
from api.models import utcnow
from api.money import month_start
from api.usage import repository
from api.usage.ledger import aggregate
from gpujobs.resources import FieldError
from gpujobs.usage import UsageGroupBy, UsageReport


def _aware(value: datetime, field: str) -> datetime:
    """Query datetimes without a timezone are read as UTC."""
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:
        raise InvalidRequest(
            f"`{field}` is out of range", fields=[FieldError(field=field, reason="out of range")]
        ) from None


def report(
    session: Session,
    *,
    principal: Principal,
    start: datetime | None,
    end: datetime | None,
    group_by: UsageGroupBy,
    now: datetime | None = None,
) -> UsageReport:
    """Usage in [start, end) (default: this calendar month so far), one team or, for admins, all."""
    principal.require_team_token()
    now = now or utcnow()
    start = _aware(start, "from") if start is not None else month_start(now)
    end = _aware(end, "to") if end is not None else now
    if start >= end:
        raise InvalidRequest(
            "`from` must be before `to`",
            fields=[FieldError(field="from", reason="must be before `to`")],
        )
    team_id = None if principal.is_admin else principal.team_id
    rows = repository.ledger_rows(session, team_id=team_id, start=start, end=end)
    groups, total = aggregate(rows, start=start, end=end, now=now, group_by=group_by)
    return UsageReport(
        from_=start,
        to=end,
        group_by=group_by,
        generated_at=now,
        groups=groups,
        total=total,
        budgets=budgets.budgets(session, team_id=team_id, now=now),
    )
