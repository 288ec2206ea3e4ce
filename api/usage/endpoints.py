"""/v1/usage: spend, savings, preemptions and budgets from the attempts ledger."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import BeforeValidator

from api.http import ERROR_RESPONSES, PrincipalDep, SessionDep
from api.usage import service
from gpujobs.usage import UsageGroupBy, UsageReport

RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _rfc3339(value: Any) -> Any:
    """Only full timestamps with a timezone: no epoch numbers, no local times."""
    if isinstance(value, str) and not RFC3339.match(value):
        raise ValueError("expected an RFC 3339 timestamp, e.g. 2025-03-01T00:00:00Z")
    return value


Timestamp = Annotated[datetime, BeforeValidator(_rfc3339)]

router = APIRouter(prefix="/v1/usage", tags=["usage"], responses=ERROR_RESPONSES)


@router.get("", response_model=UsageReport)
def usage(
    session: SessionDep,
    principal: PrincipalDep,
    from_: Annotated[
        Timestamp | None,
        Query(alias="from", description="Start (inclusive); default: this month's first day."),
    ] = None,
    to: Annotated[Timestamp | None, Query(description="End (exclusive); default: now.")] = None,
    group_by: Annotated[UsageGroupBy, Query(description="How to group the figures.")] = (
        UsageGroupBy.TEAM
    ),
) -> Response:
    report = service.report(session, principal=principal, start=from_, end=to, group_by=group_by)
    return Response(content=report.model_dump_json(by_alias=True), media_type="application/json")
