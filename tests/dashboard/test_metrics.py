"""GET /metrics: valid Prometheus text, jobs by status from the database, and the hooks.
Money and per-team series only for the metrics token."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session, sessionmaker

from api import metrics
from api.app import create_app
from api.database import transaction
from api.models import Job, JobAttempt, utcnow
from api.money import month_start
from api.settings import Settings
from tests.conftest import job_body

METRICS_TOKEN = "metrics-secret-for-tests"
METRICS_AUTH = {"Authorization": f"Bearer {METRICS_TOKEN}"}


def scrape(
    client: TestClient, headers: dict[str, str] | None = None
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics", headers=headers or {})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_jobs_are_counted_by_status_at_scrape_time(
    client: TestClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    ids = [
        client.post("/v1/jobs", json=job_body(f"j{i}"), headers=auth).json()["id"] for i in range(3)
    ]
    client.post("/v1/jobs", json=job_body("theirs"), headers=other_auth)
    client.post(f"/v1/jobs/{ids[0]}/cancel", headers=auth)
    samples = scrape(client)
    assert value(samples, "gpujobs_jobs", status="PENDING") == 3
    assert value(samples, "gpujobs_jobs", status="CANCELLED") == 1
    assert value(samples, "gpujobs_jobs", status="RUNNING") == 0
    assert ("gpujobs_jobs", (("status", "SUCCEEDED"),)) in samples


def test_the_schedulers_hooks_show_up(client: TestClient) -> None:
    before = scrape(client)
    metrics.record_decision("place", 0.02)
    metrics.record_decision("place", 0.5)
    metrics.record_decision("defer", 0.001)
    metrics.record_preemption()
    metrics.record_dollars(12.5)
    metrics.record_dollars(-3)  # never decreases a counter
    after = scrape(client)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("gpujobs_scheduling_decisions_total", kind="place") == 2
    assert delta("gpujobs_scheduling_decisions_total", kind="defer") == 1
    assert delta("gpujobs_scheduling_decision_seconds_count", kind="place") == 2
    assert delta("gpujobs_scheduling_decision_seconds_bucket", kind="place", le="0.025") == 1
    assert delta("gpujobs_preemptions_total") == 1
    assert not any(name.startswith("gpujobs_dollars") for name, _ in after)  # money: not public


def test_request_latency_is_labelled_by_route_template(
    client: TestClient, auth: dict[str, str]
) -> None:
    labels = {"route": "/v1/jobs/{job_id}", "method": "GET", "status": "404"}
    before = scrape(client)
    for _ in range(3):
        client.get("/v1/jobs/00000000-0000-7000-8000-000000000000", headers=auth)
    client.get("/no/such/path")
    after = scrape(client)
    name = "gpujobs_http_request_duration_seconds_count"
    assert value(after, name, **labels) - value(before, name, **labels) == 3
    unmatched = {"route": "unmatched", "method": "GET", "status": "404"}
    assert value(after, name, **unmatched) - value(before, name, **unmatched) == 1
    assert not any("00000000" in str(key) for key in after)


@pytest.fixture
def metrics_client(
    settings: Settings, session_factory: sessionmaker[Session]
) -> Iterator[TestClient]:
    """The same database, served by an app that has a metrics token configured."""
    configured = settings.model_copy(update={"metrics_token": METRICS_TOKEN})
    app = create_app(configured, session_factory=session_factory, nudge=lambda task, job: None)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def _seed_spend(factory: sessionmaker[Session], *, job_id: str, microusd: int) -> None:
    """A closed attempt this month that cost `microusd`."""
    start = month_start(utcnow()) + timedelta(seconds=1)
    with transaction(factory) as session:
        job = session.get(Job, job_id)
        assert job is not None
        session.add(
            JobAttempt(
                job_id=job.id,
                team_id=job.team_id,
                number=1,
                cloud="aws",
                region="us-east-1",
                zone="us-east-1a",
                instance_type="p4d.24xlarge",
                gpu_model="A100",
                gpu_count=8,
                capacity_type="on_demand",
                nodes=1,
                price_per_hour=32.0,
                on_demand_price_per_hour=32.0,
                started_at=start,
                ended_at=start + timedelta(seconds=1),
                end_reason="succeeded",
                cost_microusd=microusd,
            )
        )


@pytest.fixture
def two_teams_with_spend(
    client: TestClient,
    session_factory: sessionmaker[Session],
    auth: dict[str, str],
    other_auth: dict[str, str],
) -> list[str]:
    ours = [
        client.post("/v1/jobs", json=job_body(f"j{i}"), headers=auth).json()["id"] for i in (1, 2)
    ]
    theirs = client.post("/v1/jobs", json=job_body("theirs"), headers=other_auth).json()["id"]
    _seed_spend(session_factory, job_id=ours[0], microusd=2_500_000)
    metrics.record_dollars(2.5)
    return [*ours, theirs]


def _identifies_someone(text: str, job_ids: list[str]) -> list[str]:
    found = [
        word for word in ("team-a", "team-b", "team=", "dollars", "spend", "usd") if word in text
    ]
    return found + [job_id for job_id in job_ids if job_id in text]


def test_without_a_metrics_token_only_aggregates_are_exposed(
    client: TestClient, two_teams_with_spend: list[str], auth: dict[str, str]
) -> None:
    for headers in ({}, auth, {"Authorization": "Bearer admin-secret-for-tests"}):
        response = client.get("/metrics", headers=headers)
        assert response.status_code == 200
        assert _identifies_someone(response.text, two_teams_with_spend) == []
    samples = scrape(client)
    assert value(samples, "gpujobs_jobs", status="PENDING") == 3
    assert any(name.startswith("process_") for name, _ in samples)  # the process itself


def test_with_a_metrics_token_per_team_series_need_it(
    metrics_client: TestClient, two_teams_with_spend: list[str], auth: dict[str, str]
) -> None:
    public = metrics_client.get("/metrics")
    assert public.status_code == 200
    assert _identifies_someone(public.text, two_teams_with_spend) == []
    for wrong in (auth, {"Authorization": "Bearer admin-secret-for-tests"}):
        refused = metrics_client.get("/metrics", headers=wrong)
        assert refused.status_code == 401
        assert "metrics token" in refused.json()["error"]["message"]

    samples = scrape(metrics_client, METRICS_AUTH)
    assert value(samples, "gpujobs_team_jobs", team="team-a", status="PENDING") == 2
    assert value(samples, "gpujobs_team_jobs", team="team-b", status="PENDING") == 1
    assert value(samples, "gpujobs_team_spend_usd", team="team-a") == 2.5
    assert ("gpujobs_team_spend_usd", (("team", "team-b"),)) not in samples  # spent nothing
    assert value(samples, "gpujobs_dollars_accrued_total") >= 2.5
    assert value(samples, "gpujobs_jobs", status="PENDING") == 3  # the public part too
    text = metrics_client.get("/metrics", headers=METRICS_AUTH).text
    assert not any(job_id in text for job_id in two_teams_with_spend)  # never job ids


def test_the_workers_own_endpoint_follows_the_same_rule() -> None:
    import socket

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    metrics.serve(port, metrics_token=METRICS_TOKEN)
    metrics.record_dollars(1.0)
    url = f"http://127.0.0.1:{port}/metrics"
    public = httpx.get(url)
    assert public.status_code == 200 and "gpujobs_preemptions_total" in public.text
    assert "dollars" not in public.text
    assert httpx.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert "gpujobs_dollars_accrued_total" in httpx.get(url, headers=METRICS_AUTH).text
