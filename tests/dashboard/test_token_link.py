"""The dashboard link keeps the team's token out of the server's logs (issue 22, row 12).

`/dashboard?token=gpj_...` put the token in the request line, so in every access log line and
proxy log of the visit. The documented link carries it in the fragment, which a browser never
sends: a real uvicorn server with its access log on, visited by headless Chromium.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn

from api.app import create_app
from api.database import make_engine, make_session_factory
from api.migrate import upgrade_to_head
from api.settings import Settings
from tests.conftest import job_body, make_team
from tests.dashboard.browser import CHROMIUM, browser
from tests.sdk.server import free_port

if CHROMIUM is None and not os.environ.get("CI"):
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)

LOADED = "document.body.dataset.loaded === 'true'"
JOB_NAMES = "[...document.querySelectorAll('#jobs tbody tr a')].map(a => a.textContent)"


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@dataclass
class Server:
    url: str
    token: str
    access_log: Lines


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("token-link")
    settings = Settings(home=home / "home", credentials_file=home / "credentials.json")
    engine = make_engine(settings)
    upgrade_to_head(engine)
    factory = make_session_factory(engine)
    token = make_team(factory, "team-a")
    app = create_app(settings, session_factory=factory, nudge=lambda task, job_id: None)
    port = free_port()
    # As production runs it: uvicorn's access log on, at info.
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="info", lifespan="off")
    access_log = Lines()
    logging.getLogger("uvicorn.access").addHandler(access_log)
    runner = uvicorn.Server(config)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not runner.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the API did not start"
        time.sleep(0.02)
    url = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {token}"}
    assert httpx.post(f"{url}/v1/jobs", json=job_body("ours"), headers=auth).status_code == 201
    try:
        yield Server(url=url, token=token, access_log=access_log)
    finally:
        runner.should_exit = True
        thread.join(timeout=10)
        logging.getLogger("uvicorn.access").removeHandler(access_log)
        engine.dispose()


def test_a_visit_through_the_documented_link_leaves_no_token_in_the_access_log(
    server: Server, tmp_path: Path
) -> None:
    server.access_log.lines.clear()
    with browser(tmp_path / "profile") as page:
        page.goto(f"{server.url}/dashboard#token={server.token}")
        page.wait_for(f"{LOADED} && {JOB_NAMES}.length === 1", timeout=30)
        assert page.js(JOB_NAMES) == ["ours"]  # the team's jobs, fetched with its token
        assert server.token not in page.js("location.href")  # and off the address bar
    lines = server.access_log.lines
    assert any('"GET /dashboard HTTP/1.1" 200' in line for line in lines), lines
    assert any("GET /v1/jobs?" in line for line in lines), lines
    assert not [line for line in lines if server.token in line]


def test_a_token_in_the_query_is_not_used(server: Server, tmp_path: Path) -> None:
    """The older `?token=` link reaches the logs before the page can do anything: it is not
    used, so such links stop being shared, and the page says how to sign in instead."""
    with browser(tmp_path / "profile") as page:
        page.goto(f"{server.url}/dashboard?token={server.token}")
        page.wait_for("!document.getElementById('token-form').hidden", timeout=30)
        assert page.js("localStorage.getItem('gpujobs.token')") is None
        assert server.token not in page.js("location.href")
        assert "#token=" in page.js("document.getElementById('status').textContent")
