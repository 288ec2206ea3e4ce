"""A ledger built by hand, with every figure worked out on paper below.

Period: [2025-03-01 00:00, 2025-03-03 00:00) UTC.

team-a
  llm (job 1)
    a1 spot      p4d.24xlarge 8 GPUs  $12.00/h (od $32.77)  03-01 10:00-13:00  preempted
       cost 36.000000; od 98.310000; 24 GPU-h; steps 0->3000, 500 lost => 1/6 of 3 h = 0.5 h
       lost: 4 GPU-h, $6.000000
    a2 on_demand p4d.24xlarge 8 GPUs  $32.77/h              03-01 13:10-03-02 01:10 succeeded
       cost 393.240000 = od; 96 GPU-h; 03-01 gets 10h50m = 355.008333, 03-02 gets 38.231667
  vision (job 2, RUNNING)
    a3 reserved  g5.xlarge    1 GPU   $0.50/h  (od $1.006)  03-02 00:00-running
       counted to the period's end: 24 h, cost 12.000000, od 24.144000, 24 GPU-h
    a5 spot      g4dn.xlarge  1 GPU   $0.30/h  (od $1.006)  02-28 22:00-03-01 02:00 failed
       recorded cost 1.200000 for 4 h; 2 h in the period: cost 0.600000, od 2.012000, 2 GPU-h
    a7 spot      g5.xlarge    never started, preempted 03-02 05:00: one preemption, no cost
team-b (budget $100/month)
  etl (job 3)
    a4 spot      g5.12xlarge  4 GPUs  $1.70/h  (od $5.672)  03-01 06:00-08:00  cancelled
       cost 3.400000; od 11.344000; 8 GPU-h
    a6 spot      g5.12xlarge  4 GPUs  this month, first half of it so far: recorded $5.000000
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from api.database import transaction
from api.models import Job, JobAttempt, Team, TeamBudget, utcnow
from api.teams import service as teams

START = datetime(2025, 3, 1, tzinfo=UTC)
END = datetime(2025, 3, 3, tzinfo=UTC)
M = 1_000_000

TEAM_A = {
    "cost": 441_840_000,
    "on_demand": 517_706_000,
    "gpu_hours": 146.0,
    "preemptions": 2,
    "lost_gpu_hours": 4.0,
    "lost_cost": 6_000_000,
}
TEAM_B = {"cost": 3_400_000, "on_demand": 11_344_000, "gpu_hours": 8.0, "preemptions": 0}
BY_DAY_A = {"2025-03-01": 391_608_333, "2025-03-02": 50_231_667}
BY_CAPACITY_A = {"on_demand": 393_240_000, "spot": 36_600_000, "reserved": 12_000_000}
BY_INSTANCE_A = {"p4d.24xlarge": 429_240_000, "g5.xlarge": 12_000_000, "g4dn.xlarge": 600_000}
BY_JOB_A = {"llm": 429_240_000, "vision": 12_600_000}
BUDGET_B = 100 * M
USED_B_THIS_MONTH = 5 * M


@dataclass
class Seeded:
    tokens: dict[str, str]
    jobs: dict[str, str]


def at(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2025, 3, 1, tzinfo=UTC) + timedelta(days=day - 1, hours=hour, minutes=minute)


def _job(session: Session, team: Team, name: str, status: str, **extra: object) -> Job:
    job = Job(
        team_id=team.id,
        name=name,
        status=status,
        spec={"name": name, "trainer": {"steps": 3000}},
        created_at=at(1, 0),
        updated_at=at(1, 0),
        **extra,
    )
    session.add(job)
    session.flush()
    return job


def _attempt(session: Session, job: Job, number: int, **fields: object) -> None:
    defaults: dict[str, object] = {
        "cloud": "aws",
        "region": "us-east-1",
        "zone": "us-east-1a",
        "gpu_model": "A100",
        "nodes": 1,
    }
    session.add(JobAttempt(job_id=job.id, team_id=job.team_id, number=number, **defaults | fields))


def seed(factory: sessionmaker[Session], now: datetime | None = None) -> Seeded:
    now = now or utcnow()
    tokens: dict[str, str] = {}
    with transaction(factory) as session:
        team_a, tokens["team-a"] = teams.create_team(session, name="team-a")
        team_b, tokens["team-b"] = teams.create_team(session, name="team-b")
        session.add(TeamBudget(team_id=team_b.id, monthly_microusd=BUDGET_B))
        llm = _job(session, team_a, "llm", "SUCCEEDED", preemptions=1, attempts_count=2)
        vision = _job(
            session,
            team_a,
            "vision",
            "RUNNING",
            attempts_count=3,
            progress={"step": 1200, "total_steps": 3000},
        )
        etl = _job(session, team_b, "etl", "CANCELLED", attempts_count=2)
        p4d = {"instance_type": "p4d.24xlarge", "gpu_count": 8, "on_demand_price_per_hour": 32.77}
        _attempt(
            session, llm, 1, **p4d, capacity_type="spot", price_per_hour=12.0,
            started_at=at(1, 10), ended_at=at(1, 13), end_reason="preempted",
            cost_microusd=36 * M, resume_from_step=0, end_step=3000, steps_lost=500,
        )  # fmt: skip
        _attempt(
            session, llm, 2, **p4d, capacity_type="on_demand", price_per_hour=32.77,
            started_at=at(1, 13, 10), ended_at=at(2, 1, 10), end_reason="succeeded",
            cost_microusd=393_240_000, resume_from_step=2500, end_step=3000,
        )  # fmt: skip
        g5 = {"instance_type": "g5.xlarge", "gpu_count": 1, "on_demand_price_per_hour": 1.006}
        _attempt(
            session, vision, 1, instance_type="g4dn.xlarge", gpu_count=1,
            on_demand_price_per_hour=1.006, capacity_type="spot", price_per_hour=0.3,
            started_at=at(1, -2), ended_at=at(1, 2), end_reason="failed", cost_microusd=1_200_000,
        )  # fmt: skip
        _attempt(
            session, vision, 2, **g5, capacity_type="spot", price_per_hour=0.4,
            started_at=None, ended_at=at(2, 5), end_reason="preempted",
        )  # fmt: skip
        _attempt(
            session, vision, 3, **g5, capacity_type="reserved", price_per_hour=0.5,
            started_at=at(2, 0), ended_at=None,
        )  # fmt: skip
        g5_12 = {"instance_type": "g5.12xlarge", "gpu_count": 4, "on_demand_price_per_hour": 5.672}
        _attempt(
            session, etl, 1, **g5_12, capacity_type="spot", price_per_hour=1.7,
            started_at=at(1, 6), ended_at=at(1, 8), end_reason="cancelled", cost_microusd=3_400_000,
        )  # fmt: skip
        month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        _attempt(
            session, etl, 2, **g5_12, capacity_type="spot", price_per_hour=1.7,
            started_at=month, ended_at=month + (now - month) / 2, end_reason="cancelled",
            cost_microusd=USED_B_THIS_MONTH,
        )  # fmt: skip
        jobs = {"llm": llm.id, "vision": vision.id, "etl": etl.id}
    return Seeded(tokens=tokens, jobs=jobs)
