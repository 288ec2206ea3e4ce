"""A real API on a free local port: uvicorn serving create_app() in a thread, on SQLite."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from api.database import make_engine, make_session_factory
from api.migrate import upgrade_to_head
from api.settings import Settings

ADMIN_TOKEN = "admin-secret-for-tests"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LiveApi:
    url: str
    session_factory: sessionmaker[Session]
    admin_token: str = ADMIN_TOKEN


@contextmanager
def live_api(home: Path) -> Iterator[LiveApi]:
    settings = Settings(
        home=home,
        credentials_file=home / "credentials.json",
        admin_token=ADMIN_TOKEN,
    )
    engine = make_engine(settings)
    upgrade_to_head(engine)
    factory = make_session_factory(engine)
    app = create_app(settings, session_factory=factory, nudge=lambda task, job_id: None)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the API did not start")
        time.sleep(0.02)
    try:
        yield LiveApi(url=f"http://127.0.0.1:{port}", session_factory=factory)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        engine.dispose()
