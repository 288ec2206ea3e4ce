"""Two schedulers racing on one PostgreSQL database place every job exactly once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from api.database import make_engine, make_session_factory, transaction
from api.jobs import service as jobs
from api.models import Base, Job, JobAttempt, JobEvent
from api.settings import Settings
from gpujobs.resources import JobStatus
from gpujobs.spec import JobSpec
from tests.worker.support import RecordingLauncher, control_plane, principal
from worker.scheduler import schedule_once

JOBS = 200
pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_settings(pg_database: str, tmp_path: Path) -> Iterator[Settings]:
    settings = Settings(
        home=tmp_path / "home",
        database_url=pg_database,
        credentials_file=tmp_path / "credentials.json",
        schedule_batch=25,  # small passes, so the two schedulers interleave
    )
    engine = make_engine(settings)
    with engine.begin() as connection:
        names = ", ".join(t.name for t in Base.metadata.sorted_tables)
        connection.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
    engine.dispose()
    yield settings


def pending(factory: sessionmaker[Session]) -> int:
    with factory() as session:
        return int(
            session.scalar(
                select(func.count()).select_from(Job).where(Job.status == JobStatus.PENDING.value)
            )
            or 0
        )


def test_two_schedulers_place_every_job_exactly_once(pg_settings: Settings) -> None:
    engines = [make_engine(pg_settings) for _ in range(2)]
    factories = [make_session_factory(engine) for engine in engines]
    who = principal(factories[0])
    with transaction(factories[0]) as session:
        for number in range(JOBS):
            spec = JobSpec.model_validate({"name": f"train-{number}", "trainer": {"steps": 100}})
            jobs.submit(session, principal=who, spec=spec, idempotency_key=None)
    recorders = [RecordingLauncher(), RecordingLauncher()]
    planes = [control_plane(pg_settings, f, r) for f, r in zip(factories, recorders, strict=True)]
    start = threading.Barrier(2)
    errors: list[BaseException] = []
    passes = [0, 0]

    def scheduler(index: int) -> None:
        try:
            start.wait()
            deadline = time.monotonic() + 60
            while pending(factories[index]) and time.monotonic() < deadline:
                schedule_once(planes[index])
                passes[index] += 1
        except BaseException as error:  # surfaced in the main thread
            errors.append(error)

    threads = [threading.Thread(target=scheduler, args=(i,)) for i in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not errors, errors
        assert all(not thread.is_alive() for thread in threads)

        with factories[0]() as session:
            job_ids = set(session.scalars(select(Job.id)))
            statuses = Counter(session.scalars(select(Job.status)))
            numbers = session.execute(select(JobAttempt.job_id, JobAttempt.number)).all()
            attempt_ids = set(session.scalars(select(JobAttempt.id)))
            scheduled = Counter(
                session.scalars(
                    select(JobEvent.job_id).where(JobEvent.to_status == JobStatus.SCHEDULED.value)
                )
            )
            counts = set(session.scalars(select(Job.attempts_count)))
    finally:
        for engine in engines:
            engine.dispose()

    assert len(job_ids) == JOBS
    assert statuses == {JobStatus.SCHEDULED.value: JOBS}
    per_job = Counter(job_id for job_id, _ in numbers)
    assert set(per_job) == job_ids and set(per_job.values()) == {1}
    assert {number for _, number in numbers} == {1}
    assert counts == {1}
    assert set(scheduled) == job_ids and set(scheduled.values()) == {1}
    launched = [{r.attempt_id for r in recorder.launches} for recorder in recorders]
    assert sum(len(recorder.launches) for recorder in recorders) == JOBS  # no launch repeated
    assert launched[0].isdisjoint(launched[1])
    assert launched[0] | launched[1] == attempt_ids
    assert {r.job_id for recorder in recorders for r in recorder.launches} == job_ids
