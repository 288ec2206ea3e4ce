from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpujobs.client import Client
from tests.conftest import make_team
from tests.sdk.server import LiveApi, live_api


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveApi]:
    # The SDK must not pick up the developer's own credentials.
    for name in ("GPUJOBS_URL", "GPUJOBS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUJOBS_CREDENTIALS_FILE", str(tmp_path / "no-credentials.json"))
    with live_api(tmp_path / "home") as running:
        yield running


@pytest.fixture
def team_token(api: LiveApi) -> str:
    return make_team(api.session_factory, "team-a")


@pytest.fixture
def gj(api: LiveApi, team_token: str) -> Iterator[Client]:
    with Client(api.url, team_token, retry=None) as client:
        yield client


@pytest.fixture
def other_token(api: LiveApi) -> str:
    return make_team(api.session_factory, "team-b")


@pytest.fixture
def env(api: LiveApi, team_token: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The CLI's environment: the test API and its token, and no terminal width (full tables:
    the tests read every column)."""
    monkeypatch.setenv("GPUJOBS_URL", api.url)
    monkeypatch.setenv("GPUJOBS_TOKEN", team_token)
    monkeypatch.delenv("COLUMNS", raising=False)
    return {"url": api.url, "token": team_token}
