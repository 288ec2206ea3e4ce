"""/v1/estimate: price a spec without submitting it."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from api.estimates import service
from api.http import ERROR_RESPONSES, PrincipalDep, respond
from api.team_places import TeamPlaces
from gpujobs.plans import Estimate
from gpujobs.resources import ErrorBody
from gpujobs.spec import JobSpec

router = APIRouter(prefix="/v1/estimate", tags=["estimates"], responses=ERROR_RESPONSES)


@router.post(
    "",
    response_model=Estimate,
    responses={
        429: {
            "model": ErrorBody,
            "description": "This team has `estimates_per_team` estimates computing; retry after "
            "`Retry-After` seconds.",
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
        }
    },
)
def estimate(request: Request, spec: JobSpec, principal: PrincipalDep) -> Response:
    team = principal.team_name if principal.team_id else ""  # the admin token has no team
    settings = request.app.state.settings
    # A long estimate computes for seconds while it holds an admission place: a team's few.
    places: TeamPlaces = request.app.state.estimates
    lease = places.take(team_id=principal.team_id)
    try:
        estimated = service.estimate(
            # Not the request's session: the estimate reads, closes its own, then computes.
            request.app.state.session_factory,
            principal=principal,
            spec=spec,
            workload_prefixes=settings.workload_prefixes_for(team),
            settings=settings,
        )
    finally:
        lease.release()
    return respond(estimated)
