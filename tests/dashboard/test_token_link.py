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
    other_token: str  # another team's, with a job of its own
    access_log: Lines


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("token-link")
    settings = Settings(home=home / "home", credentials_file=home / "credentials.json")
    engine = make_engine(settings)
    upgrade_to_head(engine)
    factory = make_session_factory(engine)
    token = make_team(factory, "team-a")
    other_token = make_team(factory, "team-b")
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
    theirs = {"Authorization": f"Bearer {other_token}"}
    assert httpx.post(f"{url}/v1/jobs", json=job_body("theirs"), headers=theirs).status_code == 201
    try:
        yield Server(url=url, token=token, other_token=other_token, access_log=access_log)
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


STORED = "localStorage.getItem('gpujobs.token')"
SWITCH_ASKED = "!document.getElementById('token-switch').hidden"


@pytest.mark.parametrize("answer", ["keep", "switch"])
def test_a_link_with_another_token_asks_before_switching_teams(
    server: Server, tmp_path: Path, answer: str
) -> None:
    """Issue 36, attack 6: a `#token=` link someone sent silently signed the dashboard into the
    link's team (theirs), where what the user then did went. With a token already stored, the
    page asks first, and until then uses and keeps the one it had."""
    with browser(tmp_path / "profile") as page:
        page.goto(f"{server.url}/dashboard#token={server.token}")
        page.wait_for(f"{LOADED} && {JOB_NAMES}.length === 1", timeout=30)
        # Another tab's link, opened in this one (a fragment change) and as a fresh load.
        for visit in ("hash", "load"):
            link = f"{server.url}/dashboard#token={server.other_token}&/jobs"
            if visit == "hash":
                page.js(f"location.hash = 'token={server.other_token}&/jobs'")
            else:
                page.goto("about:blank")  # from another page: a load, not a fragment change
                page.goto(link)
            # The page has taken the link in (off the address), and kept its own token.
            page.wait_for(f"!location.href.includes({server.other_token!r})", timeout=30)
            assert page.js(STORED) == server.token
            page.wait_for(SWITCH_ASKED, timeout=30)
            page.wait_for(LOADED, timeout=30)
            assert page.js(JOB_NAMES) == ["ours"]  # still the stored token's team
        page.js(f"document.getElementById('token-switch-{'no' if answer == 'keep' else 'yes'}')"
                ".click()")  # fmt: skip
        page.wait_for(f"!({SWITCH_ASKED})", timeout=30)
        expected = {"keep": (server.token, ["ours"]), "switch": (server.other_token, ["theirs"])}
        page.wait_for(f"{LOADED} && {JOB_NAMES}[0] === {expected[answer][1][0]!r}", timeout=30)
        assert (page.js(STORED), page.js(JOB_NAMES)) == expected[answer]
        # The same token again asks nothing.
        page.goto(f"{server.url}/dashboard#token={expected[answer][0]}")
        page.wait_for(f"{LOADED} && {JOB_NAMES}.length === 1", timeout=30)
        assert not page.js(SWITCH_ASKED)
