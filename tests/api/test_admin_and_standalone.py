"""The operator's commands and the embedded default, run as real processes."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from api.auth import hash_token
from tests.worker.confinement import open_directory, trainer_python


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
    env.update(
        GPUJOBS_HOME=str(tmp_path / "home"),
        GPUJOBS_CREDENTIALS_FILE=str(tmp_path / "credentials.json"),
        **extra,
    )
    return env


def test_create_team_prints_a_token_once_and_stores_only_its_hash(tmp_path: Path) -> None:
    env = _env(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "api.admin", "create-team", "research"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    token = run.stdout.strip()
    assert token.startswith("gpj_") and len(token) > 30
    database = (tmp_path / "home" / "gpujobs.db").read_bytes()
    assert token.encode() not in database
    assert hash_token(token).encode() in database
    again = subprocess.run(
        [sys.executable, "-m", "api.admin", "create-team", "research"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 1
    assert "already exists" in again.stderr


@pytest.fixture
def standalone():  # type: ignore[no-untyped-def]
    # Run as root, trainers run as other uids: their interpreter and GPUJOBS_HOME must be
    # reachable by them, which pytest's tmp_path (0700) is not.
    tmp_path = open_directory()
    port = _free_port()
    env = _env(
        tmp_path,
        GPUJOBS_PORT=str(port),
        GPUJOBS_SCHEDULE_INTERVAL_S="0.5",
        GPUJOBS_RECONCILE_INTERVAL_S="0.5",
        GPUJOBS_TRAINER_PYTHON=trainer_python(),
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "worker.standalone"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    else:
        process.kill()
        pytest.fail(f"standalone did not start: {process.stdout.read() if process.stdout else ''}")
    yield url, tmp_path / "credentials.json"
    process.terminate()
    process.wait(timeout=30)
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_embedded_default_serves_the_api_with_the_printed_token(standalone) -> None:  # type: ignore[no-untyped-def]
    url, credentials_file = standalone
    credentials = json.loads(credentials_file.read_text())
    assert credentials["url"] == url
    assert oct(credentials_file.stat().st_mode & 0o777) == "0o600"
    headers = {"Authorization": f"Bearer {credentials['token']}"}
    body = {"name": "smoke", "trainer": {"steps": 10}, "capacity": {"types": ["on_demand"]}}
    created = httpx.post(f"{url}/v1/jobs", json=body, headers=headers)
    assert created.status_code == 201
    job_id = created.json()["id"]
    listed = httpx.get(f"{url}/v1/jobs", headers=headers).json()["items"]
    assert [j["id"] for j in listed] == [job_id]
    assert httpx.get(f"{url}/v1/jobs/{job_id}", headers=headers).json()["name"] == "smoke"
    cancelled = httpx.post(f"{url}/v1/jobs/{job_id}/cancel", headers=headers)
    assert cancelled.json()["status"] == "CANCELLED"


def test_a_stale_credentials_file_is_replaced_on_start(tmp_path: Path) -> None:
    """A token from another checkout's database would only get 401s: start writes a good one."""
    from api.database import make_engine, make_session_factory
    from api.migrate import upgrade_to_head
    from api.settings import Settings
    from worker.standalone import ensure_default_team, write_credentials

    settings = Settings(home=tmp_path / "home", credentials_file=tmp_path / "credentials.json")
    engine = make_engine(settings)
    upgrade_to_head(engine)
    factory = make_session_factory(engine)
    first = ensure_default_team(settings, factory)
    assert first is not None
    assert ensure_default_team(settings, factory) is None  # still valid: left alone
    write_credentials(settings.credentials_file, url=settings.api_url(), token="gpj_elsewhere")
    replaced = ensure_default_team(settings, factory)
    assert replaced is not None and replaced != first
    assert json.loads(settings.credentials_file.read_text())["token"] == replaced


def test_embedded_default_runs_a_job_and_serves_its_logs(standalone) -> None:  # type: ignore[no-untyped-def]
    url, credentials_file = standalone
    headers = {"Authorization": f"Bearer {json.loads(credentials_file.read_text())['token']}"}
    body = {
        "name": "tiny",
        "trainer": {
            "steps": 5,
            "batch_size": 2,
            "dataloader": {"num_workers": 0},
            "args": {"n_layer": 1, "n_embd": 16, "n_head": 2, "block_size": 16},
        },
        "capacity": {"types": ["on_demand"]},
        "estimated_hours": 0.01,
    }
    job_id = httpx.post(f"{url}/v1/jobs", json=body, headers=headers).json()["id"]
    with httpx.stream(
        "GET", f"{url}/v1/jobs/{job_id}/logs", params={"follow": "true"}, headers=headers,
        timeout=120,
    ) as response:  # fmt: skip
        assert response.status_code == 200
        followed = "".join(response.iter_text())
    job = httpx.get(f"{url}/v1/jobs/{job_id}", headers=headers).json()
    assert job["status"] == "SUCCEEDED", followed
    assert job["progress"]["step"] == 5
    assert "=== attempt 1: on_demand" in followed
    assert '"event": "done"' in followed
    logs = httpx.get(f"{url}/v1/jobs/{job_id}/logs", headers=headers).text
    assert '"event": "done"' in logs
    attempts = httpx.get(f"{url}/v1/jobs/{job_id}/attempts", headers=headers).json()
    assert [a["end_reason"] for a in attempts] == ["succeeded"]
    assert attempts[0]["cost"] > 0
