"""HTTP plumbing shared by the routers: sessions, auth, errors, body limits, JSON responses."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Annotated, Any

import anyio
from fastapi import Depends, FastAPI, Header, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth import (
    Principal,
    PrincipalCache,
    authenticate,
    bearer_token,
    record_use,
    use_is_stale,
)
from api.database import close_does_io, read_session, transaction
from api.errors import DomainError, PayloadTooLarge, RequestTimeout, Unavailable
from api.models import utcnow
from gpujobs.resources import ErrorBody, ErrorDetail, FieldError

log = logging.getLogger(__name__)

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 403, 404, 409, 413, 422)
}
ERROR_RESPONSES[503] = {
    "model": ErrorBody,
    "description": "Overloaded or the database is busy; retry after `Retry-After` seconds.",
    "headers": {"Retry-After": {"schema": {"type": "integer"}}},
}
_READS = frozenset({"GET", "HEAD", "OPTIONS"})

# A new token in clear (a team's first, or one minted later) must not sit in a cache on the way.
NO_STORE = {"Cache-Control": "no-store"}
NO_STORE_HEADER = {
    "Cache-Control": {
        "description": "`no-store`: the body holds a token in clear.",
        "schema": {"type": "string"},
    }
}


async def get_session(request: Request) -> AsyncIterator[Session]:
    """The request's session. Opening one does no IO; the connection is taken at the first
    query, in the endpoint's thread. A read (GET) gets a read-only session: on SQLite it takes
    no lock. Routers commit explicitly before answering; anything left is discarded, in a
    thread only when that sends a rollback."""
    factory = request.app.state.session_factory
    session = read_session(factory) if request.method in _READS else factory()
    try:
        yield session
    finally:
        if close_does_io(session):
            await anyio.to_thread.run_sync(session.close)
        else:
            session.close()


SessionDep = Annotated[Session, Depends(get_session)]


# Declares the scheme in OpenAPI (the Authorize button, generated clients); `authenticate` reads
# the header itself so that every refusal has the same error shape.
BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="bearerAuth",
    description="A team token (see the credentials file), a job token, or the admin token.",
)


async def get_principal(
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)] = None,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    """In the event loop: a remembered token costs no thread hop and no query. A lookup gets a
    read session of its own, closed before returning: the endpoint runs in another thread hop,
    and waiting for it must hold no connection (nor, on SQLite, any lock)."""
    factory = request.app.state.session_factory
    remembered: PrincipalCache = request.app.state.principals
    now = utcnow()
    token = bearer_token(authorization)
    principal = remembered.get(token, now=now)
    if principal is None:
        admin_token = request.app.state.settings.admin_token
        generation = remembered.generation

        def look_up() -> Principal:
            with read_session(factory) as session:
                return authenticate(
                    session, authorization=authorization, admin_token=admin_token, now=now
                )

        principal = await anyio.to_thread.run_sync(look_up)
        remembered.put(token, principal, generation=generation)
    if use_is_stale(principal, now=now):  # at most once a minute per token: a short write
        await anyio.to_thread.run_sync(_write_use, factory, principal, now)
        principal = remembered.used(token, principal, at=now)
    return principal


def _write_use(factory: sessionmaker[Session], principal: Principal, now: datetime) -> None:
    with transaction(factory) as session:
        record_use(session, principal=principal, now=now)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def respond(
    body: BaseModel | Sequence[BaseModel] | dict[str, Any],
    *,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> Response:
    """Serialize a contract model directly: it was validated when built, so don't again."""
    if isinstance(body, BaseModel):
        content = body.model_dump_json()
    elif isinstance(body, Sequence):
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
        response = _error(exc.status_code, exc.code, exc.message, exc.fields)
        if exc.retry_after_s is not None:
            response.headers["Retry-After"] = str(exc.retry_after_s)
        return response

    @app.exception_handler(sa_exc.TimeoutError)
    async def _pool_exhausted(_: Request, exc: sa_exc.TimeoutError) -> Response:
        log.warning("no database connection in time: %s", exc)
        return await _domain(_, Unavailable("the server is busy; retry shortly"))

    @app.exception_handler(sa_exc.OperationalError)
    async def _database_unavailable(_: Request, exc: sa_exc.OperationalError) -> Response:
        # "database is locked" (SQLite's busy timeout), a dropped or refused connection: the
        # request did nothing durable (its transaction rolled back), so a retry is safe.
        log.warning("database unavailable: %s", exc.orig)
        return await _domain(_, Unavailable("the database is busy or unreachable; retry shortly"))

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


class Admission:
    """At most `limit` requests in the app at once; the rest wait in line up to `wait_s`, then
    get 503 with Retry-After. Bounding the requests in flight below the database pool and the
    thread pool is what keeps a burst from deadlocking them: an admitted request always finds a
    connection and a thread. A request leaves when its response starts, so a log stream holds a
    place only while it is set up. `exempt` paths (liveness) never wait."""

    def __init__(
        self, app: ASGIApp, *, limit: int, wait_s: float, exempt: frozenset[str] = frozenset()
    ) -> None:
        self.app = app
        self.wait_s = wait_s
        self.exempt = exempt
        self.slots = anyio.Semaphore(limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        admitted = False
        with anyio.move_on_after(self.wait_s):
            await self.slots.acquire()
            admitted = True
        if admitted:
            await self._admitted(scope, receive, send)
            return
        await _send_error(
            send,
            Unavailable("the server is busy; retry shortly"),
            headers=[(b"retry-after", str(Unavailable.retry_after_s).encode())],
        )

    async def _admitted(self, scope: Scope, receive: Receive, send: Send) -> None:
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                self.slots.release()

        async def send_and_release(message: Message) -> None:
            if message["type"] == "http.response.start":
                release()
            await send(message)

        try:
            await self.app(scope, receive, send_and_release)
        finally:
            release()


ADMIN_PREFIX = "/v1/admin"


class AdminOnly:
    """Under ADMIN_PREFIX the caller is checked before anything of the request is: a team token
    that sent a malformed body to an admin route was told what was wrong with the body (422),
    since FastAPI parses a body before it solves dependencies. Inside admission, as a token's
    lookup takes a database connection; the endpoints' own check then finds it remembered."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(ADMIN_PREFIX):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refusal: DomainError | None = None
        try:
            principal = await get_principal(
                request, authorization=request.headers.get("authorization")
            )
            principal.require_admin()
        except DomainError as error:
            refusal = error
        except (sa_exc.TimeoutError, sa_exc.OperationalError):
            refusal = Unavailable("the database is busy or unreachable; retry shortly")
        if refusal is None:
            await self.app(scope, receive, send)
            return
        retry = (
            []
            if refusal.retry_after_s is None
            else [(b"retry-after", b"%d" % refusal.retry_after_s)]
        )
        await _send_error(send, refusal, headers=retry)


async def _send_error(
    send: Send, error: DomainError, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = ErrorBody(error=ErrorDetail(code=error.code, message=error.message)).model_dump_json()
    await send(
        {
            "type": "http.response.start",
            "status": error.status_code,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body.encode()})


class RequestBody:
    """Read a request's whole body before the app (and admission) sees it: at most `max_bytes`
    (413, whether or not Content-Length is sent) within `timeout_s` of its headers (408, and
    the connection closed). A client that sends its headers and then a byte at a time so
    holds its own connection and nothing else: no admission place, no thread, no database
    connection is taken for a request whose body has not arrived."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, timeout_s: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        # The server enforces Content-Length framing, so the header alone is enough.
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(send)
            return
        messages: list[Message] = []
        received = 0
        with anyio.move_on_after(self.timeout_s):
            while True:
                message = await receive()
                messages.append(message)
                if message["type"] != "http.request":
                    return  # the client left: nobody to answer
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    await self._too_large(send)
                    return
                if not message.get("more_body", False):
                    break
        if not messages or messages[-1].get("more_body", False):
            await _send_error(
                send,
                RequestTimeout(
                    f"the request's body did not arrive within {self.timeout_s:g} s of its headers"
                ),
                headers=[(b"connection", b"close")],
            )
            return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        error = PayloadTooLarge(f"request body is larger than {self.max_bytes} bytes")
        await _send_error(send, error, headers=[(b"connection", b"close")])
