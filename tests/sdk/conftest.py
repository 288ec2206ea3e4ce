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
