"""A job's name is unique among its team's unfinished jobs: refused by name, freed when the job
ends, decided by the database when submits race (no lock), and made true by the migration for
data written before the rule."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, insert, text
from sqlalchemy.orm import Session, sessionmaker

from api.auth import Principal
from api.database import transaction
from api.errors import Conflict
from api.jobs import service
from api.migrate import alembic_config, upgrade_to_head
from api.models import Job, Team
from gpujobs.spec import JobSpec
from tests.conftest import job_body


def test_an_unfinished_name_is_refused_by_field_and_freed_when_the_job_ends(
    client: TestClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    first = client.post("/v1/jobs", json=job_body(name="nightly"), headers=auth)
    assert first.status_code == 201, first.text
    again = client.post("/v1/jobs", json=job_body(name="nightly"), headers=auth)
    assert again.status_code == 409
    assert [f["field"] for f in again.json()["error"]["fields"]] == ["name"]
    # Another team's namespace is its own.
    assert (
        client.post("/v1/jobs", json=job_body(name="nightly"), headers=other_auth).status_code
        == 201
    )
    assert client.post(f"/v1/jobs/{first.json()['id']}/cancel", headers=auth).status_code == 200
    reused = client.post("/v1/jobs", json=job_body(name="nightly"), headers=auth)
    assert reused.status_code == 201, reused.text


def test_a_name_in_use_is_the_answer_even_when_admission_would_refuse_the_spec_too(
    client: TestClient, auth: dict[str, str]
) -> None:
    assert client.post("/v1/jobs", json=job_body(name="nightly"), headers=auth).status_code == 201
    too_cheap = {"capacity": {"max_price_per_hour": 0.01}}
    refused = client.post("/v1/jobs", json=job_body(name="other", **too_cheap), headers=auth)
    assert refused.status_code == 422, refused.text  # the spec alone is refused by admission
    clash = client.post("/v1/jobs", json=job_body(name="nightly", **too_cheap), headers=auth)
    assert clash.status_code == 409, clash.text
    assert [f["field"] for f in clash.json()["error"]["fields"]] == ["name"]


def test_concurrent_submits_of_one_name_create_one_job_and_conflict_the_rest(
    session_factory: sessionmaker[Session], token: str
) -> None:
    with session_factory() as session:
        team = session.query(Team).one()
        principal = Principal(team_id=team.id, team_name=team.name)
    spec = JobSpec.model_validate(job_body(name="race"))
    outcomes: list[str] = []
    start = threading.Barrier(8)

    def submit() -> None:
        start.wait()
        try:
            with transaction(session_factory) as session:
                service.submit(session, principal=principal, spec=spec, idempotency_key=None)
            outcomes.append("created")
        except Conflict:
            outcomes.append("conflict")
        except Exception as error:  # noqa: BLE001 - anything else is the failure this test finds
            outcomes.append(repr(error))

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["conflict"] * 7 + ["created"], outcomes


def test_the_migration_renames_unfinished_duplicates_written_before_the_rule(
    tmp_path: Path,
) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0005_money")
    with Session(engine) as session, session.begin():
        team = Team(name="a")
        session.add(team)
        session.flush()
        for job_id, status, day in [
            ("aaaaaaaa-1", "RUNNING", 1),
            ("bbbbbbbb-2", "PENDING", 2),
            ("cccccccc-3", "SUCCEEDED", 3),
        ]:
            at = datetime(2026, 1, day, tzinfo=UTC)
            # Core, not the ORM: the ORM writes every column it knows, later ones included.
            session.execute(
                insert(Job.__table__).values(
                    id=job_id, team_id=team.id, name="nightly", status=status, spec={},
                    created_at=at, updated_at=at, request_hash="h",
                )
            )  # fmt: skip
    upgrade_to_head(engine)
    with engine.connect() as connection:
        names = dict(connection.execute(text("SELECT id, name FROM jobs")).all())
    assert names == {
        "aaaaaaaa-1": "nightly",  # the oldest unfinished job keeps its name
        "bbbbbbbb-2": "nightly-bbbbbbbb",
        "cccccccc-3": "nightly",  # ended jobs are outside the rule
    }
