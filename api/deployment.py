"""/v1/deployment: what runs this API's jobs, so every client can say when placements and costs
are simulated (the local launcher) rather than cloud capacity."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from api.http import ERROR_RESPONSES, PrincipalDep, respond
from gpujobs.resources import Deployment

router = APIRouter(tags=["deployment"], responses=ERROR_RESPONSES)


@router.get("/v1/deployment", response_model=Deployment)
def deployment(request: Request, principal: PrincipalDep) -> Response:
    settings = request.app.state.settings
    simulated = settings.launcher_traits().simulated
    return respond(Deployment(launcher=settings.launcher, simulated=simulated))
