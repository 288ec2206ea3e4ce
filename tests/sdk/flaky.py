"""A tiny real HTTP server for the SDK's failure paths: scripted answers, then a proxy.

Each request is matched against a queue of scripted answers for its method and path; when the
queue is empty it is forwarded to the real API (if one is given). Every request is recorded.
"""

from __future__ import annotations

import fnmatch
import json
import threading
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


@dataclass
class Answer:
    status: int = 200
    body: Any = None  # JSON-able, str or bytes
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[str] | None = None  # stream these, one write each
    forward_first: bool = False  # pass the request on to the API, then answer this instead


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


class FlakyServer:
    def __init__(self, upstream: str | None) -> None:
        self.upstream = upstream
        self.script: dict[tuple[str, str], deque[Answer]] = defaultdict(deque)
        self.seen: list[Seen] = []
        self.lock = threading.Lock()

    def on(self, method: str, path: str, *answers: Answer) -> None:
        """Answer the next requests to `path` (a glob: `/v1/jobs/*/logs`) with `answers`."""
        self.script[(method, path)].extend(answers)

    def requests(self, method: str, path: str) -> list[Seen]:
        return [s for s in self.seen if s.method == method and s.path == path]

    def next_answer(self, method: str, path: str) -> Answer | None:
        """The next scripted answer for a (method, path pattern) that matches, if any."""
        with self.lock:
            for (m, pattern), queue in self.script.items():
                if m == method and queue and fnmatch.fnmatchcase(path, pattern):
                    return queue.popleft()
            return None


def _handler(server: FlakyServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return None

        def _handle(self) -> None:
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with server.lock:
                server.seen.append(Seen(self.command, path, dict(self.headers.items())))
            answer = server.next_answer(self.command, path)
            if answer is None or answer.forward_first:
                forwarded = self._forward(body)
                if answer is None:
                    self._reply(forwarded.status_code, forwarded.content, forwarded.headers)
                    return
            assert answer is not None
            if answer.chunks is not None:
                self._stream(answer)
                return
            content = answer.body
            if not isinstance(content, bytes | str):
                content = json.dumps(content)
            if isinstance(content, str):
                content = content.encode()
            kind = "text/plain" if isinstance(answer.body, str) else "application/json"
            self._reply(answer.status, content, {"Content-Type": kind, **answer.headers})

        def _forward(self, body: bytes) -> httpx.Response:
            assert server.upstream, "no scripted answer and no API to forward to"
            skip = {"host", "content-length", "connection", "accept-encoding"}
            headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
            return httpx.request(
                self.command, server.upstream + self.path, content=body, headers=headers
            )

        def _reply(self, status: int, content: bytes, headers: Any) -> None:
            self.send_response(status)
            for key, value in dict(headers).items():
                if key.lower() not in {"content-length", "transfer-encoding", "connection"}:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        def _stream(self, answer: Answer) -> None:
            self.send_response(answer.status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.end_headers()  # HTTP/1.0: the body ends when the connection closes
            for chunk in answer.chunks or []:
                self.wfile.write(chunk.encode())
                self.wfile.flush()

        do_GET = do_POST = do_PUT = do_DELETE = _handle

    return Handler


@contextmanager
def flaky_server(upstream: str | None = None) -> Iterator[tuple[str, FlakyServer]]:
    state = FlakyServer(upstream)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    finally:
        httpd.shutdown()
        httpd.server_close()
