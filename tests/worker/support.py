"""Helpers for the control loop's tests: a recording launcher, a settable clock, job submission."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from api.auth import Principal, authenticate
from api.database import transaction
from api.jobs import measured_rate
from api.jobs import service as jobs
from api.models import Job, JobAttempt, JobEvent
from api.placement import Placement
from api.settings import Settings
from gpujobs.resources import ProgressReport
from gpujobs.spec import CapacityType, JobSpec
from tests.conftest import make_team
from worker.control import ControlPlane
from worker.launchers.base import Capability, LaunchRequest, Observation, ObservedState
from worker.storage_credentials.configure import from_settings as storage_from_settings


def a_placement(capacity: CapacityType = CapacityType.ON_DEMAND, *, nodes: int = 1) -> Placement:
    """One g5.xlarge node-group in us-east-1a at $1/h: the launchers' tests place nothing real."""
    return Placement(
        cloud="aws",
        region="us-east-1",
        zone="us-east-1a",
        instance_type="g5.xlarge",
        gpu_model="A10G",
        gpu_count=1,
        nodes=nodes,
        capacity_type=capacity,
        price_per_hour=1.0,
        on_demand_price_per_hour=1.0,
    )


class Clock:
    """cp.clock that only moves when a test moves it. It starts at the real time (whole seconds):
    rows the API writes (created_at, deadlines) use the real clock."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@dataclass
class RecordingLauncher:
    """Records launches and cancels; status() answers what the test scripted per handle."""

    spot: bool | None = None
    capabilities: frozenset[Capability] = frozenset({Capability.SPOT_AVAILABILITY})
    fail_launches: int = 0  # the first N launch() calls raise (a crash in the middle)
    launches: list[LaunchRequest] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)
    observations: dict[str, Observation] = field(default_factory=dict)
    name: str = "recording"
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def spot_available(self) -> bool | None:
        return self.spot

    def launch(self, request: LaunchRequest) -> str:
        with self._lock:
            self.launches.append(request)
            if self.fail_launches > 0:
                self.fail_launches -= 1
                raise RuntimeError("the launcher crashed mid-launch")
        return handle_of(request.attempt_id)

    def status(self, handle: str) -> Observation:
        return self.observations.get(handle, Observation(ObservedState.RUNNING))

    def cancel(self, handle: str) -> None:
        self.cancels.append(handle)

    def logs(self, handle: str, *, follow: bool = False) -> Any:
        return iter(())

    def script(self, attempt_id: str, state: ObservedState, **kwargs: Any) -> None:
        self.observations[handle_of(attempt_id)] = Observation(state, **kwargs)


def handle_of(attempt_id: str) -> str:
    return f"rec:{attempt_id}"


def control_plane(
    settings: Settings,
    factory: sessionmaker[Session],
    launcher: RecordingLauncher | None = None,
    clock: Clock | None = None,
) -> ControlPlane:
    return ControlPlane(
        settings=settings,
        factory=factory,
        launcher=launcher or RecordingLauncher(),
        clock=clock or Clock(),
        storage=storage_from_settings(settings),
    )


def principal(factory: sessionmaker[Session], team: str = "team-a") -> Principal:
    token = make_team(factory, team)
    with factory() as session:
        return authenticate(session, authorization=f"Bearer {token}", admin_token="")


def submit(factory: sessionmaker[Session], who: Principal, **spec: Any) -> str:
    # A name is unique among a team's unfinished jobs: tests submit many at once.
    name = f"train-{uuid.uuid4().hex[:8]}"
    body: dict[str, Any] = {"name": name, "trainer": {"steps": 100}, "estimated_hours": 1.0}
    body.update(spec)
    with transaction(factory) as session:
        submitted = jobs.submit(
            session, principal=who, spec=JobSpec.model_validate(body), idempotency_key=None
        )
        return submitted.job.id


def job(factory: sessionmaker[Session], job_id: str) -> Job:
    with factory() as session:
        row = session.get(Job, job_id)
        assert row is not None
        return row


def attempts(factory: sessionmaker[Session], job_id: str) -> list[JobAttempt]:
    with factory() as session:
        return list(
            session.scalars(
                select(JobAttempt).where(JobAttempt.job_id == job_id).order_by(JobAttempt.number)
            )
        )


def events(factory: sessionmaker[Session], job_id: str) -> list[JobEvent]:
    with factory() as session:
        return list(
            session.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id))
        )


def count(factory: sessionmaker[Session], model: type[Any]) -> int:
    with factory() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def trainer_report(
    factory: sessionmaker[Session],
    *,
    job_token: str,
    job_id: str,
    attempt_id: str,
    step: int,
    checkpoint: int,
    samples_per_s: float | None = None,
    lasts: bool = False,
) -> None:
    """A running trainer's progress report (of 100 steps), with its job token, through the API
    service. `lasts`: the trainer measures that rate for a good while, report after report, so
    the server takes it as the attempt's (its rate is a mean over time, api.jobs.measured_rate):
    twenty windows of its memory, each one's previous report set that long ago."""
    for _ in range(20 if lasts else 1):
        with transaction(factory) as session:
            row = session.get(Job, job_id)
            if lasts and row is not None and row.progress is not None:
                then = datetime.now(UTC) - timedelta(seconds=measured_rate.MEMORY_S)
                row.progress = {**row.progress, "rate_at": then.isoformat()}
            who = authenticate(session, authorization=f"Bearer {job_token}", admin_token="")
            jobs.report_progress(
                session,
                principal=who,
                job_id=job_id,
                report=ProgressReport(
                    attempt_id=attempt_id,
                    step=step,
                    total_steps=100,
                    checkpoint_step=checkpoint,
                    samples_per_s=samples_per_s,
                ),
                now=datetime.now(UTC),
            )
