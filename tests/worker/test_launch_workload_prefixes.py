"""The launcher tells the trainer which module prefixes the job's team may run (the trainer
checks its workload against them again before importing it)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from api.database import transaction
from api.jobs import service as jobs
from api.settings import Settings
from gpujobs.spec import JobSpec
from tests.worker.support import RecordingLauncher, control_plane, principal
from worker.scheduler import schedule_once


def submit_as(factory: sessionmaker[Session], team: str, settings: Settings, **trainer: Any) -> str:
    body = {"name": "train", "trainer": {"steps": 100, **trainer}, "estimated_hours": 1.0}
    with transaction(factory) as session:
        submitted = jobs.submit(
            session,
            principal=principal(factory, team),
            spec=JobSpec.model_validate(body),
            idempotency_key=None,
            workload_prefixes=settings.workload_prefixes_for(team),
        )
        return submitted.job.id


def test_run_config_carries_the_deployment_and_team_prefixes(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    settings.workload_module_prefixes = ["acme.models"]
    settings.team_workload_module_prefixes = {"team-a": ["labs"], "team-b": ["other"]}
    launcher = RecordingLauncher()
    cp = control_plane(settings, session_factory, launcher)
    a = submit_as(session_factory, "team-a", settings, workload="labs.x:build")
    b = submit_as(session_factory, "team-b", settings)

    schedule_once(cp)

    prefixes = {r.job_id: r.run_config.allowed_workload_prefixes for r in launcher.launches}
    assert prefixes == {a: ["acme.models", "labs"], b: ["acme.models", "other"]}
