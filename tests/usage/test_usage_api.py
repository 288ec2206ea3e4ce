"""GET /v1/usage against a ledger built by hand (see ledger_seed), on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tests.usage import ledger_seed as L

PERIOD = {"from": L.START.isoformat(), "to": L.END.isoformat()}
ADMIN = {"Authorization": "Bearer admin-secret-for-tests"}


@pytest.fixture
def seeded(session_factory: sessionmaker[Session]) -> L.Seeded:
    return L.seed(session_factory)


def bearer(seeded: L.Seeded, team: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {seeded.tokens[team]}"}


def usage(client: TestClient, headers: dict[str, str], **params: str) -> dict[str, Any]:
    response = client.get("/v1/usage", params={**PERIOD, **params}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def costs(report: dict[str, Any]) -> dict[str, int]:
    return {g["label"] or g["key"]: g["cost_microusd"] for g in report["groups"]}


def test_a_team_sees_its_own_figures_to_the_cent(client: TestClient, seeded: L.Seeded) -> None:
    report = usage(client, bearer(seeded, "team-a"))
    assert (report["from"], report["to"], report["group_by"]) == (
        "2025-03-01T00:00:00Z",
        "2025-03-03T00:00:00Z",
        "team",
    )
    [group] = report["groups"]
    assert group["key"] == "team-a"
    assert group == report["total"] | {"key": "team-a"}
    expected = L.TEAM_A
    assert group["cost_microusd"] == expected["cost"]
    assert group["cost"] == 441.84
    assert group["on_demand_cost_microusd"] == expected["on_demand"]
    assert group["on_demand_cost"] == 517.706
    assert group["savings_microusd"] == expected["on_demand"] - expected["cost"] == 75_866_000
    assert group["savings_pct"] == 14.65  # 75.866 / 517.706
    assert group["gpu_hours"] == expected["gpu_hours"]
    assert group["preemptions"] == expected["preemptions"]
    assert group["lost_gpu_hours"] == expected["lost_gpu_hours"]
    assert group["lost_cost_microusd"] == expected["lost_cost"]
    assert (group["attempts"], group["running"]) == (4, 1)
    assert group["cost_microusd_by_capacity_type"] == L.BY_CAPACITY_A


@pytest.mark.parametrize(
    ("group_by", "expected"),
    [
        ("job", L.BY_JOB_A),
        ("instance_type", L.BY_INSTANCE_A),
        ("capacity_type", L.BY_CAPACITY_A),
        ("day", L.BY_DAY_A),
    ],
)
def test_every_grouping_adds_up_to_the_same_total(
    client: TestClient, seeded: L.Seeded, group_by: str, expected: dict[str, int]
) -> None:
    report = usage(client, bearer(seeded, "team-a"), group_by=group_by)
    assert costs(report) == expected
    assert sum(expected.values()) == report["total"]["cost_microusd"] == L.TEAM_A["cost"]
    assert report["total"]["preemptions"] == L.TEAM_A["preemptions"]
    assert report["total"]["lost_cost_microusd"] == L.TEAM_A["lost_cost"]


def test_groups_carry_preemptions_and_lost_work(client: TestClient, seeded: L.Seeded) -> None:
    by_job = {
        g["label"]: g for g in usage(client, bearer(seeded, "team-a"), group_by="job")["groups"]
    }
    assert by_job["llm"]["key"] == seeded.jobs["llm"]
    assert (by_job["llm"]["preemptions"], by_job["llm"]["lost_cost_microusd"]) == (1, 6_000_000)
    assert (by_job["vision"]["preemptions"], by_job["vision"]["lost_cost_microusd"]) == (1, 0)
    assert by_job["vision"]["running"] == 1
    by_day = usage(client, bearer(seeded, "team-a"), group_by="day")["groups"]
    assert [(g["key"], g["preemptions"], g["lost_gpu_hours"]) for g in by_day] == [
        ("2025-03-01", 1, 4.0),
        ("2025-03-02", 1, 0.0),
    ]
    assert by_day[0]["cost_microusd_by_capacity_type"] == {
        "on_demand": 355_008_333,
        "spot": 36_600_000,
    }


def test_teams_are_isolated_and_an_admin_sees_all(client: TestClient, seeded: L.Seeded) -> None:
    b = usage(client, bearer(seeded, "team-b"), group_by="job")
    assert costs(b) == {"etl": L.TEAM_B["cost"]}
    assert b["total"]["on_demand_cost_microusd"] == L.TEAM_B["on_demand"]
    assert [budget["team"] for budget in b["budgets"]] == ["team-b"]

    everyone = usage(client, ADMIN)
    assert costs(everyone) == {"team-a": L.TEAM_A["cost"], "team-b": L.TEAM_B["cost"]}
    assert everyone["total"]["cost_microusd"] == 445_240_000
    assert everyone["total"]["gpu_hours"] == 154.0
    assert [budget["team"] for budget in everyone["budgets"]] == ["team-a", "team-b"]


def test_budgets_count_the_current_month(client: TestClient, seeded: L.Seeded) -> None:
    report = client.get("/v1/usage", headers=ADMIN).json()
    budgets = {b["team"]: b for b in report["budgets"]}
    assert budgets["team-b"]["monthly_microusd"] == L.BUDGET_B
    assert budgets["team-b"]["spent_microusd"] == L.USED_B_THIS_MONTH
    assert budgets["team-b"]["held_microusd"] == 0  # its only job has ended
    assert budgets["team-b"]["remaining_microusd"] == L.BUDGET_B - L.USED_B_THIS_MONTH
    assert (budgets["team-b"]["spent_usd"], budgets["team-b"]["remaining_usd"]) == (5.0, 95.0)
    assert budgets["team-a"]["monthly_microusd"] is None
    assert budgets["team-a"]["remaining_usd"] is None
    # One model: the team's own budget route answers the same object (team-b runs nothing now,
    # so its figures do not move between the two requests).
    own = client.get("/v1/budget", headers=bearer(seeded, "team-b")).json()
    assert own == budgets["team-b"]
    # The default period is this calendar month so far.
    assert report["from"].endswith("-01T00:00:00Z")
    assert report["to"] == report["generated_at"]
    assert costs(report)["team-b"] == L.USED_B_THIS_MONTH


def test_a_period_cuts_attempts_at_its_edges(client: TestClient, seeded: L.Seeded) -> None:
    # 12:00-13:30 on 03-01: 1 h of a1 (12.00), 20 min of a2 (10.923333...), nothing else.
    report = usage(
        client,
        bearer(seeded, "team-a"),
        **{"from": "2025-03-01T12:00:00Z", "to": "2025-03-01T13:30:00Z"},
        group_by="capacity_type",
    )
    assert costs(report) == {"spot": 12_000_000, "on_demand": 10_923_333}
    # The preemption at 13:00 is inside; a1's lost half hour was 12:30-13:00.
    assert report["total"]["lost_cost_microusd"] == 6_000_000


def test_invalid_requests_are_refused(client: TestClient, seeded: L.Seeded) -> None:
    a = bearer(seeded, "team-a")
    backwards = client.get(
        "/v1/usage", params={"from": PERIOD["to"], "to": PERIOD["from"]}, headers=a
    )
    assert backwards.status_code == 422
    assert backwards.json()["error"]["fields"][0]["field"] == "from"
    assert client.get("/v1/usage", params={"group_by": "planet"}, headers=a).status_code == 422
    for not_a_timestamp in ("yesterday", "0.5", "2025-03-01", "2025-03-01T00:00:00"):
        refused = client.get("/v1/usage", params={"from": not_a_timestamp}, headers=a)
        assert refused.status_code == 422, not_a_timestamp
        assert refused.json()["error"]["fields"][0]["field"] == "from"
    far = {"from": "0001-01-01T00:00:00+01:00"}
    assert client.get("/v1/usage", params=far, headers=a).status_code == 422
    assert client.get("/v1/usage").status_code == 401
