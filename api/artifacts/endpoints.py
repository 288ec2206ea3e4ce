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
from gpujobs.resources import Artifacts

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERROR_RESPONSES)

FileName = Annotated[str, Path(pattern=service.NAME.pattern)]


def _store(request: Request, job_id: str) -> store.ArtifactStore:
    settings = request.app.state.settings
    return store.for_job(
        checkpoint_root=settings.checkpoint_root(),
        job_id=job_id,
        s3_endpoint_url=settings.s3_endpoint_url,
    )


@router.get("/{job_id}/artifacts", response_model=Artifacts)
async def job_artifacts(
    request: Request, job_id: str, session: SessionDep, principal: PrincipalDep
) -> Response:
    job = jobs.get(session, principal=principal, job_id=job_id)
    session.rollback()  # listing a store can be slow: hold no database lock meanwhile
    base_url = str(request.base_url).rstrip("/")
    listing = await anyio.to_thread.run_sync(
        lambda: service.list_artifacts(store=_store(request, job.id), job=job, base_url=base_url)
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
    session.rollback()
    download = await anyio.to_thread.run_sync(
        lambda: service.open_file(store=_store(request, job.id), job=job, step=step, name=name)
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
