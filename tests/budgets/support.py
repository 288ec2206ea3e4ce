"""Ledger rows for tests: a job and one attempt for a team, written straight to the database."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from api.database import transaction
from api.models import Job, JobAttempt
from api.teams.service import get_by_name

ADMIN = {"Authorization": "Bearer admin-secret-for-tests"}


def team_id(factory: sessionmaker[Session], name: str = "team-a") -> str:
    with transaction(factory) as session:
        team = get_by_name(session, name=name)
        assert team is not None
        return team.id


def add_attempt(
    factory: sessionmaker[Session],
    *,
    team: str = "team-a",
    started_at: datetime | None,
    ended_at: datetime | None = None,
    price_per_hour: float = 1.0,
    cost_microusd: int | None = None,
    nodes: int = 1,
    zone: str = "use1-az5",
    instance_type: str = "g4dn.xlarge",
    reservation_id: str | None = None,
) -> str:
    """One job with one attempt (running unless `ended_at`); returns the attempt id."""
    with transaction(factory) as session:
        owner = get_by_name(session, name=team)
        assert owner is not None
        job = Job(
            team_id=owner.id, name=f"ledger-{uuid.uuid4().hex[:8]}", status="RUNNING", spec={}
        )
        session.add(job)
        session.flush()
        attempt = JobAttempt(
            job_id=job.id,
            team_id=owner.id,
            number=1,
            cloud="aws",
            region="us-east-1",
            zone=zone,
            instance_type=instance_type,
            gpu_model="T4",
            gpu_count=1,
            capacity_type="reserved" if reservation_id else "spot",
            nodes=nodes,
            price_per_hour=price_per_hour,
            on_demand_price_per_hour=price_per_hour * 3,
            reservation_id=reservation_id,
            started_at=started_at,
            ended_at=ended_at,
            cost_microusd=cost_microusd,
        )
        session.add(attempt)
        session.flush()
        return attempt.id
