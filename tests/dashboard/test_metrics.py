"""GET /metrics: valid Prometheus text, jobs by status from the database, and the hooks."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api import metrics
from tests.conftest import job_body


def scrape(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics")
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
    assert delta("gpujobs_dollars_accrued_total") == 12.5


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
