"""A job's placement (its latest attempt) and its cost so far, as the server computes them:
ended attempts at their recorded cost, a running one at its price up to the response."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session, sessionmaker

from api.auth import issue_token
from api.database import transaction
from api.models import Job, JobAttempt, utcnow
from api.money import cost_microusd
from tests.conftest import job_body

RUNNING_PRICE = 1.006


def _place(factory: sessionmaker[Session], job_id: str, number: int, **fields: Any) -> None:
    with transaction(factory) as session:
        job = session.get(Job, job_id)
        assert job is not None
        session.add(
            JobAttempt(
                job_id=job.id, team_id=job.team_id, number=number, cloud="aws",
                region="us-east-1", instance_type="g5.xlarge", gpu_model="A10G", gpu_count=1,
                nodes=1, on_demand_price_per_hour=1.006, **fields,
            )
        )  # fmt: skip
        job.attempts_count = number


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def count(*args: Any) -> None:
        seen.append(args[2])

    event.listen(engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", count)


def test_jobs_carry_their_placement_and_the_servers_cost(
    client: TestClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    submit = lambda name: client.post("/v1/jobs", json=job_body(name), headers=auth).json()["id"]  # noqa: E731
    never, cheap, moved = submit("never"), submit("cheap"), submit("moved")
    now = utcnow()
    _place(
        session_factory, cheap, 1, zone="use1-az4", capacity_type="spot", price_per_hour=0.41,
        started_at=now - timedelta(minutes=2), ended_at=now - timedelta(minutes=1),
        end_reason="succeeded", cost_microusd=4_200,
    )  # fmt: skip
    _place(
        session_factory, moved, 1, zone="use1-az2", capacity_type="spot", price_per_hour=0.39,
        started_at=now - timedelta(minutes=58), ended_at=now - timedelta(minutes=31),
        end_reason="preempted", cost_microusd=175_500,
    )  # fmt: skip
    started = now - timedelta(minutes=29)
    _place(
        session_factory, moved, 2, zone="use1-az1", capacity_type="on_demand",
        price_per_hour=RUNNING_PRICE, started_at=started,
    )  # fmt: skip

    before = utcnow()
    listed = {j["id"]: j for j in client.get("/v1/jobs", headers=auth).json()["items"]}
    fetched = client.get(f"/v1/jobs/{moved}", headers=auth).json()
    after = utcnow()

    assert listed[never]["placement"] is None and listed[never]["cost_microusd"] == 0
    assert listed[cheap]["cost_microusd"] == 4_200 and listed[cheap]["cost"] == 0.0042
    assert listed[cheap]["placement"]["capacity_type"] == "spot"
    assert listed[cheap]["placement"]["ended_at"] is not None

    accrued = (
        cost_microusd(price_per_hour=RUNNING_PRICE, started_at=started, ended_at=before),
        cost_microusd(price_per_hour=RUNNING_PRICE, started_at=started, ended_at=after),
    )
    for job in (listed[moved], fetched):
        assert 175_500 + accrued[0] <= job["cost_microusd"] <= 175_500 + accrued[1]
        assert job["cost"] == job["cost_microusd"] / 1_000_000
        placement = job["placement"]
        assert placement["attempt"] == 2 and placement["ended_at"] is None
        assert (placement["capacity_type"], placement["zone"]) == ("on_demand", "use1-az1")
        assert (placement["gpu_count"], placement["gpu_model"], placement["nodes"]) == (
            1,
            "A10G",
            1,
        )


def test_listing_costs_one_query_however_many_jobs(
    client: TestClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    engine: Engine,
) -> None:
    def list_statements() -> int:
        client.get("/v1/jobs", headers=auth)  # the token's last use is written at most once
        with statements(engine) as seen:
            assert client.get("/v1/jobs", headers=auth).status_code == 200
        return len(seen)

    now = utcnow()
    for i in range(6):
        job_id = client.post("/v1/jobs", json=job_body(f"j{i}"), headers=auth).json()["id"]
        for number in (1, 2):
            _place(
                session_factory, job_id, number, zone="use1-az1", capacity_type="spot",
                price_per_hour=0.4, started_at=now, ended_at=now, end_reason="preempted",
                cost_microusd=1,
            )  # fmt: skip
        if i == 0:
            one = list_statements()
    assert one > 0 and list_statements() == one


def test_a_progress_report_records_the_gpu_its_rate_was_measured_on(
    client: TestClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    """The scheduler converts a measured rate between GPU models (api.pricing.gpu_speed), so it
    must know the model: the reporting attempt's, which the trainer cannot name itself. The
    attempt keeps the rate (api.placement.throughput) only from a report that names it."""
    job_id = client.post("/v1/jobs", json=job_body("rate"), headers=auth).json()["id"]
    _place(
        session_factory, job_id, 1, zone="use1-az4", capacity_type="spot", price_per_hour=0.41,
        started_at=utcnow(),
    )  # fmt: skip
    with transaction(session_factory) as session:
        row = session.get(Job, job_id)
        assert row is not None
        job_token = issue_token(session, team_id=row.team_id, job_id=row.id)
    url = f"/v1/jobs/{job_id}/progress"
    headers = {"Authorization": f"Bearer {job_token}"}
    report = {"step": 3, "total_steps": 10, "samples_per_s": 12.5}
    assert client.post(url, json=report, headers=headers).status_code == 200
    shown = client.get(f"/v1/jobs/{job_id}", headers=auth).json()
    assert shown["progress"]["gpu_model"] == "A10G"
    with session_factory() as session:
        [attempt] = session.query(JobAttempt).filter_by(job_id=job_id).all()
        assert attempt.samples_per_s is None  # the report named no attempt
    named = report | {"attempt_id": attempt.id, "samples_per_s": 14.0}
    assert client.post(url, json=named, headers=headers).status_code == 200
    with session_factory() as session:
        assert session.get(JobAttempt, attempt.id).samples_per_s == 14.0  # type: ignore[union-attr]
