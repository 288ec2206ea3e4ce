"""The slow-client attack (issue 36): connections that hold the API without finishing a request.

Shared by the embedded service's test (tests/api/test_slow_clients.py) and the compose stack's
(tests/deploy/test_compose_stack.py), so both deployments meet the same attack: the headers of
an authenticated POST and one byte of its body, then nothing; half a header; nothing at all;
headers past the server's bound. The server must answer other requests while they hold, and
close each within its timeouts.
"""

from __future__ import annotations

import socket
import time
from typing import Protocol

SLOW_BODIES = 100
# What the server does with each kind of slow connection: a slow request is told 408, an idle
# connection just closed, headers too large 431.
CLOSED_AS = {
    "slow body": {"HTTP/1.1 408"},
    "slow headers": {"HTTP/1.1 408"},
    "idle": {"closed"},
    "huge headers": {"HTTP/1.1 431"},
}

Held = list[tuple[str, socket.socket]]


class Target(Protocol):
    """The API under attack: its base URL (http://host:port) and a team's token."""

    @property
    def url(self) -> str: ...

    @property
    def token(self) -> str: ...


def connect(target: Target) -> socket.socket:
    host, port = target.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def slow_body(target: Target) -> socket.socket:
    """The headers of an authenticated submit and one byte of its body, then nothing."""
    sock = connect(target)
    head = (
        "POST /v1/jobs HTTP/1.1\r\n"
        "Host: 127.0.0.1\r\n"
        f"Authorization: Bearer {target.token}\r\n"
        "Content-Type: application/json\r\n"
        "Content-Length: 100\r\n"
        "\r\n{"
    )
    sock.sendall(head.encode())
    return sock


def slow_headers(target: Target) -> socket.socket:
    sock = connect(target)
    sock.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    return sock


def huge_headers(target: Target) -> socket.socket:
    """Headers past the server's bound (64 KiB), never finished."""
    sock = connect(target)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"x" * 70_000)
    return sock


def hold(target: Target, *, slow_bodies: int = SLOW_BODIES) -> Held:
    """Open every kind of slow connection and leave them open; the caller closes them."""
    held: Held = []
    try:
        held += [("slow body", slow_body(target)) for _ in range(slow_bodies)]
        held += [("slow headers", slow_headers(target)) for _ in range(10)]
        held += [("idle", connect(target)) for _ in range(10)]
        held += [("huge headers", huge_headers(target)) for _ in range(2)]
    except BaseException:
        release(held)
        raise
    return held


def release(held: Held) -> None:
    for _, sock in held:
        sock.close()


def closed_by_server(sock: socket.socket, *, deadline: float) -> bytes | None:
    """What the server sent before closing the connection, or None if it still holds it open
    at the deadline (well past the server's timeout)."""
    received = b""
    while True:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            return None
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk


def how_closed(held: Held, *, within_s: float) -> dict[str, set[str]]:
    """Per kind, how the server ended its connections within `within_s` from now: the status
    line it sent, `closed` (nothing sent), or `held open`. CLOSED_AS is the right answer."""
    deadline = time.monotonic() + within_s
    outcomes = {kind: set[str]() for kind, _ in held}
    for kind, sock in held:
        answer = closed_by_server(sock, deadline=deadline)
        outcomes[kind].add("held open" if answer is None else answer[:12].decode() or "closed")
    return outcomes
