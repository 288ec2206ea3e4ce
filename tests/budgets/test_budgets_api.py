"""Budgets: admins set, read and remove a team's monthly budget; teams read their own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from api.budgets.service import commitment_us, remaining_usd
from api.database import transaction
from api.money import US_PER_HOUR, month_start
from tests.budgets.support import ADMIN, add_attempt, team_id

URL = "/v1/admin/teams/team-a/budget"


def test_only_admins_manage_budgets(client: TestClient, auth: dict[str, str]) -> None:
    assert client.put(URL, json={"monthly_usd": 5}, headers=auth).status_code == 403
    assert client.get(URL, headers=auth).status_code == 403
    forbidden = client.delete(URL, headers=auth)
    assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "forbidden"
    assert client.get(URL).status_code == 401


def test_set_read_and_remove_a_budget(
    client: TestClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    put = client.put(URL, json={"monthly_usd": 50}, headers=ADMIN)
    assert put.status_code == 200
    assert put.json()["monthly_usd"] == 50 and put.json()["remaining_usd"] == 50
    assert put.json()["monthly_microusd"] == put.json()["remaining_microusd"] == 50_000_000
    assert client.put(URL, json={"monthly_usd": 75.5}, headers=ADMIN).json()["monthly_usd"] == 75.5
    own = client.get("/v1/budget", headers=auth).json()
    assert own["team"] == "team-a" and own["remaining_usd"] == 75.5 and own["spent_usd"] == 0
    other = client.get("/v1/budget", headers=other_auth).json()
    assert other["team"] == "team-b" and other["monthly_usd"] is None
    assert other["remaining_usd"] is None
    assert client.delete(URL, headers=ADMIN).status_code == 204
    assert client.delete(URL, headers=ADMIN).status_code == 204  # idempotent
    assert client.get(URL, headers=ADMIN).json()["monthly_usd"] is None


def test_spend_this_month_reduces_what_is_left(
    client: TestClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    now = datetime.now(UTC)
    first = month_start(now)
    quarter = (now - first) / 4
    add_attempt(
        session_factory,
        started_at=first + quarter,
        ended_at=first + 2 * quarter,
        cost_microusd=12_340_000,
    )
    add_attempt(  # last month: does not count
        session_factory,
        started_at=first - timedelta(days=3),
        ended_at=first - timedelta(days=2),
        cost_microusd=99_000_000,
    )
    add_attempt(session_factory, started_at=None)  # never started: costs nothing
    client.put(URL, json={"monthly_usd": 20}, headers=ADMIN)
    body = client.get(URL, headers=ADMIN).json()
    assert body["spent_usd"] == 12.34 and body["remaining_usd"] == 7.66
    assert (body["spent_microusd"], body["held_microusd"]) == (12_340_000, 0)
    assert body["remaining_microusd"] == 7_660_000
    assert client.get("/v1/budget", headers=auth).json() == body


def test_remaining_counts_running_attempts_up_to_now(
    client: TestClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    now = datetime(2030, 5, 20, 12, tzinfo=UTC)
    add_attempt(session_factory, started_at=now - timedelta(hours=3), price_per_hour=2.5)
    owner = team_id(session_factory)
    with transaction(session_factory) as session:
        assert remaining_usd(session, team_id=owner, now=now) is None
    client.put(URL, json={"monthly_usd": 100}, headers=ADMIN)
    with transaction(session_factory) as session:
        assert remaining_usd(session, team_id=owner, now=now, horizon_us=0) == 92.5
        # A running job also holds its burn until the next checks (api.budgets.enforcement).
        held = 2.5 * commitment_us() / US_PER_HOUR
        assert remaining_usd(session, team_id=owner, now=now) == pytest.approx(92.5 - held)


def test_bad_budget_requests_name_the_field(client: TestClient, auth: dict[str, str]) -> None:
    unknown = client.put("/v1/admin/teams/nobody/budget", json={"monthly_usd": 1}, headers=ADMIN)
    assert unknown.status_code == 404
    negative = client.put(URL, json={"monthly_usd": -1}, headers=ADMIN)
    assert negative.status_code == 422
    assert negative.json()["error"]["fields"][0]["field"] == "monthly_usd"
    extra = client.put(URL, json={"monthly_usd": 1, "currency": "eur"}, headers=ADMIN)
    assert extra.status_code == 422
    assert client.get("/v1/budget", headers=ADMIN).status_code == 403  # admin has no team
