"""/v1/admin/teams: the operator creates teams over HTTP, e.g. the first one of a deployment."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.http import (
    ERROR_RESPONSES,
    NO_STORE,
    NO_STORE_HEADER,
    PrincipalDep,
    SessionDep,
    respond,
)
from api.models import utcnow
from api.teams import service
from gpujobs.resources import ErrorBody
from gpujobs.tokens import CreatedTeam, TeamList, TeamRequest

router = APIRouter(prefix="/v1/admin/teams", tags=["admin"], responses=ERROR_RESPONSES)


@router.post(
    "",
    status_code=201,
    response_model=CreatedTeam,
    responses={
        201: {
            "description": "The team and its first token in clear, shown this once.",
            "headers": NO_STORE_HEADER,
        },
        409: {"model": ErrorBody, "description": "A team with this name exists."},
    },
)
def create_team(body: TeamRequest, session: SessionDep, principal: PrincipalDep) -> Response:
    created = service.create(
        session,
        principal=principal,
        name=body.name,
        now=utcnow(),
        token_name=body.token.name,
        expires_in_seconds=body.token.expires_in_seconds,
    )
    session.commit()
    return respond(created, status_code=201, headers=NO_STORE)


@router.get("", response_model=TeamList)
def list_teams(session: SessionDep, principal: PrincipalDep) -> Response:
    return respond(service.list_teams(session, principal=principal))
