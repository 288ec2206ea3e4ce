"""/v1/jobs/{id}/artifacts: the trained weights and checkpoints, listed and streamed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Annotated

import anyio
from fastapi import APIRouter, Path, Request, Response
from fastapi.responses import StreamingResponse

from api.artifacts import service, store
from api.http import ERROR_RESPONSES, PrincipalDep, SessionDep, respond
from api.jobs import service as jobs
from api.models import Job
from gpujobs.checkpoints import FILE_NAME
from gpujobs.resources import Artifacts

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERROR_RESPONSES)

FileName = Annotated[str, Path(pattern=FILE_NAME.pattern)]


def _prefix(request: Request, job: Job) -> str:
    return jobs.checkpoint_uri(job, settings=request.app.state.settings)


def _store(request: Request, prefix: str) -> store.ArtifactStore:
    s3_endpoint_url = request.app.state.settings.s3_endpoint_url
    return store.for_prefix(checkpoint_uri=prefix, s3_endpoint_url=s3_endpoint_url)


@router.get("/{job_id}/artifacts", response_model=Artifacts)
async def job_artifacts(
    request: Request, job_id: str, session: SessionDep, principal: PrincipalDep
) -> Response:
    job = jobs.get(session, principal=principal, job_id=job_id)
    prefix = _prefix(request, job)  # read before the rollback expires the row
    session.rollback()  # listing a store can be slow: hold no database lock meanwhile
    base_url = str(request.base_url).rstrip("/")
    listing = await anyio.to_thread.run_sync(
        lambda: service.list_artifacts(store=_store(request, prefix), job=job, base_url=base_url)
    )
    return respond(listing)


@router.get(
    "/{job_id}/artifacts/{step}/{name}",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "The file's bytes (compare with the listed sha256).",
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
)
async def download_artifact(
    request: Request,
    job_id: str,
    step: Annotated[int, Path(ge=0, le=10**12)],
    name: FileName,
    session: SessionDep,
    principal: PrincipalDep,
) -> StreamingResponse:
    job = jobs.get(session, principal=principal, job_id=job_id)
    prefix = _prefix(request, job)
    session.rollback()
    download = await anyio.to_thread.run_sync(
        lambda: service.open_file(store=_store(request, prefix), job=job, step=step, name=name)
    )
    return StreamingResponse(
        _iterate(download.chunks),
        media_type="application/octet-stream",
        headers={
            "Content-Disposition": f'attachment; filename="{name}"',
            "Content-Length": str(download.size),  # the manifest's: a shorter body is cut short
        },
    )


async def _iterate(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """One blocking read per chunk in a worker thread: no thread is held between chunks."""
    while (chunk := await anyio.to_thread.run_sync(next, chunks, None)) is not None:
        yield chunk
