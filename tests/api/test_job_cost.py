"""A job's placement (its latest attempt) and its cost so far, as the server computes them:
ended attempts at their recorded cost, a running one at its price up to the response."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session, sessionmaker

from api.auth import issue_token
from api.database import transaction
from api.models import Job, JobAttempt, utcnow
from api.money import cost_microusd
from api.placement.states import remaining_hours
from api.progress import read
from gpujobs.spec import JobSpec
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


def _running_with_token(
    client: TestClient, auth: dict[str, str], factory: sessionmaker[Session], name: str
) -> tuple[str, str, str]:
    """A submitted job of 10,000 steps with a running attempt: its id, the job's token and the
    attempt's id."""
    body = job_body(name, trainer={"steps": 10_000})
    job_id = client.post("/v1/jobs", json=body, headers=auth).json()["id"]
    _place(factory, job_id, 1, zone="use1-az4", capacity_type="spot", price_per_hour=0.41,
           started_at=utcnow())  # fmt: skip
    with transaction(factory) as session:
        row = session.get(Job, job_id)
        assert row is not None
        token = issue_token(session, team_id=row.team_id, job_id=row.id)
        [attempt] = session.query(JobAttempt).filter_by(job_id=job_id).all()
        return job_id, token, attempt.id


def _reported(factory: sessionmaker[Session], job_id: str, seconds_ago: float) -> None:
    """The job's last rate-bearing report as if it came `seconds_ago`: the next one's window."""
    with transaction(factory) as session:
        job = session.get(Job, job_id)
        assert job is not None
        if job.progress is None:
            return  # no report yet: the next is the attempt's first
        then = utcnow() - timedelta(seconds=seconds_ago)
        job.progress = {**job.progress, "rate_at": then.isoformat()}


def test_one_slow_window_barely_moves_the_rate_the_work_left_is_counted_from(
    client: TestClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    """CI, stop 29: a standby's trainer starting beside the running one on two cores slowed one
    report's window to a tenth of the attempt's steady rate, the scheduler counted ten times
    the work left from it, and moved the job to on-demand and back. The attempt's rate is its
    windows' mean over time (api.jobs.measured_rate); a lasting change is believed."""
    job_id, token, attempt_id = _running_with_token(client, auth, session_factory, "slowed")
    url, headers = f"/v1/jobs/{job_id}/progress", {"Authorization": f"Bearer {token}"}
    steady = 400.0
    window = {"attempt_id": attempt_id, "step": 40, "total_steps": 10_000}

    def report(rate: float, seconds: float = 5.0) -> tuple[float, float]:
        _reported(session_factory, job_id, seconds)
        body = window | {"samples_per_s": rate}
        assert client.post(url, json=body, headers=headers).status_code == 200
        with session_factory() as session:
            job, attempt = session.get(Job, job_id), session.get(JobAttempt, attempt_id)
            assert job is not None and job.progress is not None and attempt is not None
            spec = JobSpec.from_stored(job.spec)
            left = remaining_hours(spec, progress=read(job.progress), resume_from_step=0)
            assert job.progress["samples_per_s"] == attempt.samples_per_s  # one rate, end to end
            return float(attempt.samples_per_s or 0.0), left

    assert report(steady / 3)[0] == steady / 3  # the warm-up window: all it knows yet
    for _ in range(24):  # two minutes at its steady rate
        rate, steady_left = report(steady)
    assert rate == pytest.approx(steady)
    rate, left = report(steady / 10)
    assert rate > steady * 0.9  # taken alone: a tenth
    assert left < steady_left * 1.15  # not ten times the work
    for _ in range(36):  # the slowdown lasts: three minutes of windows
        rate, left = report(steady / 10)
    assert rate < steady / 10 * 1.5
    assert left > steady_left * 6
    # A report without a rate (a trainer that measures none) keeps the attempt's.
    assert client.post(url, json=window, headers=headers).status_code == 200
    shown = client.get(f"/v1/jobs/{job_id}", headers=auth).json()["progress"]
    assert shown["samples_per_s"] == rate


def test_a_window_sent_again_counts_once_in_the_rate(
    client: TestClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    """The trainer sends its last window again as a checkpoint completes, and its reporter posts
    a report again when the answer to it was lost: the same window, at the same `measured_at`.
    Counted twice, it would weigh over the seconds since as if measured over them."""
    job_id, token, attempt_id = _running_with_token(client, auth, session_factory, "resent")
    url, headers = f"/v1/jobs/{job_id}/progress", {"Authorization": f"Bearer {token}"}
    start = utcnow()

    def report(rate: float, at: float, **more: Any) -> float:
        _reported(session_factory, job_id, 5.0)
        measured = (start + timedelta(seconds=at)).isoformat()
        body = {"attempt_id": attempt_id, "step": 40, "samples_per_s": rate} | more
        response = client.post(url, json=body | {"measured_at": measured}, headers=headers)
        assert response.status_code == 200
        with session_factory() as session:
            attempt = session.get(JobAttempt, attempt_id)
            assert attempt is not None and attempt.samples_per_s is not None
            return attempt.samples_per_s

    report(100.0, 0)  # the warm-up
    assert report(400.0, 5) == pytest.approx(400.0)
    slowed = report(40.0, 10)
    assert slowed < 400.0
    assert report(40.0, 10, checkpoint_step=40) == slowed  # the checkpoint's copy
    assert report(40.0, 10) == slowed  # the retried post
    # A report that says nothing of its window (a trainer of the team's own) is counted, and
    # leaves the last window's time as it was: its copy still counts once.
    _reported(session_factory, job_id, 5.0)
    undated = client.post(url, json={"attempt_id": attempt_id, "step": 41, "samples_per_s": 400.0},
                          headers=headers)  # fmt: skip
    assert undated.status_code == 200
    with session_factory() as session:
        counted = session.get(JobAttempt, attempt_id).samples_per_s  # type: ignore[union-attr]
    assert counted is not None and counted > slowed
    assert report(40.0, 10) == counted
    slowed = counted
    with session_factory() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.resume_from_step == 40  # the copy's checkpoint counts
    assert report(400.0, 15) > slowed  # the next window counts
    # Another attempt's windows start afresh, whatever its trainer's clock says.
    with transaction(session_factory) as session:
        attempt = session.get(JobAttempt, attempt_id)
        assert attempt is not None
        attempt.ended_at = utcnow()
    _place(session_factory, job_id, 2, zone="use1-az4", capacity_type="on_demand",
           price_per_hour=1.006, started_at=utcnow())  # fmt: skip
    with session_factory() as session:
        [second] = session.query(JobAttempt).filter_by(job_id=job_id, number=2).all()
    attempt_id = second.id
    assert report(250.0, 0) == 250.0  # measured before the first attempt's last window
    # Its trainer relaunched on a clock behind the last one: its windows still count.
    assert report(100.0, -60) < 250.0


def test_a_window_time_without_its_zone_is_refused_by_name(
    client: TestClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    """A time without a zone would be compared with the server's by guesswork."""
    job_id, token, attempt_id = _running_with_token(client, auth, session_factory, "naive")
    body = {"attempt_id": attempt_id, "step": 1, "samples_per_s": 5.0,
            "measured_at": "2026-12-05T10:00:00"}  # fmt: skip
    response = client.post(
        f"/v1/jobs/{job_id}/progress", json=body, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 422
    assert "measured_at" in response.text
