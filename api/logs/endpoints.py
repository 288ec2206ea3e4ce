"""GET /v1/jobs/{id}/logs: every attempt's output in order; `?follow=true` streams until the end.

The API reads logs through a `LogReader` installed by the composition root (the launcher's
`logs`), so `api` stays free of launcher code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Annotated

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session, sessionmaker

from api.errors import DomainError
from api.http import ERROR_RESPONSES, PrincipalDep, SessionDep
from api.jobs import repository, service
from api.models import Job, JobAttempt
from gpujobs.resources import ErrorBody, JobStatus

LogReader = Callable[..., Iterator[str]]  # (handle, *, follow) -> chunks of text

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERROR_RESPONSES)


class LogsUnavailable(DomainError):
    status_code = 501
    code = "logs_unavailable"


@router.get(
    "/{job_id}/logs",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "Each attempt's output after a `=== attempt N: ... ===` line.",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        501: {"model": ErrorBody, "description": "This API process has no log reader."},
    },
)
def job_logs(
    request: Request,
    job_id: str,
    session: SessionDep,
    principal: PrincipalDep,
    follow: Annotated[bool, Query(description="Keep streaming until the job ends.")] = False,
) -> StreamingResponse:
    job_id = service.get(session, principal=principal, job_id=job_id).id
    # The request's session lives until the stream ends: end its transaction now, so a long
    # stream holds no database lock (SQLite's is database-wide).
    session.rollback()
    reader: LogReader | None = request.app.state.logs
    if reader is None:
        raise LogsUnavailable("this API process has no log reader (run it from the worker)")
    stream = _stream(
        request=request,
        factory=request.app.state.session_factory,
        reader=reader,
        job_id=job_id,
        follow=follow,
    )
    return StreamingResponse(stream, media_type="text/plain; charset=utf-8")


async def _stream(
    *,
    request: Request,
    factory: sessionmaker[Session],
    reader: LogReader,
    job_id: str,
    follow: bool,
) -> AsyncIterator[str]:
    """Blocking reads go to worker threads one chunk at a time and waits are async sleeps, so a
    follower holds no thread while nothing happens and stops when its client goes away."""
    shown: set[str] = set()
    while True:
        attempts, job = await anyio.to_thread.run_sync(_load, factory, job_id)
        for attempt in attempts:
            if attempt.id in shown or attempt.launch_handle is None:
                continue
            shown.add(attempt.id)
            yield _header(attempt)
            live = follow and attempt.ended_at is None
            chunks = reader(attempt.launch_handle, follow=live)
            while (chunk := await anyio.to_thread.run_sync(next, chunks, None)) is not None:
                yield chunk
                if await request.is_disconnected():
                    return
        if not follow or job is None or JobStatus(job.status).terminal:
            return
        if await request.is_disconnected():
            return
        await anyio.sleep(1.0)


def _load(factory: sessionmaker[Session], job_id: str) -> tuple[list[JobAttempt], Job | None]:
    with factory() as session:
        return (
            repository.attempts(session, job_id=job_id),
            repository.get(session, job_id=job_id, team_id=None),
        )


def _header(attempt: JobAttempt) -> str:
    return (
        f"=== attempt {attempt.number}: {attempt.capacity_type} {attempt.instance_type} "
        f"in {attempt.zone} ===\n"
    )
