"""The API under real concurrency: a real uvicorn server (the embedded composition, with its
control loops) on loopback, on SQLite and PostgreSQL, hit by bursts of concurrent clients.

Each burst reproduces a failure measured before (500s from pool timeouts and "database is
locked", an API stalled by idle log followers). Overload may be answered 503 with Retry-After in
the error shape; any other 5xx fails the test. Counts and times are bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from devstack.confinement import trainer_python, trainer_python_path
from tests.conftest import PG_ADMIN_URL, _pg_url

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "admin-token-for-load-tests"
# The team's budget is a cent (set by `start_server`): a job that would cost more is admitted
# and then deferred by every schedule pass (which reads and writes it), never launched.
UNPLACEABLE = {
    "name": "burst",
    "trainer": {"steps": 10},
    "estimated_hours": 1.0,
    "capacity": {"on_budget_exceeded": "defer"},
}


@dataclass
class Server:
    url: str
    token: str
    home: Path
    log: Path
    process: subprocess.Popen[bytes]

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def passes(self) -> int:
        path = self.home / "passes"
        return len(path.read_text().splitlines()) if path.exists() else 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "sqlite":
        yield ""
        return
    name = f"gpujobs_load_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    yield _pg_url(name)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def server_home(tmp_path: Path) -> Path:
    """The server's home for this test: one per tmp_path, so a restarted server finds its state,
    and outside pytest's private tmp (run as root, trainers run as their job's uid)."""
    digest = hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]
    base = Path(tempfile.gettempdir()) / f"gpujobs-load-{digest}"
    base.mkdir(mode=0o711, exist_ok=True)
    base.chmod(0o711)
    return base / "home"


def start_server(
    tmp_path: Path, database: str, *, budget_usd: float | None = 0.01, **settings: str
) -> Server:
    port = _free_port()
    home = server_home(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
    env.update(
        GPUJOBS_HOME=str(home),
        GPUJOBS_TRAINER_PYTHON=trainer_python(),
        GPUJOBS_TRAINER_PYTHON_PATH=trainer_python_path(),
        GPUJOBS_DATABASE_URL=database,
        GPUJOBS_PORT=str(port),
        GPUJOBS_CREDENTIALS_FILE=str(tmp_path / "credentials.json"),
        GPUJOBS_SCHEDULE_INTERVAL_S="0.5",
        GPUJOBS_RECONCILE_INTERVAL_S="0.5",
        GPUJOBS_ADMIN_TOKEN=ADMIN,
        GPUJOBS_SPOT_NOTICE_S="2",
    )
    env.update(settings)
    log = tmp_path / "server.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.api.load_server"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    else:
        raise AssertionError("the server did not start:\n" + log.read_text())
    token = json.loads((tmp_path / "credentials.json").read_text())["token"]
    if budget_usd is not None:
        budget = httpx.put(
            url + "/v1/admin/teams/default/budget",
            json={"monthly_usd": budget_usd},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert budget.status_code == 200, budget.text
    return Server(url=url, token=token, home=home, log=log, process=process)


def stop_server(server: Server) -> None:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGINT)
        try:
            server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
    # The silent trainers the server started (their own sessions) must not outlive the test.
    for pid_file in (server.home / "attempts").glob("*/pid"):
        with contextlib.suppress(ProcessLookupError, ValueError, TypeError):
            os.killpg(json.loads(pid_file.read_text())["pid"], signal.SIGKILL)


@pytest.fixture
def server(tmp_path: Path, database: str) -> Iterator[Server]:
    running = start_server(tmp_path, database)
    yield running
    stop_server(running)


@pytest.fixture
def unbudgeted_server(tmp_path: Path, database: str) -> Iterator[Server]:
    running = start_server(tmp_path, database, budget_usd=None, GPUJOBS_LOG_FOLLOWERS_PER_TEAM="45")
    yield running
    stop_server(running)


def assert_no_5xx_but_503(responses: list[httpx.Response]) -> None:
    """A 503 must say when to retry, in the error shape; any other 5xx is a bug."""
    for response in responses:
        if response.status_code == 503:
            assert response.headers.get("Retry-After", "").isdigit(), response.headers
            assert response.json()["error"]["code"] == "unavailable"
        else:
            assert response.status_code < 500, (response.status_code, response.text)


async def _burst(server: Server, count: int, request: dict[str, Any]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as client:
        return await asyncio.gather(
            *(client.request(**({"headers": server.auth} | _nth(request, n))) for n in range(count))
        )


def _nth(request: dict[str, Any], n: int) -> dict[str, Any]:
    """Without an idempotency key each submit is its own job, so it gets its own name (a name is
    unique among a team's unfinished jobs)."""
    body = request.get("json")
    if body is None or "Idempotency-Key" in request.get("headers", {}):
        return request
    return request | {"json": body | {"name": f"{body['name']}-{n}"}}


def burst(server: Server, count: int, **request: Any) -> list[httpx.Response]:
    return asyncio.run(_burst(server, count, request))


def test_concurrent_bursts_get_answers_or_503_never_500(server: Server) -> None:
    before = server.passes()
    budgets = burst(server, 100, method="GET", url="/v1/budget")
    listed = burst(server, 100, method="GET", url="/v1/jobs", params={"limit": 1})
    key = {"Idempotency-Key": "one-submit"}
    submits = burst(
        server, 50, method="POST", url="/v1/jobs", json=UNPLACEABLE, headers=server.auth | key
    )
    posts = burst(server, 100, method="POST", url="/v1/jobs", json=UNPLACEABLE)
    for responses in (budgets, listed, submits, posts):
        assert_no_5xx_but_503(responses)
    assert {r.status_code for r in budgets + listed} <= {200, 503}
    assert any(r.status_code == 200 for r in budgets + listed)
    # One key, one job: every successful answer names the same job, created once.
    ok = [r for r in submits if r.status_code in (200, 201)]
    assert ok, [r.status_code for r in submits]
    assert len({r.json()["id"] for r in ok}) == 1
    assert sum(r.status_code == 201 for r in submits) <= 1
    assert {r.status_code for r in posts} <= {201, 503}
    # The control loops kept their passes, and none failed.
    deadline = time.monotonic() + 30
    while server.passes() < before + 4 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert server.passes() >= before + 4
    assert "pass failed" not in server.log.read_text()


async def _follow_and_probe(server: Server, job_id: str, followers: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=followers + 10, max_keepalive_connections=0)
    timeout = httpx.Timeout(20, read=None)
    async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=timeout) as client:
        opened: list[int] = []
        stop = asyncio.Event()

        async def follow() -> None:
            url = f"/v1/jobs/{job_id}/logs"
            async with client.stream(
                "GET", url, params={"follow": "true"}, headers=server.auth
            ) as response:
                opened.append(response.status_code)
                async for _ in response.aiter_text():
                    if stop.is_set():
                        return
                    continue

        tasks = [asyncio.create_task(follow()) for _ in range(followers)]
        deadline = time.monotonic() + 60
        while len(opened) < followers and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # every follower is now idle, waiting for output
        one_more = await client.get(
            f"/v1/jobs/{job_id}/logs", params={"follow": "true"}, headers=server.auth
        )
        health = await client.get("/healthz")
        listed = await client.get("/v1/jobs", headers=server.auth)
        cancelled = await client.post(f"/v1/jobs/{job_id}/cancel", headers=server.auth)
        # The cancel ends the job, and with it every stream.
        done, pending = await asyncio.wait(tasks, timeout=60)
        stop.set()
        for task in pending:
            task.cancel()
        return {
            "opened": opened,
            "one_more": one_more,
            "health": health,
            "listed": listed,
            "cancelled": cancelled,
            "ended": len(done),
        }


def test_idle_log_followers_do_not_stall_the_api(unbudgeted_server: Server) -> None:
    server = unbudgeted_server
    response = httpx.post(
        server.url + "/v1/jobs",
        json={"name": "silent", "trainer": {"steps": 10}, "estimated_hours": 1.0},
        headers=server.auth,
        timeout=30,
    )
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = httpx.get(f"{server.url}/v1/jobs/{job_id}", headers=server.auth).json()["status"]
        if status == "RUNNING":
            break
        time.sleep(0.5)
    assert status == "RUNNING"
    passes = server.passes()
    result = asyncio.run(_follow_and_probe(server, job_id, followers=45))
    assert result["opened"] == [200] * 45
    assert result["one_more"].status_code == 429  # the team's 45 streams are all in use
    assert result["one_more"].json()["error"]["code"] == "too_many_requests"
    assert result["health"].status_code == 200
    assert result["listed"].status_code == 200
    assert result["cancelled"].status_code == 200
    assert result["ended"] == 45
    assert server.passes() > passes
    assert "pass failed" not in server.log.read_text()


def test_a_disconnected_follower_gives_its_place_back(tmp_path: Path) -> None:
    running = start_server(tmp_path, "", GPUJOBS_LOG_FOLLOWERS_PER_TEAM="2")
    try:
        response = httpx.post(
            running.url + "/v1/jobs", json=UNPLACEABLE | {"name": "pending"}, headers=running.auth
        )
        job_id = response.json()["id"]
        url = f"{running.url}/v1/jobs/{job_id}/logs"
        for _ in range(3):  # two at a time, three times: places come back on disconnect
            with httpx.Client(timeout=httpx.Timeout(10, read=None)) as a, httpx.Client() as b:
                first = a.stream("GET", url, params={"follow": "true"}, headers=running.auth)
                second = b.stream("GET", url, params={"follow": "true"}, headers=running.auth)
                with first as one, second as two:
                    assert one.status_code == 200
                    assert two.status_code == 200
                    third = httpx.get(url, params={"follow": "true"}, headers=running.auth)
                    assert third.status_code == 429
            time.sleep(2.0)  # the server notices the disconnects within a poll
    finally:
        stop_server(running)


@pytest.mark.parametrize(
    "limits",
    [
        # Few places and a short line: the overflow is turned away at the door.
        {"GPUJOBS_API_CONCURRENCY": "1", "GPUJOBS_API_QUEUE_WAIT_S": "0.01"},
        # Many places but one connection that cannot be waited for: pool timeouts. Every
        # request looks its token up (no auth cache), so even a burst the client sends slowly
        # (a busy machine) finds the connection taken.
        {
            "GPUJOBS_AUTH_CACHE_S": "0",
            "GPUJOBS_API_CONCURRENCY": "50",
            "GPUJOBS_DATABASE_POOL_SIZE": "1",
            "GPUJOBS_DATABASE_MAX_OVERFLOW": "0",
            "GPUJOBS_DATABASE_POOL_TIMEOUT_S": "0.001",
        },
    ],
    ids=["admission", "pool"],
)
def test_overload_is_503_with_retry_after(
    tmp_path: Path, database: str, limits: dict[str, str]
) -> None:
    running = start_server(tmp_path, database, budget_usd=None, **limits)
    try:
        responses = burst(running, 60, method="GET", url="/v1/jobs", params={"limit": 1})
        assert_no_5xx_but_503(responses)
        codes = [r.status_code for r in responses]
        assert 503 in codes and set(codes) <= {200, 503}, codes
        # Overload passes: once the burst is over, a client that retries (as the SDK does on a
        # 503) is served. Within the burst every request may lose its race for the connection,
        # and after it the control loop's passes share that one connection.
        after = []
        for _ in range(20):
            response = httpx.get(
                f"{running.url}/v1/jobs", params={"limit": 1}, headers=running.auth
            )
            after.append(response.status_code)
            if response.status_code != 503:
                break
            time.sleep(0.1)
        assert after[-1] == 200, after
    finally:
        stop_server(running)
