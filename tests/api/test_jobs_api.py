from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import exc as sa_exc

from tests.conftest import Nudges, job_body


def test_submit_returns_201_location_and_pending_job(
    client: TestClient, auth: dict[str, str], nudges: Nudges
) -> None:
    response = client.post("/v1/jobs", json=job_body(deadline_hours=4), headers=auth)
    assert response.status_code == 201
    job = response.json()
    assert response.headers["Location"] == f"/v1/jobs/{job['id']}"
    assert job["status"] == "PENDING"
    assert job["team"] == "team-a"
    created = datetime.fromisoformat(job["created_at"])
    deadline = datetime.fromisoformat(job["deadline_at"])
    assert abs((deadline - created) - timedelta(hours=4)) < timedelta(seconds=1)
    assert nudges.calls == [("schedule", job["id"])]
    fetched = client.get(response.headers["Location"], headers=auth).json()
    assert fetched == job


def test_idempotency_key_returns_the_same_job(client: TestClient, auth: dict[str, str]) -> None:
    headers = {**auth, "Idempotency-Key": "retry-1"}
    first = client.post("/v1/jobs", json=job_body(), headers=headers)
    second = client.post("/v1/jobs", json=job_body(), headers=headers)
    assert first.status_code == 201
    assert second.status_code == 200
    assert second.headers["Idempotent-Replayed"] == "true"
    assert second.json()["id"] == first.json()["id"]
    assert len(client.get("/v1/jobs", headers=auth).json()["items"]) == 1
    reused = client.post("/v1/jobs", json=job_body(name="other"), headers=headers)
    assert reused.status_code == 409
    assert reused.json()["error"]["fields"][0]["field"] == "Idempotency-Key"


def test_idempotency_keys_are_per_team(
    client: TestClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    a = client.post("/v1/jobs", json=job_body(), headers={**auth, "Idempotency-Key": "k"})
    b = client.post("/v1/jobs", json=job_body(), headers={**other_auth, "Idempotency-Key": "k"})
    assert a.status_code == b.status_code == 201
    assert a.json()["id"] != b.json()["id"]


def test_list_filters_by_status_and_paginates(client: TestClient, auth: dict[str, str]) -> None:
    ids = [
        client.post("/v1/jobs", json=job_body(f"j{i}"), headers=auth).json()["id"] for i in range(5)
    ]
    client.post(f"/v1/jobs/{ids[0]}/cancel", headers=auth)
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, str | int] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/v1/jobs", params=params, headers=auth).json()
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    pending = client.get("/v1/jobs", params={"status": "PENDING"}, headers=auth).json()["items"]
    assert {j["id"] for j in pending} == set(ids[1:])
    cancelled = client.get("/v1/jobs", params={"status": "CANCELLED"}, headers=auth).json()
    assert [j["id"] for j in cancelled["items"]] == [ids[0]]


def test_limit_and_cursor_are_validated(client: TestClient, auth: dict[str, str]) -> None:
    too_many = client.get("/v1/jobs", params={"limit": 201}, headers=auth)
    assert too_many.status_code == 422
    assert too_many.json()["error"]["fields"][0]["field"] == "limit"
    bad_cursor = client.get("/v1/jobs", params={"cursor": "nonsense"}, headers=auth)
    assert bad_cursor.status_code == 422
    assert bad_cursor.json()["error"]["fields"][0]["field"] == "cursor"
    bad_status = client.get("/v1/jobs", params={"status": "DONE"}, headers=auth)
    assert bad_status.status_code == 422
    assert bad_status.json()["error"]["fields"][0]["field"].startswith("status")


def test_cancel_records_events_and_is_idempotent(client: TestClient, auth: dict[str, str]) -> None:
    job_id = client.post("/v1/jobs", json=job_body(), headers=auth).json()["id"]
    first = client.post(f"/v1/jobs/{job_id}/cancel", headers=auth)
    again = client.post(f"/v1/jobs/{job_id}/cancel", headers=auth)
    assert first.status_code == again.status_code == 200
    assert again.json()["status"] == "CANCELLED"
    events = client.get(f"/v1/jobs/{job_id}/events", headers=auth).json()
    assert [(e["from_status"], e["to_status"]) for e in events] == [
        (None, "PENDING"),
        ("PENDING", "CANCELLED"),
    ]
    assert client.get(f"/v1/jobs/{job_id}/attempts", headers=auth).json() == []


def test_teams_only_see_their_own_jobs(
    client: TestClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    job_id = client.post("/v1/jobs", json=job_body(), headers=auth).json()["id"]
    for method, path in [
        ("GET", f"/v1/jobs/{job_id}"),
        ("POST", f"/v1/jobs/{job_id}/cancel"),
        ("GET", f"/v1/jobs/{job_id}/events"),
        ("GET", f"/v1/jobs/{job_id}/attempts"),
    ]:
        response = client.request(method, path, headers=other_auth)
        assert response.status_code == 404, path
    assert client.get("/v1/jobs", headers=other_auth).json()["items"] == []
    assert client.get(f"/v1/jobs/{job_id}", headers=auth).json()["status"] == "PENDING"


def test_admin_token_sees_every_team(
    client: TestClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    client.post("/v1/jobs", json=job_body("a"), headers=auth)
    client.post("/v1/jobs", json=job_body("b"), headers=other_auth)
    admin = {"Authorization": "Bearer admin-secret-for-tests"}
    names = {j["name"] for j in client.get("/v1/jobs", headers=admin).json()["items"]}
    assert names == {"a", "b"}


def test_auth_is_required_and_checked(client: TestClient) -> None:
    assert client.get("/v1/jobs").status_code == 401
    assert client.get("/v1/jobs", headers={"Authorization": "Bearer nope"}).status_code == 401
    basic = client.get("/v1/jobs", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert basic.status_code == 401
    assert basic.json()["error"]["code"] == "unauthorized"


def test_invalid_specs_name_the_field(client: TestClient, auth: dict[str, str]) -> None:
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    cases = {
        "trainer.batch_size": job_body(trainer={"steps": 10, "batch_size": 0}),
        "trainer.amp": job_body(trainer={"steps": 10, "amp": "fp8"}),
        "deadline": job_body(deadline=past),
        "resources.nodes": job_body(resources={"nodes": 0}),
        "capacity.types.0": job_body(capacity={"types": ["preemptible"]}),
        "surprise": job_body(surprise=True),
        "trainer": job_body(trainer={"batch_size": 4}),
        "env.GPUJOBS_TOKEN": job_body(env={"GPUJOBS_TOKEN": "x"}),
        "name": job_body(name="Has Spaces"),
    }
    for field, body in cases.items():
        response = client.post("/v1/jobs", json=body, headers=auth)
        assert response.status_code == 422, field
        fields = [f["field"] for f in response.json()["error"]["fields"]]
        assert field in fields, (field, fields)
    assert client.get("/v1/jobs", headers=auth).json()["items"] == []


def test_malformed_json_and_wrong_types_are_422(client: TestClient, auth: dict[str, str]) -> None:
    broken = client.post(
        "/v1/jobs", content=b"{not json", headers={**auth, "Content-Type": "application/json"}
    )
    assert broken.status_code == 422
    assert client.post("/v1/jobs", json=[1, 2], headers=auth).status_code == 422


def test_body_over_one_mebibyte_is_413(client: TestClient, auth: dict[str, str]) -> None:
    huge = job_body(env={"BIG": "x" * 4000}, trainer={"steps": 1, "args": {"a": "b" * 2_000_000}})
    response = client.post("/v1/jobs", json=huge, headers=auth)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"

    def chunks():  # no Content-Length: the limit must hold on the streamed bytes too
        yield b'{"name": "x", "trainer": {"steps": 1, "args": {"a": "'
        for _ in range(40):
            yield b"y" * 32768
        yield b'"}}}'

    streamed = client.post(
        "/v1/jobs", content=chunks(), headers={**auth, "Content-Type": "application/json"}
    )
    assert streamed.status_code == 413


def test_unknown_job_is_404_with_error_body(client: TestClient, auth: dict[str, str]) -> None:
    response = client.get("/v1/jobs/does-not-exist", headers=auth)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ok"}
    assert "/v1/jobs" in client.get("/openapi.json").json()["paths"]
    assert client.get("/docs").status_code == 200


def test_malformed_and_nul_ids_are_not_found(client: TestClient, auth: dict[str, str]) -> None:
    # PostgreSQL refuses NUL in text: such an id must be a 404, not a database error.
    for job_id in ("%00", "0" * 35 + "%00", "not-a-uuid"):
        response = client.get(f"/v1/jobs/{job_id}", headers=auth)
        assert response.status_code == 404, (job_id, response.text)
    nul_cursor = "MDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAA"  # 35 zeros + NUL: 36 chars
    response = client.get("/v1/jobs", params={"cursor": nul_cursor}, headers=auth)
    assert response.status_code == 422


def test_a_locked_or_unreachable_database_is_503_with_retry_after(app: FastAPI) -> None:
    @app.get("/test-locked")
    def locked() -> None:
        raise sa_exc.OperationalError(
            "BEGIN IMMEDIATE", None, sqlite3.OperationalError("database is locked")
        )

    @app.get("/test-pool")
    def pool() -> None:
        raise sa_exc.TimeoutError("QueuePool limit of size 10 overflow 20 reached")

    with TestClient(app, raise_server_exceptions=False) as client:
        for path in ("/test-locked", "/test-pool"):
            response = client.get(path)
            assert response.status_code == 503
            assert response.headers["Retry-After"] == "1"
            assert response.json()["error"]["code"] == "unavailable"
