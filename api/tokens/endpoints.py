"""/v1/admin/tokens and /v1/admin/teams/{team}/tokens: for the admin token only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Query, Request, Response

from api.http import (
    ERROR_RESPONSES,
    NO_STORE,
    NO_STORE_HEADER,
    PrincipalDep,
    SessionDep,
    respond,
)
from api.models import utcnow
from api.tokens import service
from gpujobs.spec import NAME_PATTERN
from gpujobs.tokens import IssuedToken, TokenInfo, TokenList, TokenRequest

router = APIRouter(tags=["admin"], responses=ERROR_RESPONSES)

TeamName = Annotated[str, Path(min_length=1, max_length=63, pattern=NAME_PATTERN)]
TokenId = Annotated[str, Path(min_length=36, max_length=36, pattern=r"^[0-9a-f-]{36}$")]


@router.get("/v1/admin/tokens", response_model=TokenList)
def list_tokens(
    session: SessionDep,
    principal: PrincipalDep,
    team: Annotated[str | None, Query(max_length=63, pattern=NAME_PATTERN)] = None,
    include_inactive: Annotated[
        bool, Query(description="Also revoked and expired tokens.")
    ] = False,
    limit: Annotated[int, Query(ge=1, le=service.MAX_LISTING)] = service.MAX_LISTING,
) -> Response:
    listing = service.list_tokens(
        session,
        principal=principal,
        now=utcnow(),
        team_name=team,
        include_inactive=include_inactive,
        limit=limit,
    )
    return respond(listing)


@router.post(
    "/v1/admin/teams/{team}/tokens",
    status_code=201,
    response_model=IssuedToken,
    responses={
        201: {"description": "The token in clear, shown this once.", "headers": NO_STORE_HEADER}
    },
)
def create_token(
    team: TeamName,
    session: SessionDep,
    principal: PrincipalDep,
    body: Annotated[TokenRequest | None, Body()] = None,
) -> Response:
    body = body or TokenRequest()
    issued = service.create_token(
        session,
        principal=principal,
        team_name=team,
        now=utcnow(),
        name=body.name,
        expires_in_seconds=body.expires_in_seconds,
    )
    session.commit()
    return respond(issued, status_code=201, headers=NO_STORE)


@router.delete("/v1/admin/tokens/{token_id}", response_model=TokenInfo)
def revoke_token(
    request: Request, token_id: TokenId, session: SessionDep, principal: PrincipalDep
) -> Response:
    revoked = service.revoke_token(session, principal=principal, token_id=token_id, now=utcnow())
    session.commit()
    request.app.state.principals.clear()  # refused from the next request on, here at least
    return respond(revoked)
