"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from sqlalchemy import text

from api.http import respond

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> Response:
    return respond({"status": "ok"})


@router.get("/readyz")
def readyz(request: Request) -> Response:
    try:
        with request.app.state.session_factory() as session:
            session.execute(text("SELECT 1"))
    except Exception as error:  # any database failure means "not ready", never a 500
        return respond({"status": "unavailable", "reason": type(error).__name__}, status_code=503)
    return respond({"status": "ok"})
