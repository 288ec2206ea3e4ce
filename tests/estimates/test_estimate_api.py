"""POST /v1/estimate: ranked plans without creating a job, with reservations and outages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from api.auth import issue_token
from api.database import transaction
from api.models import CapacityOutage, Job, JobAttempt
from api.pricing.cost_model import LOCAL_RESTART_HOURS, RESTART_HOURS
from api.settings import Settings
from tests.budgets.support import ADMIN, add_attempt
from tests.conftest import job_body

URL = "/v1/estimate"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ZONE, TYPE = "use1-az5", "g4dn.xlarge"
# One T4 instance type in one region, so the zone under test is always among the plans.
RESOURCES = {"gpu_models": ["T4"], "regions": ["us-east-1"]}


def spec(**overrides: object) -> dict[str, object]:
    body = {"resources": RESOURCES, "estimated_hours": 4, "deadline_hours": 24}
    body.update(overrides)
    return job_body("estimated", **body)


def plans_in_zone(body: dict[str, object]) -> list[tuple[str, str | None]]:
    plans = body["plans"]
    assert isinstance(plans, list)
    return [
        (p["capacity_type"], p["reservation_id"])
        for p in plans
        if p["zone"] == ZONE and p["instance_type"] == TYPE and p["available"]
    ]


def test_ranked_plans_without_creating_a_job(client: TestClient, auth: dict[str, str]) -> None:
    response = client.post(URL, json=spec(), headers=auth)
    assert response.status_code == 200
    body = response.json()
    plans = body["plans"]
    assert plans and body["estimated_hours"] == 4 and body["remaining_budget"] is None
    first = plans[0]
    assert first["offer"]["gpu_model"] == "T4" and first["offer"]["region"] == "us-east-1"
    assert first["nodes"] == 1 and first["expected_cost"] > 0 and first["price_per_hour"] > 0
    assert first["checkpoint_every_seconds"] > 0 and 0 <= first["p_meet_deadline"] <= 1
    assert body["decision"] == "place" and first["chosen"] and first["why"] == body["reason"]
    assert not any(p["chosen"] for p in plans[1:]) and all(p["why"] for p in plans[1:])
    # after the best plan of each other capacity type, cheapest expected cost first
    rest = [p["expected_cost"] for p in plans[3:]]
    assert rest == sorted(rest)
    assert client.get("/v1/jobs", headers=auth).json()["items"] == []


def test_estimated_hours_is_required(client: TestClient, auth: dict[str, str]) -> None:
    response = client.post(URL, json=job_body(resources=RESOURCES), headers=auth)
    assert response.status_code == 422
    assert response.json()["error"]["fields"][0]["field"] == "estimated_hours"
    response = client.post(URL, json=spec(resources={"gpu_models": ["Z9000"]}), headers=auth)
    assert response.json()["error"]["fields"][0]["field"] == "resources.gpu_models"


def test_reserved_plans_use_free_reservation_nodes(
    client: TestClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    reservation = {"cloud": "aws", "region": "us-east-1", "zone": ZONE, "instance_type": TYPE}
    created = client.post(
        "/v1/admin/reservations",
        json={**reservation, "count": 2, "price_per_hour": 0.1},
        headers=ADMIN,
    ).json()
    body = client.post(URL, json=spec(), headers=auth).json()
    assert body["plans"][0]["reservation_id"] == created["id"]
    assert body["plans"][0]["capacity_type"] == "reserved"
    assert body["plans"][0]["expected_cost"] == 0
    started = datetime.now(UTC) - timedelta(minutes=5)
    add_attempt(session_factory, started_at=started, nodes=2, reservation_id=created["id"])
    body = client.post(URL, json=spec(), headers=auth).json()
    assert body["plans"][0]["reservation_id"] is None
    full = [p for p in body["plans"] if p["reservation_id"] == created["id"]]
    assert full and not full[0]["available"] and "free nodes" in full[0]["why"]


def test_zones_without_spot_capacity_are_left_out(
    client: TestClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    assert ("spot", None) in plans_in_zone(client.post(URL, json=spec(), headers=auth).json())
    now = datetime.now(UTC)
    with transaction(session_factory) as session:
        session.add(
            CapacityOutage(
                zone=ZONE, instance_type=TYPE, capacity_type="spot", until=now + timedelta(hours=1)
            )
        )
    in_zone = plans_in_zone(client.post(URL, json=spec(), headers=auth).json())
    assert ("spot", None) not in in_zone and ("on_demand", None) in in_zone
    with transaction(session_factory) as session:
        outage = session.get(CapacityOutage, (ZONE, TYPE, "spot"))
        assert outage is not None
        outage.until = now - timedelta(minutes=1)
    assert ("spot", None) in plans_in_zone(client.post(URL, json=spec(), headers=auth).json())


def test_the_teams_remaining_budget_is_shown(client: TestClient, auth: dict[str, str]) -> None:
    client.put("/v1/admin/teams/team-a/budget", json={"monthly_usd": 25}, headers=ADMIN)
    assert client.post(URL, json=spec(), headers=auth).json()["remaining_budget"] == 25


def test_checkpointing_so_often_that_no_work_gets_done_cannot_meet_the_deadline(
    client: TestClient, auth: dict[str, str]
) -> None:
    trainer = {"steps": 100, "checkpoint": {"every_seconds": 1e-9}}
    response = client.post(URL, json=spec(trainer=trainer), headers=auth)
    assert response.status_code == 200
    plans = response.json()["plans"]
    assert plans and all(p["p_meet_deadline"] == 0 for p in plans)


def test_the_local_launcher_quotes_a_restart_as_a_process_start(
    client: TestClient,
    auth: dict[str, str],
    settings: Settings,
    session_factory: sessionmaker[Session],
) -> None:
    # Measured: examples/first-run.yaml (0.02 h of work) was quoted $0.03 likely on `make run`
    # and billed $0.0018: each restart was priced as a Kubernetes node's 0.2 h of provisioning.
    body = yaml.safe_load((EXAMPLES / "first-run.yaml").read_text())
    # Its checkpoints every 500 steps (6 s) are priced at the default cost of one (30 s) until
    # the trainer has measured it: checkpointing by time keeps that out of what is measured here.
    body["trainer"]["checkpoint"] = {"every_seconds": 600}

    def quoted(test_client: TestClient) -> tuple[float, float]:
        response = test_client.post(URL, json=body, headers=auth)
        assert response.status_code == 200, response.text
        estimate = response.json()
        chosen = next(p for p in estimate["plans"] if p["chosen"])
        running = estimate["estimated_hours"] * chosen["price_per_hour"]
        return estimate["quote"]["typical_cost"], running

    likely, running = quoted(client)
    assert settings.restart_hours == LOCAL_RESTART_HOURS
    # Above the run: one process start.
    assert running < likely < 2 * running
    # The app's own settings price it, as its scheduler will (not the environment's): with a
    # node's restart the same spec is quoted at 11 times the run.
    on_nodes = settings.model_copy(update={"restart_hours": RESTART_HOURS})
    app = create_app(on_nodes, session_factory=session_factory, nudge=lambda task, job: None)
    with TestClient(app) as node_client:
        likely, running = quoted(node_client)
    assert likely > 8 * running


def test_a_checkpoint_the_team_measured_before_prices_the_next_quote(
    client: TestClient,
    auth: dict[str, str],
    other_auth: dict[str, str],
    session_factory: sessionmaker[Session],
) -> None:
    """examples/first-run.yaml checkpoints every 500 steps (6 s): each was priced at the default
    30 s, so every first run was quoted several times its bill. Once one run of the trainer has
    reported what a checkpoint stalls it, the team's next quote uses that."""
    body = yaml.safe_load((EXAMPLES / "first-run.yaml").read_text())

    def quoted(spec: dict[str, Any], headers: dict[str, str]) -> float:
        response = client.post(URL, json=spec, headers=headers)
        assert response.status_code == 200, response.text
        estimate = response.json()
        chosen = next(p for p in estimate["plans"] if p["chosen"])
        running = estimate["estimated_hours"] * chosen["price_per_hour"]
        return float(estimate["quote"]["typical_cost"] / running)

    assert quoted(body, auth) > 4  # times its run: the default checkpoint cost

    job = client.post("/v1/jobs", json=body, headers=auth).json()
    with transaction(session_factory) as session:
        row = session.get(Job, job["id"])
        assert row is not None
        job_token = issue_token(session, team_id=row.team_id, job_id=row.id)

    def report(**figures: float) -> None:
        url = f"/v1/jobs/{job['id']}/progress"
        response = client.post(url, json=figures, headers={"Authorization": f"Bearer {job_token}"})
        assert response.status_code == 200, response.text

    report(step=500, total_steps=6000, checkpoint_step=500, checkpoint_stall_s=0.04)
    assert 1 < quoted(body, auth) < 2
    # A later attempt reports no stall until its first checkpoint, and more jobs of the trainer
    # wait unmeasured: neither hides what was measured.
    report(step=520, total_steps=6000, checkpoint_step=500, checkpoint_stall_s=0)
    for n in range(3):
        queued = {**body, "name": f"first-run-{n}"}
        assert client.post("/v1/jobs", json=queued, headers=auth).status_code == 201
    assert 1 < quoted(body, auth) < 2
    bigger = {
        **body,
        "trainer": {**body["trainer"], "args": {**body["trainer"]["args"], "n_layer": 8}},
    }
    assert quoted(bigger, auth) > 4  # another model: nothing measured
    assert quoted(body, other_auth) > 4  # another team learns nothing from this one's jobs


def test_each_plans_hours_follow_the_speed_of_its_gpu(
    client: TestClient,
    auth: dict[str, str],
    settings: Settings,
    session_factory: sessionmaker[Session],
) -> None:
    # examples/gpt-small.yaml: 2 h on an A100, the first of [A100, H100, L4]. Every plan was
    # priced at 2 h, so the L4 (about a quarter of an A100's speed) looked the cheapest.
    body = yaml.safe_load((EXAMPLES / "gpt-small.yaml").read_text())
    body["capacity"] = {"types": ["on_demand"]}
    speeds = {"A100": 1.0, "H100": 2.0, "L4": 0.25}
    tabled = settings.model_copy(update={"gpu_speeds": speeds})
    app = create_app(tabled, session_factory=session_factory, nudge=lambda task, job: None)
    with TestClient(app) as tabled_client:
        response = tabled_client.post(URL, json=body, headers=auth)
    assert response.status_code == 200, response.text
    plans = response.json()["plans"]
    hours = {
        p["gpu_model"]: p["expected_cost"] / p["price_per_hour"] - settings.restart_hours
        for p in plans
    }
    assert set(hours) == set(speeds)
    for model, speed in speeds.items():
        assert hours[model] == pytest.approx(2.0 / speed, rel=0.02), model
    # The local launcher's processes run on this machine's CPU whatever the offer: alike.
    local = client.post(URL, json=body, headers=auth).json()["plans"]
    assert {round(p["expected_cost"] / p["price_per_hour"], 2) for p in local} == {
        round(2.0 + settings.restart_hours, 2)
    }


def test_the_speeds_a_teams_trainer_measured_replace_the_table_for_its_next_quote(
    auth: dict[str, str],
    other_auth: dict[str, str],
    settings: Settings,
    session_factory: sessionmaker[Session],
) -> None:
    """gpt-small ran at 100 samples/s on an A100 and 130 on an H100: 1.3 times, not the table's
    2. The team's next estimate of the same trainer prices the H100 by that; another team's, and
    another trainer's, keep the table."""
    body = yaml.safe_load((EXAMPLES / "gpt-small.yaml").read_text())
    body["capacity"] = {"types": ["on_demand"]}
    body["resources"]["regions"] = ["us-west4"]  # every plan among the 20 shown
    tabled = settings.model_copy(update={"gpu_speeds": {"A100": 1.0, "H100": 2.0, "L4": 0.25}})
    app = create_app(tabled, session_factory=session_factory, nudge=lambda task, job: None)

    def hours(
        client: TestClient, spec: dict[str, Any], headers: dict[str, str]
    ) -> dict[str, float]:
        response = client.post(URL, json=spec, headers=headers)
        assert response.status_code == 200, response.text
        return {
            p["gpu_model"]: p["expected_cost"] / p["price_per_hour"] - tabled.restart_hours
            for p in response.json()["plans"]
        }

    with TestClient(app) as client:
        assert hours(client, body, auth)["H100"] == pytest.approx(1.0, rel=0.02)
        job_id = client.post("/v1/jobs", json=body, headers=auth).json()["id"]
        with transaction(session_factory) as session:
            row = session.get(Job, job_id)
            assert row is not None
            token = issue_token(session, team_id=row.team_id, job_id=row.id)
        url = f"/v1/jobs/{job_id}/progress"
        for number, model, rate in ((1, "A100", 100.0), (2, "H100", 130.0)):
            with transaction(session_factory) as session:
                for open_attempt in session.query(JobAttempt).filter_by(job_id=job_id):
                    open_attempt.ended_at = open_attempt.ended_at or datetime.now(UTC)
                attempt = JobAttempt(
                    job_id=job_id, team_id=row.team_id, number=number, cloud="aws",
                    region="us-east-1", zone="use1-az1", instance_type=f"{model}.x",
                    gpu_model=model, gpu_count=1, nodes=1, capacity_type="on_demand",
                    price_per_hour=1.0, on_demand_price_per_hour=1.0, started_at=datetime.now(UTC),
                )  # fmt: skip
                session.add(attempt)
                session.flush()
                attempt_id = attempt.id
            report = {
                "step": 10 * number,
                "total_steps": 2000,
                "samples_per_s": rate,
                "attempt_id": attempt_id,
            }
            sent = client.post(url, json=report, headers={"Authorization": f"Bearer {token}"})
            assert sent.status_code == 200, sent.text

        learned = hours(client, body, auth)
        assert learned["A100"] == pytest.approx(2.0, rel=0.02)
        assert learned["H100"] == pytest.approx(2.0 / 1.3, rel=0.02)
        assert hours(client, body, other_auth)["H100"] == pytest.approx(1.0, rel=0.02)
        other_trainer = {**body, "trainer": {**body["trainer"], "amp": "off"}}
        assert hours(client, other_trainer, auth)["H100"] == pytest.approx(1.0, rel=0.02)
