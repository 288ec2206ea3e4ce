"""How the API is served: uvicorn, with limits on what a client's connection may hold.

Every entry point that serves the API (`python -m worker.api_app` in the images and the chart,
`worker.standalone` for `make run`) builds its server here, from `Settings`. uvicorn alone
closes a connection only when it has been idle after a response: one that never sends a
request, or sends half of one, it keeps for good. `GuardedProtocol` adds what it lacks:

- a deadline for a request's headers (`api_header_timeout_s`), counted from the connection's
  start or the end of the previous response: an idle connection is closed, a partial request
  answered 408 and closed; headers over `api_max_header_bytes` are answered 431;
- at most `api_connections_per_client` connections from one address (trusted proxies excepted:
  they carry many clients); the request of one more is answered 503 without reaching the app,
  and its connection closed.

The body's deadline is the app's (api.http.RequestBody), so that it holds under any server.
Forwarded headers (`X-Forwarded-For`, `-Proto`) are believed only from `trusted_proxies`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections import Counter
from typing import Any, ClassVar

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from api.errors import Unavailable
from api.settings import Settings
from gpujobs.resources import ErrorBody, ErrorDetail

LINGER_S = 2.0
_REFUSALS = {
    408: (b"Request Timeout", "request_timeout"),
    431: (b"Request Header Fields Too Large", "headers_too_large"),
    503: (b"Service Unavailable", Unavailable.code),
}


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline and a cap per client address. One
    subclass per server (`guarded_protocol`) holds that server's limits and counts."""

    header_timeout_s: ClassVar[float]
    max_header_bytes: ClassVar[int]
    per_client: ClassVar[int]
    trusted: ClassVar[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]]
    held: ClassVar[Counter[str]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._headers_due: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._started = False  # a byte of the awaited request has arrived
        self._counted: str | None = None  # the address this connection is counted under
        self._over_cap = False  # its request is answered 503 once its headers are in
        self._refused = False  # answered by the guard: what still arrives is discarded

    # -- the connection ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        address = self.client[0] if self.client else None
        if address is not None and not self._trusted(address):
            if self.held[address] >= self.per_client:
                # Answered once the request is in: a response written before it would race
                # the client's request and be lost to a reset.
                self._over_cap = True
            else:
                self.held[address] += 1
                self._counted = address
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        if self._counted is not None:
            self.held[self._counted] -= 1
            if self.held[self._counted] <= 0:
                del self.held[self._counted]
            self._counted = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused or self.transport.is_closing():
            return
        waiting = self._headers_due is not None
        if waiting:
            self._header_bytes += len(data)
        super().data_received(data)
        if (
            waiting
            and self._headers_due is not None  # still incomplete after this chunk
            and self._header_bytes > self.max_header_bytes
            and not self.transport.is_closing()  # not already refused by the parser (400)
        ):
            self._refuse(431, f"request headers are larger than {self.max_header_bytes} bytes")

    # -- parser callbacks --------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._headers_due is None:  # a pipelined request begun while another is served
            self._await_headers()
        self._started = True

    def on_headers_complete(self) -> None:
        self._stop_waiting()
        if self._over_cap:
            self._refuse(503, "too many connections from this address; close some and retry")
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._over_cap:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._over_cap:
            super().on_message_complete()

    def on_response_complete(self) -> None:
        idle_next = not self.pipeline
        super().on_response_complete()
        if idle_next and not self.transport.is_closing() and self._headers_due is None:
            self._await_headers()

    # -- the deadline ------------------------------------------------------------------------

    def _await_headers(self) -> None:
        self._header_bytes = 0
        self._started = False
        self._headers_due = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _stop_waiting(self) -> None:
        if self._headers_due is not None:
            self._headers_due.cancel()
            self._headers_due = None
        self._header_bytes = 0

    def _headers_late(self) -> None:
        self._headers_due = None
        if self.transport.is_closing():
            return
        answering = self.cycle is not None and not self.cycle.response_complete
        if self._started and not answering:
            self._refuse(408, "the request's headers did not arrive in time")
        else:
            # Idle: nobody waits for an answer. Or a pipelined request came too slowly while
            # another was answered: an error written now would land inside that response.
            self.transport.close()

    def _refuse(self, status: int, message: str) -> None:
        self._stop_waiting()
        reason, code = _REFUSALS[status]
        body = ErrorBody(error=ErrorDetail(code=code, message=message)).model_dump_json().encode()
        head = [
            b"HTTP/1.1 %d %s" % (status, reason),
            b"content-type: application/json",
            b"content-length: %d" % len(body),
            b"connection: close",
        ]
        if status == 503:
            head.append(b"retry-after: %d" % (Unavailable.retry_after_s or 1))
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        self._refused = True
        # Closed with the client's bytes still unread, the connection would be reset, and the
        # answer lost with it: send it, end our side, and read (discarding) until the client
        # closes or LINGER_S passes.
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()

    def _trusted(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.trusted)


def guarded_protocol(settings: Settings) -> type[GuardedProtocol]:
    """The protocol class for one server: its limits, and its own count of connections."""
    return type(
        "GuardedProtocol",
        (GuardedProtocol,),
        {
            "header_timeout_s": settings.api_header_timeout_s,
            "max_header_bytes": settings.api_max_header_bytes,
            "per_client": settings.api_connections_per_client,
            "trusted": tuple(
                ipaddress.ip_network(proxy, strict=False) for proxy in settings.trusted_proxies
            ),
            "held": Counter(),
        },
    )


def server_config(
    app: Any, settings: Settings, *, host: str | None = None, port: int | None = None, **extra: Any
) -> uvicorn.Config:
    """uvicorn's configuration for serving `app` under `settings`' limits."""
    return uvicorn.Config(
        app,
        host=host or settings.host,
        port=port or settings.port,
        http=guarded_protocol(settings),
        ws="none",  # the API has no websocket routes: no upgrade to take a connection elsewhere
        timeout_keep_alive=settings.api_keep_alive_s,
        limit_concurrency=settings.api_max_connections,
        proxy_headers=bool(settings.trusted_proxies),
        forwarded_allow_ips=list(settings.trusted_proxies),
        **extra,
    )


def serve(app: Any, settings: Settings, **extra: Any) -> None:
    """Serve `app` until interrupted (SIGINT, SIGTERM), as `uvicorn.run` does."""
    server = uvicorn.Server(server_config(app, settings, **extra))
    with contextlib.suppress(KeyboardInterrupt):  # SIGINT is the ordinary stop
        server.run()
    if not server.started:
        raise SystemExit(STARTUP_FAILURE)  # e.g. the port is taken; uvicorn has said so
