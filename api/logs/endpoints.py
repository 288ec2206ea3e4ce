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
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker
from starlette.background import BackgroundTask

from api.database import read_session
from api.errors import DomainError
from api.http import ERROR_RESPONSES, PrincipalDep, SessionDep
from api.jobs import repository, service
from api.logs.followers import Followers, Lease
from api.models import Job, JobAttempt
from gpujobs.resources import ErrorBody, JobStatus

LogReader = Callable[..., Iterator[str]]  # (handle, *, follow) -> chunks of text
POLL_S = 1.0
LOAD_RETRIES = 5
# Log reads run in threads of their own, a few at a time, so followers never take the threads
# that requests need.
READ_THREADS = 6

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
        429: {"model": ErrorBody, "description": "Too many followed streams for this team."},
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
    job = service.get(session, principal=principal, job_id=job_id)
    job_id, team_id = job.id, job.team_id
    # The request's session lives until the stream ends: end its transaction now, so a long
    # stream holds no connection.
    session.rollback()
    reader: LogReader | None = request.app.state.logs
    if reader is None:
        raise LogsUnavailable("this API process has no log reader (run it from the worker)")
    followers: Followers = request.app.state.log_followers
    lease = followers.take(team_id=team_id) if follow else None
    stream = _stream(
        request=request,
        factory=request.app.state.session_factory,
        reader=reader,
        job_id=job_id,
        follow=follow,
        lease=lease,
    )
    return StreamingResponse(
        stream,
        media_type="text/plain; charset=utf-8",
        background=BackgroundTask(lease.release) if lease else None,
    )


_limiter: anyio.CapacityLimiter | None = None


def _read_threads() -> anyio.CapacityLimiter:
    global _limiter
    if _limiter is None:
        _limiter = anyio.CapacityLimiter(READ_THREADS)
    return _limiter


async def _stream(
    *,
    request: Request,
    factory: sessionmaker[Session],
    reader: LogReader,
    job_id: str,
    follow: bool,
    lease: Lease | None,
) -> AsyncIterator[str]:
    """A follower polls: each pass reads what is new, one chunk per thread hop, then waits with
    an async sleep. So an idle follower holds no thread and no connection, and a disconnect
    (noticed while waiting, or by the server cancelling the stream) ends it."""
    sent: dict[str, int] = {}  # attempt id -> characters already streamed
    failures = 0
    finished: set[str] = set()  # attempts whose whole log has been streamed
    limiter = _read_threads()
    try:
        while True:
            try:
                attempts, job = await anyio.to_thread.run_sync(
                    _load, factory, job_id, limiter=limiter
                )
                failures = 0
            except sa_exc.OperationalError:
                # The database dropped the connection (a restart): the headers are sent, so
                # there is no 503 to give; try again at the next poll, a few times.
                failures += 1
                if failures > LOAD_RETRIES:
                    raise
                await anyio.sleep(POLL_S)
                continue
            for attempt in attempts:
                if attempt.launch_handle is None or attempt.id in finished:
                    continue
                if attempt.id not in sent:
                    sent[attempt.id] = 0
                    yield _header(attempt)
                # Read without the reader's own follow (it would block a thread while idle);
                # what was already streamed is skipped.
                async for new in _unsent(reader(attempt.launch_handle, follow=False),
                                         skip=sent[attempt.id], limiter=limiter):  # fmt: skip
                    sent[attempt.id] += len(new)
                    yield new
                if attempt.ended_at is not None:
                    finished.add(attempt.id)  # closed only once its processes were gone
            if not follow or job is None or JobStatus(job.status).terminal:
                return
            for _ in range(int(POLL_S / 0.25)):
                if await request.is_disconnected():
                    return
                await anyio.sleep(0.25)
    finally:
        if lease is not None:
            lease.release()


async def _unsent(
    chunks: Iterator[str], *, skip: int, limiter: anyio.CapacityLimiter
) -> AsyncIterator[str]:
    """The text after the first `skip` characters, a thread hop per chunk."""
    while (
        chunk := await anyio.to_thread.run_sync(next, chunks, None, limiter=limiter)
    ) is not None:
        if len(chunk) <= skip:
            skip -= len(chunk)
            continue
        yield chunk[skip:]
        skip = 0


def _load(factory: sessionmaker[Session], job_id: str) -> tuple[list[JobAttempt], Job | None]:
    with read_session(factory) as session:
        return (
            repository.attempts(session, job_id=job_id),
            repository.get(session, job_id=job_id, team_id=None),
        )


def _header(attempt: JobAttempt) -> str:
    return (
        f"=== attempt {attempt.number}: {attempt.capacity_type} {attempt.instance_type} "
        f"in {attempt.zone} ===\n"
    )
