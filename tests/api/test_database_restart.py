"""PostgreSQL drops every connection (a restart, a failover): the API answers 503 at worst, and
recovers on its own. Connections idle for a while are pinged before use; ones just used are not
(a round trip per request), so a request on a dead one gets the retryable 503, never a 500."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from api.database import PING_AFTER_IDLE_S
from api.settings import Settings
from tests.conftest import PG_ADMIN_URL


def _drop_connections(settings: Settings) -> int:
    database = make_url(settings.database_url).database
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            return len(
                connection.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = :name AND pid <> pg_backend_pid()"
                    ),
                    {"name": database},
                ).all()
            )
    finally:
        admin.dispose()


@pytest.fixture
def postgres_only(settings: Settings) -> Settings:
    if not settings.database_url:
        pytest.skip("SQLite is a file: no connection to lose")
    return settings


def test_connections_dropped_while_idle_are_replaced_before_use(
    postgres_only: Settings, client: TestClient, auth: dict[str, str]
) -> None:
    assert client.get("/v1/jobs", headers=auth).status_code == 200
    assert _drop_connections(postgres_only) >= 1
    time.sleep(PING_AFTER_IDLE_S + 0.2)
    for _ in range(3):
        response = client.get("/v1/jobs", headers=auth)
        assert response.status_code == 200, response.text


def test_a_connection_dropped_just_after_use_costs_a_503_then_recovers(
    postgres_only: Settings, client: TestClient, auth: dict[str, str]
) -> None:
    assert client.get("/v1/jobs", headers=auth).status_code == 200
    assert _drop_connections(postgres_only) >= 1
    first = client.get("/v1/jobs", headers=auth)
    assert first.status_code in (200, 503), first.text
    if first.status_code == 503:
        assert first.json()["error"]["code"] and "Retry-After" in first.headers
    after = [client.get("/v1/jobs", headers=auth).status_code for _ in range(3)]
    assert after == [200, 200, 200]
