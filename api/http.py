"""HTTP plumbing shared by the routers: sessions, auth, errors, body limits, JSON responses."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from sqlalchemy.orm import Session
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth import Principal, authenticate, record_use
from api.errors import DomainError
from api.models import utcnow
from gpujobs.resources import ErrorBody, ErrorDetail, FieldError

log = logging.getLogger(__name__)

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 403, 404, 409, 413, 422)
}


def get_session(request: Request) -> Iterator[Session]:
    session = request.app.state.session_factory()
    try:
        yield session
    finally:
        # Routers commit explicitly before answering; whatever is left uncommitted is discarded.
        session.rollback()
        session.close()


SessionDep = Annotated[Session, Depends(get_session)]


# Declares the scheme in OpenAPI (the Authorize button, generated clients); `authenticate` reads
# the header itself so that every refusal has the same error shape.
BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="bearerAuth",
    description="A team token (see the credentials file), a job token, or the admin token.",
)


def get_principal(
    request: Request,
    session: SessionDep,
    _: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)] = None,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    now = utcnow()
    principal = authenticate(
        session,
        authorization=authorization,
        admin_token=request.app.state.settings.admin_token,
        now=now,
    )
    if record_use(session, principal=principal, now=now):
        # Its own short write: a GET commits nothing else, and the use must still be recorded.
        session.commit()
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def respond(
    body: BaseModel | list[BaseModel] | dict[str, Any],
    *,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> Response:
    """Serialize a contract model directly: it was validated when built, so don't again."""
    if isinstance(body, BaseModel):
        content = body.model_dump_json()
    elif isinstance(body, list):
        content = "[" + ",".join(item.model_dump_json() for item in body) + "]"
    else:
        content = json.dumps(body)
    return Response(
        content=content, status_code=status_code, media_type="application/json", headers=headers
    )


def _error(
    status: int, code: str, message: str, fields: list[FieldError] | None = None
) -> Response:
    body = ErrorBody(error=ErrorDetail(code=code, message=message, fields=fields or []))
    return respond(body, status_code=status)


def _field_name(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in {"body", "query", "path", "header", "cookie"}:
        parts = parts[1:] or parts
    return ".".join(parts)


HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain(_: Request, exc: DomainError) -> Response:
        return _error(exc.status_code, exc.code, exc.message, exc.fields)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> Response:
        fields = [
            FieldError(field=_field_name(err.get("loc", ())), reason=str(err.get("msg", "")))
            for err in exc.errors()
        ]
        summary = "; ".join(f"{f.field}: {f.reason}" for f in fields[:5])
        return _error(422, "invalid_request", summary or "invalid request", fields)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        code = HTTP_CODES.get(exc.status_code, "error")
        response = _error(exc.status_code, code, str(exc.detail))
        for key, value in (exc.headers or {}).items():
            response.headers[key] = value
        if exc.status_code == 405:
            # Starlette names only the first matching route's methods; one path may have several.
            response.headers["Allow"] = ", ".join(_allowed_methods(app, request))
        return response

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> Response:
        log.exception("unhandled error", exc_info=exc)
        return _error(500, "internal_error", "internal error; it has been logged")


def _allowed_methods(app: FastAPI, request: Request) -> list[str]:
    methods: set[str] = set()
    for route in app.router.routes:
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


class BodyLimit:
    """Refuse bodies over `max_bytes` with 413, whether or not Content-Length is sent."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None:
            # The server enforces Content-Length framing, so the header alone is enough.
            if declared.isdigit() and int(declared) > self.max_bytes:
                await self._too_large(send)
                return
            await self.app(scope, receive, send)
            return
        # A chunked body: read it (at most max_bytes + one chunk) before the app sees it.
        messages: list[Message] = []
        received = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                await self._too_large(send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        body = ErrorBody(
            error=ErrorDetail(
                code="payload_too_large",
                message=f"request body is larger than {self.max_bytes} bytes",
            )
        ).model_dump_json()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})
