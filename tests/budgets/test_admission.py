"""Admission at submit: refuse what no capacity could run or the budget cannot pay for."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from api.money import month_start
from tests.budgets.support import ADMIN, add_attempt
from tests.conftest import job_body

T4 = {"gpu_models": ["T4"]}


def priced(name: str = "priced", **overrides: object) -> dict[str, object]:
    # 100 h on the cheapest T4 costs several dollars even on spot
    return job_body(name, resources=T4, estimated_hours=100, deadline_hours=400, **overrides)


def set_budget(client: TestClient, usd: float) -> None:
    response = client.put("/v1/admin/teams/team-a/budget", json={"monthly_usd": usd}, headers=ADMIN)
    assert response.status_code == 200


def jobs(client: TestClient, auth: dict[str, str]) -> list[dict[str, object]]:
    return client.get("/v1/jobs", headers=auth).json()["items"]


def test_over_budget_is_refused_with_the_numbers_and_nothing_is_inserted(
    client: TestClient, auth: dict[str, str]
) -> None:
    set_budget(client, 1.0)
    response = client.post("/v1/jobs", json=priced(), headers=auth)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "budget_exceeded"
    assert error["fields"][0]["field"] == "capacity"
    assert "remaining budget" in error["message"] and "$1.00" in error["message"]
    assert "on_budget_exceeded: defer" in error["message"]
    assert jobs(client, auth) == []


def test_over_budget_with_defer_is_accepted_as_pending(
    client: TestClient, auth: dict[str, str]
) -> None:
    set_budget(client, 1.0)
    body = priced(capacity={"on_budget_exceeded": "defer"})
    response = client.post("/v1/jobs", json=body, headers=auth)
    assert response.status_code == 201 and response.json()["status"] == "PENDING"
    assert len(jobs(client, auth)) == 1


def test_under_budget_and_without_a_budget_are_accepted(
    client: TestClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    assert client.post("/v1/jobs", json=priced(), headers=other_auth).status_code == 201
    set_budget(client, 1000.0)
    assert client.post("/v1/jobs", json=priced(), headers=auth).status_code == 201


def test_this_months_spend_counts_against_the_budget(
    client: TestClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    now = datetime.now(UTC)
    first = month_start(now)
    ended = first + (now - first) / 2
    add_attempt(session_factory, started_at=first, ended_at=ended, cost_microusd=999_000_000)
    set_budget(client, 1000.0)
    response = client.post("/v1/jobs", json=priced(), headers=auth)
    assert response.status_code == 422 and "$1.00" in response.json()["error"]["message"]


def test_a_free_reserved_slot_costs_nothing_against_the_budget(
    client: TestClient, auth: dict[str, str]
) -> None:
    reservation = {
        "cloud": "aws",
        "region": "us-east-1",
        "zone": "use1-az5",
        "instance_type": "g4dn.xlarge",
        "count": 1,
        "price_per_hour": 0.2,
    }
    assert client.post("/v1/admin/reservations", json=reservation, headers=ADMIN).status_code == 201
    set_budget(client, 0.0)
    assert client.post("/v1/jobs", json=priced(), headers=auth).status_code == 201


def test_specs_no_capacity_could_run_are_refused_naming_the_field(
    client: TestClient, auth: dict[str, str]
) -> None:
    cases = {
        "resources.gpu_models": job_body(resources={"gpu_models": ["Z9000"]}),
        "resources.gpus_per_node": job_body(resources={"gpu_models": ["T4"], "gpus_per_node": 3}),
        "resources.regions": job_body(resources={"regions": ["mars-1"]}),
        "capacity.max_price_per_hour": job_body(
            resources=T4, capacity={"max_price_per_hour": 0.01}
        ),
        "capacity.types": job_body(resources=T4, capacity={"types": ["reserved"]}),
    }
    for field, body in cases.items():
        response = client.post("/v1/jobs", json=body, headers=auth)
        assert response.status_code == 422, field
        assert response.json()["error"]["fields"][0]["field"] == field
    assert jobs(client, auth) == []
