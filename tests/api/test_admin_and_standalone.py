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
from devstack.confinement import open_directory, trainer_python, trainer_python_path


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


def admin_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "api.admin", *args], env=env, capture_output=True, text=True
    )


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


def test_the_cli_lists_creates_and_revokes_tokens(tmp_path: Path) -> None:
    env = _env(tmp_path)
    first = admin_cli(env, "create-team", "research").stdout.strip()
    admin_cli(env, "create-team", "vision")
    made = admin_cli(
        env, "create-token", "--team", "research", "--name", "ci", "--expires-in", "30d"
    )
    assert made.returncode == 0, made.stderr
    second = made.stdout.strip()
    assert second.startswith("gpj_") and second != first

    listing = admin_cli(env, "list-tokens", "--team", "research")
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert lines[0].split()[:4] == ["ID", "TEAM", "NAME", "PREFIX"]
    assert [line.split()[1:3] for line in lines[1:]] == [
        ["research", "initial"],
        ["research", "ci"],
    ]
    assert first not in listing.stdout and second not in listing.stdout
    listed = json.loads(admin_cli(env, "list-tokens", "--json").stdout)["items"]
    assert {t["team"] for t in listed} == {"research", "vision"}
    ci = next(t for t in listed if t["name"] == "ci")
    assert ci["expires_at"] is not None and ci["last_used_at"] is None

    revoked = admin_cli(env, "revoke-token", ci["id"])
    assert revoked.returncode == 0 and ci["id"] in revoked.stdout
    active = json.loads(admin_cli(env, "list-tokens", "--json").stdout)["items"]
    assert ci["id"] not in [t["id"] for t in active]
    everything = admin_cli(env, "list-tokens", "--all", "--team", "research").stdout
    assert "revoked" in everything

    missing = admin_cli(env, "revoke-token", "00000000-0000-7000-8000-000000000000")
    assert missing.returncode == 1 and "not found" in missing.stderr
    bad = admin_cli(env, "create-token", "--team", "research", "--expires-in", "soon")
    assert bad.returncode == 2 and "--expires-in" in bad.stderr
    nobody = admin_cli(env, "create-token", "--team", "nobody")
    assert nobody.returncode == 1 and "team 'nobody' not found" in nobody.stderr


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
        GPUJOBS_TRAINER_PYTHON_PATH=trainer_python_path(),
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


def test_the_default_team_is_not_an_admin_and_the_admin_token_is_kept_apart(  # type: ignore[no-untyped-def]
    standalone,
) -> None:
    """The attack of issue 9: the default team's token, stolen, must not read other teams."""
    url, credentials_file = standalone
    default = {"Authorization": f"Bearer {json.loads(credentials_file.read_text())['token']}"}
    admin_file = credentials_file.parent / "home" / "admin_token"
    assert oct(admin_file.stat().st_mode & 0o777) == "0o600"
    admin = {"Authorization": f"Bearer {admin_file.read_text().strip()}"}
    assert admin_file.read_text().strip() not in credentials_file.read_text()

    assert httpx.get(f"{url}/v1/admin/tokens", headers=default).status_code == 403
    assert (
        httpx.post(f"{url}/v1/admin/teams", json={"name": "x"}, headers=default).status_code == 403
    )
    created = httpx.post(f"{url}/v1/admin/teams", json={"name": "other"}, headers=admin)
    assert created.status_code == 201
    other = {"Authorization": f"Bearer {created.json()['token']}"}
    body = {"name": "secret", "trainer": {"steps": 10}, "capacity": {"types": ["on_demand"]}}
    theirs = httpx.post(f"{url}/v1/jobs", json=body, headers=other).json()["id"]
    assert httpx.get(f"{url}/v1/jobs/{theirs}", headers=default).status_code == 404
    assert httpx.get(f"{url}/v1/jobs", headers=default).json()["items"] == []
    assert httpx.get(f"{url}/v1/usage", headers=default).status_code == 200
    assert theirs not in httpx.get(f"{url}/v1/usage", headers=default).text
    assert httpx.get(f"{url}/v1/jobs/{theirs}", headers=admin).status_code == 200
    httpx.post(f"{url}/v1/jobs/{theirs}/cancel", headers=other)


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
    assert "=== attempt 1: on-demand" in followed
    assert '"event": "done"' in followed
    logs = httpx.get(f"{url}/v1/jobs/{job_id}/logs", headers=headers).text
    assert '"event": "done"' in logs
    attempts = httpx.get(f"{url}/v1/jobs/{job_id}/attempts", headers=headers).json()
    assert [a["end_reason"] for a in attempts] == ["succeeded"]
    assert attempts[0]["cost"] > 0


def test_the_first_start_says_its_migrations_in_one_line() -> None:
    """Not each migration's docstring over several lines (alembic's INFO): one line that names
    where the database came from and went to, and nothing of it on the next start."""
    tmp_path = open_directory()
    env = _env(
        tmp_path, GPUJOBS_PORT=str(_free_port()), GPUJOBS_TRAINER_PYTHON=trainer_python(),
        GPUJOBS_TRAINER_PYTHON_PATH=trainer_python_path(),
    )  # fmt: skip

    def started() -> list[str]:
        process = subprocess.Popen(
            [sys.executable, "-u", "-m", "worker.standalone"], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        lines: list[str] = []
        try:
            assert process.stdout is not None
            for line in process.stdout:
                lines.append(line.rstrip("\n"))
                if line.startswith("serving on") or len(lines) > 200:
                    break
        finally:
            process.terminate()
            process.wait(timeout=30)
        return lines

    try:
        first, second = started(), started()
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)
    assert not [line for line in first if "Running upgrade" in line], first
    [database] = [line for line in first if line.startswith("database: ")]
    assert "(migrated from empty to 00" in database, first
    assert "migrated" not in " ".join(second), second
