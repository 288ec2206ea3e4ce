"""Budgets: admins manage /v1/admin/teams/{team}/budget; a team reads its own at /v1/budget."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.budgets import service
from api.http import ERROR_RESPONSES, PrincipalDep, SessionDep, respond
from gpujobs.plans import BudgetUpdate
from gpujobs.usage import Budget

router = APIRouter(tags=["budgets"], responses=ERROR_RESPONSES)


@router.get("/v1/budget", response_model=Budget)
def own_budget(session: SessionDep, principal: PrincipalDep) -> Response:
    return respond(service.own_budget(session, principal=principal))


@router.put("/v1/admin/teams/{team}/budget", response_model=Budget, tags=["admin"])
def put_budget(
    team: str, body: BudgetUpdate, session: SessionDep, principal: PrincipalDep
) -> Response:
    budget = service.put_budget(
        session, principal=principal, team_name=team, monthly_usd=body.monthly_usd
    )
    session.commit()
    return respond(budget)


@router.get("/v1/admin/teams/{team}/budget", response_model=Budget, tags=["admin"])
def get_budget(team: str, session: SessionDep, principal: PrincipalDep) -> Response:
    return respond(service.get_budget(session, principal=principal, team_name=team))


@router.delete(
    "/v1/admin/teams/{team}/budget", status_code=204, response_class=Response, tags=["admin"]
)
def delete_budget(team: str, session: SessionDep, principal: PrincipalDep) -> Response:
    service.delete_budget(session, principal=principal, team_name=team)
    session.commit()
    return Response(status_code=204)
