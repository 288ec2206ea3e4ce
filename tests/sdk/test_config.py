"""Where the SDK finds the API and its token: arguments > environment > credentials file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpujobs.client import Client
from gpujobs.config import DEFAULT_URL, resolve
from tests.sdk.server import LiveApi, free_port


def _file(tmp_path: Path, **data: str) -> dict[str, str]:
    path = tmp_path / "credentials.json"
    path.write_text(json.dumps(data))
    return {"GPUJOBS_CREDENTIALS_FILE": str(path)}


def test_defaults_without_any_configuration(tmp_path: Path) -> None:
    env = {"GPUJOBS_CREDENTIALS_FILE": str(tmp_path / "absent.json")}
    resolved = resolve(environ=env)
    assert (resolved.url, resolved.token, resolved.source) == (DEFAULT_URL, None, "none")


def test_the_credentials_file_make_run_writes(tmp_path: Path) -> None:
    env = _file(tmp_path, url="http://127.0.0.1:8123/", token="from-file")
    resolved = resolve(environ=env)
    assert (resolved.url, resolved.token) == ("http://127.0.0.1:8123", "from-file")
    assert resolved.source == env["GPUJOBS_CREDENTIALS_FILE"]


def test_environment_beats_the_file_and_arguments_beat_both(tmp_path: Path) -> None:
    env = {
        **_file(tmp_path, url="http://file:1", token="from-file"),
        "GPUJOBS_URL": "http://env:2",
        "GPUJOBS_TOKEN": "from-env",
    }
    assert (resolve(environ=env).url, resolve(environ=env).token) == ("http://env:2", "from-env")
    explicit = resolve(url="http://arg:3", token="from-arg", environ=env)
    assert (explicit.url, explicit.token, explicit.source) == (
        "http://arg:3",
        "from-arg",
        "argument",
    )


def test_the_files_token_is_never_sent_to_another_server(tmp_path: Path) -> None:
    env = {**_file(tmp_path, url="http://127.0.0.1:8000", token="local"), "GPUJOBS_URL": "http://x"}
    assert resolve(environ=env).token is None
    assert resolve(url="http://127.0.0.1:8000/", environ=env).token == "local"


def test_a_broken_file_is_no_credentials(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    path.write_text("{not json")
    assert resolve(environ={"GPUJOBS_CREDENTIALS_FILE": str(path)}).token is None


def test_client_uses_the_environment(
    api: LiveApi, team_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUJOBS_URL", api.url)
    monkeypatch.setenv("GPUJOBS_TOKEN", team_token)
    with Client() as gj:
        assert list(gj.list()) == []


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Path]:
    """`make run`'s process: it serves the API and writes the credentials file."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
    env.update(
        GPUJOBS_HOME=str(tmp_path / "home"),
        GPUJOBS_PORT=str(port),
        GPUJOBS_CREDENTIALS_FILE=str(tmp_path / "credentials.json"),
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "worker.standalone"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and process.poll() is None, "standalone failed"
            time.sleep(0.2)
        yield tmp_path / "credentials.json"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_sdk_and_cli_find_the_embedded_server_through_its_credentials_file(
    standalone: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GPUJOBS_URL", "GPUJOBS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUJOBS_CREDENTIALS_FILE", str(standalone))
    with Client() as gj:
        assert gj.url == json.loads(standalone.read_text())["url"]
        assert list(gj.list()) == []
        assert gj.usage().total.cost_microusd == 0
    env = {**os.environ}
    run = subprocess.run(
        [sys.executable, "-m", "gpujobs.cli", "ls", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == []
