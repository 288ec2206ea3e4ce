"""Budgets hold committed spend: each accepted job's quote (90th percentile) is held until it ends.

Measured before: sequential submits drove spend to $6.04 against a $3.99 budget; 10 concurrent
submits against $3 were all accepted, then 6 failed after acceptance (naming the team's UUID).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.admission import Admission
from api.budgets.service import outstanding_holds, remaining_usd
from api.database import transaction
from api.errors import BudgetExceeded
from api.jobs import service as jobs
from api.models import Job, JobAttempt
from api.money import MICRO
from api.settings import Settings
from gpujobs.spec import JobSpec
from tests.budgets.support import ADMIN, team_id
from tests.worker.support import control_plane, principal
from worker.control import team_budgets
from worker.scheduler import schedule_once

T4 = {"gpu_models": ["T4"], "regions": ["us-east-1"]}
SPEC = {"name": "held", "trainer": {"steps": 100}, "resources": T4, "estimated_hours": 4}


def set_budget(client: TestClient, usd: float, team: str = "team-a") -> None:
    response = client.put(
        f"/v1/admin/teams/{team}/budget", json={"monthly_usd": usd}, headers=ADMIN
    )
    assert response.status_code == 200


def holds(factory: sessionmaker[Session]) -> list[int]:
    with factory() as session:
        return [
            int(h)
            for h in session.scalars(
                select(Job.quote_hold_microusd).where(Job.holds_budget.is_(True))
            )
        ]


def test_sequential_submits_never_commit_more_than_the_budget(
    client: TestClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    set_budget(client, 3.99)
    outcomes = [
        client.post("/v1/jobs", json=SPEC | {"name": f"held-{n}"}, headers=auth) for n in range(12)
    ]
    accepted = [r.json() for r in outcomes if r.status_code == 201]
    refused = [r.json() for r in outcomes if r.status_code == 422]
    assert accepted and refused and len(accepted) + len(refused) == 12
    assert sum(holds(session_factory)) <= 3.99 * MICRO
    quote = accepted[0]["quote"]
    assert quote["hold_cost"] >= quote["expected_cost"] > 0 and quote["p_meet_deadline"] == 1
    message = refused[0]["error"]["message"]
    assert "'team-a'" in message and team_id(session_factory) not in message
    budget = client.get("/v1/budget", headers=auth).json()
    assert budget["held_usd"] == pytest.approx(sum(holds(session_factory)) / MICRO)
    assert budget["remaining_usd"] == pytest.approx(3.99 - budget["held_usd"])
    assert budget["held_microusd"] == sum(holds(session_factory))
    assert budget["remaining_microusd"] == 3_990_000 - budget["held_microusd"]
    # The usage report's budget is the same model, built by the same function (nothing runs
    # yet, so nothing moves between the two requests).
    assert client.get("/v1/usage", headers=auth).json()["budgets"] == [budget]


def test_concurrent_submits_cannot_overshoot(
    settings: Settings, client: TestClient, session_factory: sessionmaker[Session]
) -> None:
    if not settings.database_url.startswith("postgresql"):
        pytest.skip("SQLite serializes writers itself; row locks are PostgreSQL's")
    who = principal(session_factory)
    set_budget(client, 3.0)
    start = threading.Barrier(10)
    results: list[str] = []

    def submit(number: int) -> None:
        spec = JobSpec.model_validate(SPEC | {"name": f"held-{number}"})
        start.wait()
        try:
            with transaction(session_factory) as session:
                jobs.submit(
                    session,
                    principal=who,
                    spec=spec,
                    idempotency_key=None,
                    admission=Admission(),
                )
            results.append("accepted")
        except BudgetExceeded:
            results.append("refused")

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(set(results)) == ["accepted", "refused"] and len(results) == 10
    assert sum(holds(session_factory)) <= 3.0 * MICRO
    assert len(holds(session_factory)) == results.count("accepted")


def test_the_hold_shrinks_as_the_job_spends_and_is_released_when_it_ends(
    client: TestClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    set_budget(client, 100.0)
    job_id = client.post("/v1/jobs", json=SPEC, headers=auth).json()["id"]
    team = team_id(session_factory)
    now = datetime.now(UTC)
    with session_factory() as session:
        (held,) = outstanding_holds(session, team_id=team, now=now).values()
    with transaction(session_factory) as session:
        session.add(
            JobAttempt(
                job_id=job_id,
                team_id=team,
                number=1,
                cloud="aws",
                region="us-east-1",
                zone="use1-az5",
                instance_type="g4dn.xlarge",
                gpu_model="T4",
                gpu_count=1,
                capacity_type="spot",
                nodes=1,
                price_per_hour=0.2,
                on_demand_price_per_hour=0.5,
                started_at=now - timedelta(hours=1),
            )
        )
    with session_factory() as session:
        assert outstanding_holds(session, team_id=team, now=now) == {job_id: held - 200_000}
        # what the job spent moved from "held" to "spent": what is left did not change
        before = remaining_usd(session, team_id=team, now=now)
    assert before == pytest.approx(100.0 - held / MICRO)
    with transaction(session_factory) as session:
        row = session.get(Job, job_id)
        assert row is not None
        row.status = "SUCCEEDED"
    with session_factory() as session:
        assert outstanding_holds(session, team_id=team, now=now) == {}


def test_a_job_deferred_for_budget_holds_nothing_and_waits(
    settings: Settings,
    client: TestClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
) -> None:
    set_budget(client, 0.5)
    body = {**SPEC, "capacity": {"on_budget_exceeded": "defer"}}
    response = client.post("/v1/jobs", json=body, headers=auth)
    assert response.status_code == 201 and response.json()["quote"]["hold_cost"] > 0.5
    assert holds(session_factory) == []
    cp = control_plane(settings, session_factory)
    cp.budgets = team_budgets
    result = schedule_once(cp)
    assert result.deferred == 1 and not result.placed
    job = client.get(f"/v1/jobs/{response.json()['id']}", headers=auth).json()
    assert job["status"] == "PENDING" and "'team-a'" in job["status_reason"]
    set_budget(client, 100.0)
    result = schedule_once(cp)
    assert len(result.placed) == 1
    assert len(holds(session_factory)) == 1  # placed: it holds its quote from now on


def test_the_estimate_and_admission_weigh_the_budget_alike(
    client: TestClient, auth: dict[str, str]
) -> None:
    body = {**SPEC, "deadline_hours": 24}
    free = client.post("/v1/estimate", json=body, headers=auth).json()
    plan, hold = free["plans"][0]["expected_cost"], free["quote"]["hold_cost"]
    assert hold > plan  # preemptions and the fallback cost more than one plan to the end
    # The job records the quote the estimate showed, its likely cost included.
    accepted = client.post("/v1/jobs", json=body | {"name": "quoted"}, headers=auth).json()
    assert accepted["quote"]["typical_cost"] == pytest.approx(free["quote"]["typical_cost"])
    assert 0 < accepted["quote"]["typical_cost"] <= accepted["quote"]["hold_cost"]
    client.post(f"/v1/jobs/{accepted['id']}/cancel", headers=auth)
    set_budget(client, round((plan + hold) / 2, 2))
    estimate = client.post("/v1/estimate", json=body, headers=auth).json()
    assert estimate["decision"] == "reject" and "'team-a'" in estimate["reason"]
    response = client.post("/v1/jobs", json=body, headers=auth)
    assert response.status_code == 422 and response.json()["error"]["code"] == "budget_exceeded"
