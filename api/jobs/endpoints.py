"""/v1/jobs: thin handlers that parse, authorize, call the service and commit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from sqlalchemy.orm import Session

from api.auth import Principal
from api.http import ERROR_RESPONSES, PrincipalDep, SessionDep, respond
from api.jobs import service, views
from api.models import Job, utcnow
from gpujobs import resources as r
from gpujobs.runtime import StandbyAnswer, StandbyCall
from gpujobs.spec import JobSpec

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERROR_RESPONSES)


def _views(session: Session, rows: Sequence[Job], principal: Principal) -> list[r.Job]:
    """Jobs with their placement and cost so far, one query for any number of them."""
    spends = service.spends(session, jobs=rows)
    return [views.job(row, spends[row.id], team_name=_team_name(row, principal)) for row in rows]


def _view(session: Session, row: Job, principal: Principal) -> r.Job:
    return _views(session, [row], principal)[0]


def _team_name(row: Job, principal: Principal) -> str:
    # The caller's own team is known from its token: a job just inserted has no team loaded.
    return principal.team_name if row.team_id == principal.team_id else row.team.name


_LOCATION = {"description": "The job's URL.", "schema": {"type": "string"}}
_SUBMIT_RESPONSES: dict[int | str, dict[str, object]] = {
    201: {"description": "The job was created.", "headers": {"Location": _LOCATION}},
    200: {
        "model": r.Job,
        "description": "An idempotent replay: the job first created with this Idempotency-Key.",
        "headers": {
            "Location": _LOCATION,
            "Idempotent-Replayed": {
                "description": "Always `true`: nothing new was created.",
                "schema": {"type": "string", "enum": ["true"]},
            },
        },
    },
}


@router.post("", status_code=201, response_model=r.Job, responses=_SUBMIT_RESPONSES)
def submit_job(
    request: Request,
    spec: JobSpec,
    session: SessionDep,
    principal: PrincipalDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=255,
            description="Retrying a POST with the same key returns the same job.",
        ),
    ] = None,
) -> Response:
    submitted = service.submit(
        session,
        principal=principal,
        spec=spec,
        idempotency_key=idempotency_key,
        admission=request.app.state.admission,
        workload_prefixes=request.app.state.settings.workload_prefixes_for(principal.team_name),
        settings=request.app.state.settings,
    )
    body = _view(session, submitted.job, principal)
    session.commit()
    if submitted.created:
        request.app.state.nudge("schedule", submitted.job.id)
    headers = {"Location": f"/v1/jobs/{submitted.job.id}"}
    if not submitted.created:
        headers["Idempotent-Replayed"] = "true"
    return respond(body, status_code=201 if submitted.created else 200, headers=headers)


@router.get("", response_model=r.Page[r.Job])
def list_jobs(
    session: SessionDep,
    principal: PrincipalDep,
    status: Annotated[list[r.JobStatus] | None, Query(description="Filter by status.")] = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> Response:
    rows, next_cursor = service.list_jobs(
        session, principal=principal, statuses=status or [], cursor=cursor, limit=limit
    )
    page = r.Page[r.Job](items=_views(session, rows, principal), next_cursor=next_cursor)
    return respond(page)


@router.get("/{job_id}", response_model=r.Job)
def get_job(job_id: str, session: SessionDep, principal: PrincipalDep) -> Response:
    return respond(
        _view(session, service.get(session, principal=principal, job_id=job_id), principal)
    )


@router.post("/{job_id}/cancel", response_model=r.Job)
def cancel_job(
    request: Request, job_id: str, session: SessionDep, principal: PrincipalDep
) -> Response:
    job = service.cancel(session, principal=principal, job_id=job_id)
    body = _view(session, job, principal)
    session.commit()
    request.app.state.principals.clear()  # the job's token was revoked with the cancel
    request.app.state.nudge("reconcile", job.id)
    return respond(body)


@router.get("/{job_id}/events", response_model=list[r.JobEvent])
def job_events(job_id: str, session: SessionDep, principal: PrincipalDep) -> Response:
    rows = service.events(session, principal=principal, job_id=job_id)
    return respond([views.event(row) for row in rows])


@router.get("/{job_id}/attempts", response_model=list[r.JobAttempt])
def job_attempts(job_id: str, session: SessionDep, principal: PrincipalDep) -> Response:
    rows = service.attempts(session, principal=principal, job_id=job_id)
    return respond([views.attempt(row) for row in rows])


@router.post("/{job_id}/progress", response_model=r.Job)
def report_progress(
    job_id: str,
    report: r.ProgressReport,
    session: SessionDep,
    principal: PrincipalDep,
) -> Response:
    job = service.report_progress(
        session,
        principal=principal,
        job_id=job_id,
        report=report,
        now=utcnow(),
    )
    body = _view(session, job, principal)
    session.commit()
    return respond(body)


@router.post("/{job_id}/standby", response_model=StandbyAnswer)
def standby(
    request: Request, job_id: str, call: StandbyCall, session: SessionDep, principal: PrincipalDep
) -> Response:
    """A standby's trainer asks whether to go (make-before-break): `wait` while the running
    attempt trains, `go` once it has checkpointed and ended, `stop` if it is no longer wanted."""
    answer, ready = service.standby_answer(
        session, principal=principal, job_id=job_id, call=call, now=utcnow()
    )
    session.commit()
    if ready:
        request.app.state.nudge("reconcile", job_id)  # the handover can begin
    return respond(answer)
