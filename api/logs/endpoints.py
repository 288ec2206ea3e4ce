"""GET /v1/jobs/{id}/logs: every attempt's output in order; `?follow=true` streams until the end,
`?tail=N` starts each attempt's output N bytes before its end. Output of two attempts at once (a
standby beside the running attempt) comes as it is written, each stretch under its attempt's
header.

The API reads logs through a `LogReader` (api.logs.reader) installed by the composition root,
so `api` stays free of launcher code. A log is as large as a trainer makes it: it is streamed a
bounded chunk at a time, and a follower reads only what is new since its last pass.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator, Iterator
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
from api.logs.reader import LogChunk, LogReader
from api.models import AttemptRole, Job, JobAttempt
from api.team_places import Lease, TeamPlaces
from gpujobs.resources import ErrorBody, JobStatus

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
            "description": "Each attempt's output after a `=== attempt N: ... ===` line, "
            "given again where another attempt's output came in between (a standby's).",
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
    tail: Annotated[
        int | None,
        Query(
            ge=1,
            description="Only the end of each attempt's output: start this many bytes "
            "before the end it has when first read.",
        ),
    ] = None,
) -> StreamingResponse:
    job = service.get(session, principal=principal, job_id=job_id)
    job_id, team_id = job.id, job.team_id
    # The request's session lives until the stream ends: end its transaction now, so a long
    # stream holds no connection.
    session.rollback()
    reader: LogReader | None = request.app.state.logs
    if reader is None:
        raise LogsUnavailable("this API process has no log reader (run it from the worker)")
    followers: TeamPlaces = request.app.state.log_followers
    lease = followers.take(team_id=team_id) if follow else None
    stream = _stream(
        request=request,
        factory=request.app.state.session_factory,
        reader=reader,
        job_id=job_id,
        follow=follow,
        tail=tail,
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
    tail: int | None,
    lease: Lease | None,
) -> AsyncIterator[str]:
    """A follower polls: each pass reads what is new, one chunk per thread hop, then waits with
    an async sleep. So an idle follower holds no thread and no connection, and a disconnect
    (noticed while waiting, or by the server cancelling the stream) ends it."""
    logs: dict[str, _AttemptLog] = {}  # attempt id -> where its streaming stands
    shown = _Shown()
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
                if attempt.id not in logs:
                    logs[attempt.id] = _AttemptLog(offset=-tail if tail else 0)
                    yield shown.switch(attempt)
                log = logs[attempt.id]
                chunks = reader(attempt.launch_handle, offset=log.offset)
                async for chunk in _chunks(chunks, limiter=limiter):
                    if text := log.take(chunk):
                        yield shown.switch(attempt) + shown.wrote(text)
                # Nothing read from an offset before the end: the log is empty so far, so its
                # tail is too, and everything written from now on is new.
                log.offset = max(log.offset, 0)
                if attempt.ended_at is not None or not follow:
                    # Closed only once its processes were gone: its log is whole.
                    finished.add(attempt.id)
                    if text := log.close():
                        yield shown.switch(attempt) + shown.wrote(text)
            if not follow or job is None or JobStatus(job.status).terminal:
                return
            for _ in range(int(POLL_S / 0.25)):
                if await request.is_disconnected():
                    return
                await anyio.sleep(0.25)
    finally:
        if lease is not None:
            lease.release()


class _Shown:
    """Whose output the stream shows: each attempt's follows its `=== attempt N ===` line, given
    again wherever another attempt's output came in between (a standby's beside the running
    attempt's, while a follower polls both), on a line of its own."""

    def __init__(self) -> None:
        self.attempt: str | None = None
        self.mid_line = False

    def switch(self, attempt: JobAttempt) -> str:
        """What to stream before `attempt`'s output: nothing while it is the one shown."""
        if attempt.id == self.attempt:
            return ""
        end = "\n" if self.mid_line else ""
        self.attempt, self.mid_line = attempt.id, False
        return end + _header(attempt)

    def wrote(self, text: str) -> str:
        self.mid_line = not text.endswith("\n")
        return text


class _AttemptLog:
    """Where an attempt's log stands in a stream: the next byte to read, and the decoder that
    holds a character split between two reads."""

    def __init__(self, *, offset: int) -> None:
        self.offset = offset
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def take(self, chunk: LogChunk) -> str:
        self.offset = chunk.start + len(chunk.data)
        return self._decoder.decode(chunk.data)

    def close(self) -> str:
        return self._decoder.decode(b"", final=True)


async def _chunks(
    chunks: Iterator[LogChunk], *, limiter: anyio.CapacityLimiter
) -> AsyncIterator[LogChunk]:
    """A thread hop per chunk: the reader's IO never runs on the event loop."""
    while (
        chunk := await anyio.to_thread.run_sync(next, chunks, None, limiter=limiter)
    ) is not None:
        yield chunk


def _load(factory: sessionmaker[Session], job_id: str) -> tuple[list[JobAttempt], Job | None]:
    with read_session(factory) as session:
        return (
            repository.attempts(session, job_id=job_id),
            repository.get(session, job_id=job_id, team_id=None),
        )


_ROLE_WORDS = {AttemptRole.PRIMARY: "", AttemptRole.STANDBY: " standby"}


def _header(attempt: JobAttempt) -> str:
    # In words, as `show` writes them: `on-demand`, and a standby said to be one.
    capacity = attempt.capacity_type.replace("_", "-") + _ROLE_WORDS[attempt.role]
    return (
        f"=== attempt {attempt.number}: {capacity} {attempt.instance_type} in {attempt.zone} ===\n"
    )
