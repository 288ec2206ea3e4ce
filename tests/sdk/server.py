"""A real API on a free local port: uvicorn serving create_app() in a thread, on SQLite."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from api.database import make_engine, make_session_factory, transaction
from api.jobs import lifecycle
from api.migrate import upgrade_to_head
from api.models import Job, JobAttempt, new_id, utcnow
from api.settings import Settings
from gpujobs.resources import JobStatus
from worker.launchers.local import LocalLauncher

ADMIN_TOKEN = "admin-secret-for-tests"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LiveApi:
    url: str
    session_factory: sessionmaker[Session]
    attempts_root: Path
    admin_token: str = ADMIN_TOKEN

    def add_attempt(self, job_id: str, number: int, **fields: Any) -> None:
        """Record the job's attempt `number` as the scheduler would (by default one T4, on
        demand, in aws use1-az1, not started); `fields` override any column."""
        with transaction(self.session_factory) as session:
            job = session.get(Job, job_id)
            assert job is not None
            columns: dict[str, Any] = dict(
                cloud="aws", region="us-east-1", zone="use1-az1", instance_type="g4dn.xlarge",
                gpu_model="T4", gpu_count=1, capacity_type="on_demand", nodes=1,
                price_per_hour=0.526, on_demand_price_per_hour=0.526,
            )  # fmt: skip
            columns.update(fields)
            session.add(JobAttempt(job_id=job.id, team_id=job.team_id, number=number, **columns))
            job.attempts_count = number

    def finish_with_log(self, job_id: str, log: str) -> None:
        """Give the job one attempt that ran and succeeded, its output where the local launcher
        keeps it, so /logs serves it through the launcher's own reader."""
        attempt_id = new_id()
        directory = self.attempts_root / attempt_id
        directory.mkdir(parents=True)
        (directory / "launch.lock").touch()
        (directory / "trainer.log").write_text(log)
        with transaction(self.session_factory) as session:
            job = session.get(Job, job_id)
            assert job is not None
            now = utcnow()
            session.add(
                JobAttempt(
                    id=attempt_id, job_id=job.id, team_id=job.team_id, number=1, cloud="aws",
                    region="us-east-1", zone="use1-az1", instance_type="g4dn.xlarge",
                    gpu_model="T4", gpu_count=1, capacity_type="on_demand", nodes=1,
                    price_per_hour=0.526, on_demand_price_per_hour=0.526,
                    launch_handle=f"local:{attempt_id}", started_at=now, ended_at=now,
                    end_reason="succeeded", cost_microusd=0,
                )
            )  # fmt: skip
            job.attempts_count = 1
            for status in (JobStatus.SCHEDULED, JobStatus.RUNNING, JobStatus.SUCCEEDED):
                lifecycle.switch_status(session, job, status, reason="test")


@contextmanager
def live_api(home: Path, **overrides: Any) -> Iterator[LiveApi]:
    """The API on a free port; `overrides`: Settings fields (e.g. launcher="kubernetes")."""
    settings = Settings(
        home=home,
        credentials_file=home / "credentials.json",
        admin_token=ADMIN_TOKEN,
        **overrides,
    )
    engine = make_engine(settings)
    upgrade_to_head(engine)
    factory = make_session_factory(engine)
    attempts_root = home / "attempts"
    app = create_app(
        settings,
        session_factory=factory,
        nudge=lambda task, job_id: None,
        logs=LocalLauncher(root=attempts_root).read_log,
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the API did not start")
        time.sleep(0.02)
    try:
        yield LiveApi(
            url=f"http://127.0.0.1:{port}", session_factory=factory, attempts_root=attempts_root
        )
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        engine.dispose()
