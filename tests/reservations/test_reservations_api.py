"""Reservations: admins register prepaid capacity that exists in the catalog; usage is counted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from api.database import transaction
from api.placement.world import with_usage
from tests.budgets.support import ADMIN, add_attempt

URL = "/v1/admin/reservations"


def reservation(**overrides: object) -> dict[str, object]:
    body: dict[str, object] = {
        "cloud": "aws",
        "region": "us-east-1",
        "zone": "use1-az5",
        "instance_type": "g4dn.xlarge",
        "count": 4,
        "price_per_hour": 0.25,
    }
    body.update(overrides)
    return body


def test_only_admins_manage_reservations(client: TestClient, auth: dict[str, str]) -> None:
    assert client.post(URL, json=reservation(), headers=auth).status_code == 403
    assert client.get(URL, headers=auth).status_code == 403
    assert client.delete(f"{URL}/any", headers=auth).status_code == 403
    assert client.get(URL).status_code == 401


def test_create_list_and_delete(client: TestClient) -> None:
    created = client.post(URL, json=reservation(), headers=ADMIN)
    assert created.status_code == 201
    body = created.json()
    assert created.headers["Location"] == f"{URL}/{body['id']}"
    assert (body["count"], body["in_use"], body["price_per_hour"]) == (4, 0, 0.25)
    assert [r["id"] for r in client.get(URL, headers=ADMIN).json()] == [body["id"]]
    assert client.delete(f"{URL}/{body['id']}", headers=ADMIN).status_code == 204
    assert client.get(URL, headers=ADMIN).json() == []
    assert client.delete(f"{URL}/{body['id']}", headers=ADMIN).status_code == 404


def test_the_instance_type_must_exist_in_that_zone(client: TestClient) -> None:
    cases = {
        "instance_type": reservation(instance_type="g4dn.imaginary"),
        "zone": reservation(zone="use1-az99"),
        "region": reservation(region="eu-west-1"),
        "count": reservation(count=0),
        "price_per_hour": reservation(price_per_hour=-1),
        "ends_at": reservation(ends_at="2030-01-01T00:00:00"),  # no timezone
    }
    for field, body in cases.items():
        response = client.post(URL, json=body, headers=ADMIN)
        assert response.status_code == 422, field
        assert response.json()["error"]["fields"][0]["field"] == field
    backwards = reservation(starts_at="2030-01-02T00:00:00Z", ends_at="2030-01-01T00:00:00Z")
    assert client.post(URL, json=backwards, headers=ADMIN).status_code == 422
    assert client.get(URL, headers=ADMIN).json() == []


def test_in_use_counts_nodes_of_running_attempts(
    client: TestClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    now = datetime.now(UTC)
    pool = client.post(URL, json=reservation(), headers=ADMIN).json()["id"]
    later = client.post(
        URL, json=reservation(starts_at=(now + timedelta(days=1)).isoformat()), headers=ADMIN
    ).json()["id"]
    over = client.post(
        URL, json=reservation(ends_at=(now - timedelta(hours=1)).isoformat()), headers=ADMIN
    ).json()["id"]
    hour_ago = now - timedelta(hours=1)
    add_attempt(session_factory, started_at=hour_ago, nodes=2, reservation_id=pool)
    add_attempt(session_factory, started_at=None, nodes=1, reservation_id=pool)  # launching
    add_attempt(session_factory, started_at=hour_ago, ended_at=now, nodes=1, reservation_id=pool)
    listed = {r["id"]: r["in_use"] for r in client.get(URL, headers=ADMIN).json()}
    assert listed == {pool: 3, later: 0, over: 0}
    with transaction(session_factory) as session:
        (view,) = with_usage(session, now=now)  # only the one in force now
    assert (view.id, view.count, view.in_use, view.free) == (pool, 4, 3, 1)
    assert (view.zone, view.instance_type, view.price_per_hour) == ("use1-az5", "g4dn.xlarge", 0.25)
