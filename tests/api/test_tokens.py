"""Teams and tokens over the admin API: create, list, revoke, expire. Admin is the admin token."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from api import http
from api.app import create_app
from api.auth import Principal, PrincipalCache, hash_token, issue_token
from api.database import transaction
from api.jobs.lifecycle import switch_status
from api.models import ApiToken, Job, JobAttempt, utcnow
from api.settings import Settings
from gpujobs.reasons import EndReason
from gpujobs.resources import JobStatus
from tests.conftest import job_body

ADMIN = {"Authorization": "Bearer admin-secret-for-tests"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def create_team(client: TestClient, name: str, **token: object) -> dict[str, object]:
    response = client.post("/v1/admin/teams", json={"name": name, "token": token}, headers=ADMIN)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def tokens(client: TestClient, **params: str) -> list[dict[str, object]]:
    response = client.get("/v1/admin/tokens", params=params, headers=ADMIN)
    assert response.status_code == 200, response.text
    return response.json()["items"]  # type: ignore[no-any-return]


def test_the_admin_creates_a_team_whose_token_works_and_is_stored_hashed(
    client: TestClient, session_factory: sessionmaker[Session]
) -> None:
    response = client.post("/v1/admin/teams", json={"name": "acme"}, headers=ADMIN)
    assert response.status_code == 201
    assert response.headers["cache-control"] == "no-store"
    created = response.json()
    token = created["token"]
    assert created["team"]["name"] == "acme"
    assert created["token_info"]["team"] == "acme" and created["token_info"]["active"]
    assert token.startswith(created["token_info"]["prefix"])
    assert client.get("/v1/jobs", headers=bearer(token)).status_code == 200
    with session_factory() as session:
        stored = session.scalars(select(ApiToken.token_hash)).all()
    assert hash_token(token) in stored and token not in stored
    names = [t["name"] for t in client.get("/v1/admin/teams", headers=ADMIN).json()["items"]]
    assert names == ["acme"]


def test_team_creation_conflicts_and_bad_names_are_clear(client: TestClient) -> None:
    create_team(client, "acme")
    again = client.post("/v1/admin/teams", json={"name": "acme"}, headers=ADMIN)
    assert again.status_code == 409
    assert again.json()["error"]["message"] == "team 'acme' already exists"
    for bad in ("Acme", "-acme", "a" * 64, "", "acme corp"):
        refused = client.post("/v1/admin/teams", json={"name": bad}, headers=ADMIN)
        assert refused.status_code == 422, bad
        assert [f["field"] for f in refused.json()["error"]["fields"]] == ["name"]
    short = client.post(
        "/v1/admin/teams", json={"name": "b", "token": {"expires_in_seconds": 5}}, headers=ADMIN
    )
    assert short.status_code == 422
    assert [f["field"] for f in short.json()["error"]["fields"]] == ["token.expires_in_seconds"]


def test_team_tokens_are_never_admins(
    client: TestClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    """A team's token (the embedded default team's included) cannot administer or read another
    team's jobs."""
    theirs = client.post("/v1/jobs", json=job_body("theirs"), headers=other_auth).json()["id"]
    calls = [
        ("POST", "/v1/admin/teams", {"name": "mine"}),
        ("GET", "/v1/admin/teams", None),
        ("GET", "/v1/admin/tokens", None),
        ("POST", "/v1/admin/teams/team-a/tokens", {}),
        ("DELETE", f"/v1/admin/tokens/{'0' * 8}-0000-7000-8000-{'0' * 12}", None),
        ("GET", "/v1/admin/teams/team-a/budget", None),
        ("GET", "/v1/admin/reservations", None),
    ]
    for method, url, body in calls:
        response = client.request(method, url, json=body, headers=auth)
        assert response.status_code == 403, (method, url, response.text)
        assert "admin token" in response.json()["error"]["message"]
    assert client.get(f"/v1/jobs/{theirs}", headers=auth).status_code == 404
    assert client.get("/v1/jobs", headers=auth).json()["items"] == []
    assert client.post(f"/v1/jobs/{theirs}/cancel", headers=auth).status_code == 404
    assert client.get(f"/v1/jobs/{theirs}", headers=ADMIN).status_code == 200
    assert client.post("/v1/admin/teams", json={"name": "mine"}).status_code == 401


def test_tokens_are_listed_without_their_secret_and_filtered_by_team(
    client: TestClient, token: str
) -> None:
    extra = client.post(
        "/v1/admin/teams/team-a/tokens",
        json={"name": "ci", "expires_in_seconds": 3600},
        headers=ADMIN,
    )
    assert extra.status_code == 201 and extra.headers["cache-control"] == "no-store"
    issued = extra.json()
    assert issued["info"]["name"] == "ci" and issued["info"]["expires_at"] is not None
    create_team(client, "acme")
    listed = tokens(client, team="team-a")
    assert [(t["team"], t["name"]) for t in listed] == [("team-a", "initial"), ("team-a", "ci")]
    assert listed[1]["id"] == issued["info"]["id"]
    assert {t["team"] for t in tokens(client)} == {"team-a", "acme"}
    everything = client.get("/v1/admin/tokens", headers=ADMIN).text
    assert token not in everything and issued["token"] not in everything
    assert hash_token(token) not in everything
    missing = client.get("/v1/admin/tokens", params={"team": "nobody"}, headers=ADMIN)
    assert missing.status_code == 404
    assert client.post("/v1/admin/teams/nobody/tokens", json={}, headers=ADMIN).status_code == 404
    no_body = client.post("/v1/admin/teams/team-a/tokens", headers=ADMIN)
    assert no_body.status_code == 201 and no_body.json()["info"]["expires_at"] is None
    unknown = client.post("/v1/admin/teams/team-a/tokens", json={"expires_in": 60}, headers=ADMIN)
    assert unknown.status_code == 422


def test_a_revoked_token_is_refused_and_revoking_is_idempotent(
    client: TestClient, token: str
) -> None:
    assert client.get("/v1/jobs", headers=bearer(token)).status_code == 200
    [listed] = tokens(client, team="team-a")
    revoked = client.delete(f"/v1/admin/tokens/{listed['id']}", headers=ADMIN)
    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None and not revoked.json()["active"]
    refused = client.get("/v1/jobs", headers=bearer(token))
    assert refused.status_code == 401
    assert "revoked" in refused.json()["error"]["message"]
    assert tokens(client, team="team-a") == []
    [shown] = tokens(client, team="team-a", include_inactive="true")
    assert shown["revoked_at"] == revoked.json()["revoked_at"]
    again = client.delete(f"/v1/admin/tokens/{listed['id']}", headers=ADMIN)
    assert again.status_code == 200 and again.json()["revoked_at"] == shown["revoked_at"]
    unknown = client.delete(f"/v1/admin/tokens/{'0' * 8}-0000-7000-8000-{'0' * 12}", headers=ADMIN)
    assert unknown.status_code == 404
    assert client.delete("/v1/admin/tokens/not-an-id", headers=ADMIN).status_code == 422


def test_an_expired_token_gets_401_saying_so(
    client: TestClient, session_factory: sessionmaker[Session]
) -> None:
    created = create_team(client, "acme", expires_in_seconds=60)
    token = str(created["token"])
    with transaction(session_factory) as session:
        session.execute(
            update(ApiToken)
            .where(ApiToken.token_hash == hash_token(token))
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    refused = client.get("/v1/jobs", headers=bearer(token))
    assert refused.status_code == 401
    assert "expired at" in refused.json()["error"]["message"]
    assert tokens(client, team="acme") == []
    [shown] = tokens(client, team="acme", include_inactive="true")
    assert not shown["active"] and shown["revoked_at"] is None


def test_a_remembered_token_still_expires_on_time(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = str(create_team(client, "acme", expires_in_seconds=60)["token"])
    assert client.get("/v1/jobs", headers=bearer(token)).status_code == 200  # now remembered
    monkeypatch.setattr(http, "utcnow", lambda: utcnow() + timedelta(seconds=61))
    refused = client.get("/v1/jobs", headers=bearer(token))
    assert refused.status_code == 401
    assert "expired at" in refused.json()["error"]["message"]


def test_a_remembered_token_costs_no_token_query(
    client: TestClient, token: str, engine: Engine
) -> None:
    statements: list[str] = []
    record = lambda *args: statements.append(args[2])  # noqa: E731  (conn, cursor, statement, ...)
    event.listen(engine, "before_cursor_execute", record)
    try:
        assert client.get("/v1/jobs", headers=bearer(token)).status_code == 200
        assert any("api_tokens" in statement for statement in statements)
        statements.clear()
        assert client.get("/v1/jobs", headers=bearer(token)).status_code == 200
        assert statements and not any("api_tokens" in statement for statement in statements)
    finally:
        event.remove(engine, "before_cursor_execute", record)


def test_a_revocation_made_elsewhere_applies_within_the_cache_time(
    settings: Settings, session_factory: sessionmaker[Session], token: str
) -> None:
    """The admin CLI (another process) writes revoked_at: this API notices within auth_cache_s."""
    quick = settings.model_copy(update={"auth_cache_s": 0.3})
    app = create_app(quick, session_factory=session_factory, nudge=lambda *_: None)
    with TestClient(app) as client:
        assert client.get("/v1/jobs", headers=bearer(token)).status_code == 200
        with transaction(session_factory) as session:
            session.execute(update(ApiToken).values(revoked_at=utcnow()))
        time.sleep(0.4)
        refused = client.get("/v1/jobs", headers=bearer(token))
        assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]


def test_last_use_is_recorded_at_most_once_a_minute(
    client: TestClient, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    [fresh] = tokens(client, team="team-a")
    assert fresh["last_used_at"] is None
    client.get("/v1/jobs", headers=bearer(token))
    [used] = tokens(client, team="team-a")
    assert used["last_used_at"] is not None
    client.get("/v1/budget", headers=bearer(token))
    [unchanged] = tokens(client, team="team-a")
    assert unchanged["last_used_at"] == used["last_used_at"]  # no write within the minute
    # Two minutes later (the token is remembered meanwhile: its use is written all the same).
    later_now = utcnow() + timedelta(minutes=2)
    monkeypatch.setattr(http, "utcnow", lambda: later_now)
    client.get("/v1/budget", headers=bearer(token))  # a GET: nothing else is committed
    [later] = tokens(client, team="team-a")
    assert datetime.fromisoformat(str(later["last_used_at"])) == later_now
    client.get("/v1/budget", headers=bearer(token))
    [again] = tokens(client, team="team-a")
    assert again["last_used_at"] == later["last_used_at"]


def test_a_team_that_was_an_admin_before_the_migration_no_longer_is(tmp_path: Path) -> None:
    """Older embedded deployments created the default team as an admin: upgrading ends that."""
    from alembic import command

    from api.app import create_app
    from api.database import make_engine, make_session_factory
    from api.migrate import alembic_config, upgrade_to_head

    settings = Settings(home=tmp_path, admin_token="admin-secret-for-tests")
    engine = make_engine(settings)
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0003")
    now = utcnow()
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO teams (id, name, is_admin, created_at) "
                "VALUES ('t1', 'default', 1, :now)"
            ),
            {"now": now},
        )
        connection.execute(
            text(
                "INSERT INTO api_tokens (id, team_id, token_hash, prefix, name, created_at) "
                "VALUES ('k1', 't1', :hash, 'gpj_old-', 'initial', :now)"
            ),
            {"hash": hash_token("gpj_old-default"), "now": now},
        )
    upgrade_to_head(engine)
    app = create_app(settings, session_factory=make_session_factory(engine))
    with TestClient(app) as client:
        old = bearer("gpj_old-default")
        answer = client.get("/v1/jobs", headers=old)
        assert answer.status_code == 200, answer.text
        assert client.get("/v1/admin/tokens", headers=old).status_code == 403
        assert client.get("/v1/admin/tokens", headers=ADMIN).status_code == 200
    engine.dispose()


def test_a_name_taken_by_a_concurrent_request_is_a_conflict_not_a_500(
    session_factory: sessionmaker[Session],
) -> None:
    """The unique index decides when two requests create the same team at once."""
    from api.teams import repository

    with session_factory() as session:
        assert repository.add(session, name="acme") is not None
        assert repository.add(session, name="acme") is None  # the index refused it
        assert [t.name for t in repository.all_teams(session)] == ["acme"]


def test_a_revocation_racing_a_lookup_is_not_undone_by_it() -> None:
    """A request read the token before DELETE committed and cleared the cache; what it read
    must not be remembered afterwards."""
    cache = PrincipalCache(ttl_s=60)
    principal = Principal(team_id="t", team_name="acme", token_id="tok-1")
    began = cache.generation  # the lookup starts...
    cache.clear()  # ...a revocation commits and clears...
    cache.put("gpj_secret", principal, generation=began)  # ...the lookup ends
    assert cache.get("gpj_secret", now=utcnow()) is None
    cache.put("gpj_secret", principal, generation=cache.generation)
    assert cache.get("gpj_secret", now=utcnow()) == principal


def test_a_job_token_remembered_past_its_job_records_no_progress(
    client: TestClient, session_factory: sessionmaker[Session], auth: dict[str, str]
) -> None:
    """The worker ends the job in its own process (revoking the token there): this API may still
    remember the token for a few seconds, but the ended job takes no more progress."""
    job = client.post("/v1/jobs", json=job_body(name="short"), headers=auth).json()
    with transaction(session_factory) as session:
        row = session.get(Job, job["id"])
        assert row is not None
        job_token = issue_token(session, team_id=row.team_id, job_id=row.id)
    report = {"step": 3, "total_steps": 10, "checkpoint_step": 2}
    url = f"/v1/jobs/{job['id']}/progress"
    assert client.post(url, json=report, headers=bearer(job_token)).status_code == 200
    with transaction(session_factory) as session:
        row = session.get(Job, job["id"])
        assert row is not None
        switch_status(session, row, JobStatus.CANCELLED, reason="cancelled by the worker")
    late = client.post(url, json=report | {"step": 9}, headers=bearer(job_token))
    assert late.status_code == 409, late.text
    shown = client.get(f"/v1/jobs/{job['id']}", headers=auth).json()
    assert shown["progress"]["step"] == 3


def test_an_ended_attempts_token_is_refused_while_the_job_runs_on(
    client: TestClient, session_factory: sessionmaker[Session], auth: dict[str, str]
) -> None:
    """The attack: an attempt's trainer process that outlives its attempt (released at a
    handover, or slow to stop after a preemption) keeps reporting into the job, which the next
    attempt now trains. Its token died with its attempt; the next attempt's works."""
    from worker.billing import close

    job = client.post("/v1/jobs", json=job_body(name="two-attempts"), headers=auth).json()
    now = utcnow()
    with transaction(session_factory) as session:
        row = session.get(Job, job["id"])
        assert row is not None
        switch_status(session, row, JobStatus.SCHEDULED, reason="placed")
        where = {"cloud": "local", "region": "local", "zone": "local", "instance_type": "cpu",
                 "gpu_model": "A100", "gpu_count": 1, "nodes": 1, "capacity_type": "spot",
                 "price_per_hour": 1.0, "on_demand_price_per_hour": 3.0}  # fmt: skip
        old, new = (
            JobAttempt(job_id=row.id, team_id=row.team_id, number=n, **where) for n in (1, 2)
        )
        session.add_all([old, new])
        session.flush()
        old_token = issue_token(session, team_id=row.team_id, job_id=row.id, attempt_id=old.id)
        new_token = issue_token(session, team_id=row.team_id, job_id=row.id, attempt_id=new.id)
        switch_status(session, row, JobStatus.RUNNING, reason="running")
    with transaction(session_factory) as session:
        attempt = session.get(JobAttempt, old.id)
        row = session.get(Job, job["id"])
        assert attempt is not None
        close(session, attempt=attempt, job=row, now=now, end_reason=EndReason.PREEMPTED)
    url = f"/v1/jobs/{job['id']}/progress"
    report = {"step": 7, "total_steps": 100, "checkpoint_step": 5}
    refused = client.post(url, json=report, headers=bearer(old_token))
    assert refused.status_code == 401, refused.text
    assert "revoked" in refused.text
    assert client.post(url, json=report, headers=bearer(new_token)).status_code == 200
