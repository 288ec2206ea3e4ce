"""Database models. Money is stored in micro-dollars (integers) so ledgers add up exactly."""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.ext.hybrid import Comparator, hybrid_property
from sqlalchemy.orm import (
    DeclarativeBase,
    InstrumentedAttribute,
    Mapped,
    mapped_column,
    relationship,
)
from sqlalchemy.sql.elements import ColumnElement

from api.pricing.offers import Placement
from gpujobs.spec import CapacityType

# The attempt columns that hold its Placement: the dataclass's field names, so the two cannot
# drift apart (a new Placement field without its column fails on the first attempt written).
PLACEMENT_COLUMNS = tuple(f.name for f in fields(Placement))


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    """A UUIDv7: time-ordered, so ordering by id is ordering by creation (cursor pagination)."""
    millis = time.time_ns() // 1_000_000
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= int.from_bytes(os.urandom(10), "big") & ((1 << 76) - 1)
    value &= ~(0b11 << 62)
    value |= 0b10 << 62
    return str(uuid.UUID(int=value))


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both SQLite (which drops tzinfo) and PostgreSQL."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSON}


class Team(Base):
    __tablename__ = "teams"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiToken(Base):
    """A bearer token, stored as its SHA-256 only. Job-scoped tokens belong to one job, and
    those issued to a launch to one attempt of it.
    Admin rights never come from a token row: only the configured admin token has them."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[str | None] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), index=True
    )
    # The attempt a job token was issued for: revoked when that attempt ends (worker.billing).
    attempt_id: Mapped[str | None] = mapped_column(String(36), index=True, default=None)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(12))
    name: Mapped[str] = mapped_column(String(100), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    expires_at: Mapped[datetime | None] = mapped_column(default=None)
    # Written at most once a minute per token, so authenticating is not a write per request.
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)


ACTIVE_JOB = "status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')"


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("team_id", "idempotency_key", name="uq_jobs_team_idempotency_key"),
        Index("ix_jobs_status_priority", "status", "priority"),
        Index("ix_jobs_team_id_id", "team_id", "id"),
        # The team's latest job of a trainer: what its checkpoint costs (api.placement.checkpoints).
        Index("ix_jobs_team_checkpoint_key", "team_id", "checkpoint_key", "created_at"),
        # The team's jobs of a trainer: the rates they measured per GPU (api.placement.throughput).
        Index("ix_jobs_team_throughput_key", "team_id", "throughput_key", "created_at"),
        # A name is unique among a team's unfinished jobs: the database says so, so concurrent
        # submits need no lock to find out (migration 0006).
        Index(
            "uq_jobs_team_active_name",
            "team_id",
            "name",
            unique=True,
            postgresql_where=text(ACTIVE_JOB),
            sqlite_where=text(ACTIVE_JOB),
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(63))
    status: Mapped[str] = mapped_column(String(16))
    status_reason: Mapped[str | None] = mapped_column(Text, default=None)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    priority: Mapped[int] = mapped_column(Integer, default=50)
    deadline_at: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    idempotency_key: Mapped[str | None] = mapped_column(String(255), default=None)
    request_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    attempts_count: Mapped[int] = mapped_column(Integer, default=0)
    resume_from_step: Mapped[int | None] = mapped_column(Integer, default=None)
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # The scheduler's claim: whoever holds the token may write; a late run finds it changed.
    lock_token: Mapped[str | None] = mapped_column(String(36), default=None)
    lock_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    not_before: Mapped[datetime | None] = mapped_column(default=None)
    # The quote at submit of the policy as it will run (api.placement.quote): expected and
    # typical (likely) cost, the high percentile budgets hold, expected finish and
    # P(deadline). `holds_budget`: the hold counts against the team's budget until the job ends
    # (not while deferred over budget).
    quote_cost_microusd: Mapped[int | None] = mapped_column(BigInteger, default=None)
    quote_typical_microusd: Mapped[int | None] = mapped_column(BigInteger, default=None)
    quote_hold_microusd: Mapped[int | None] = mapped_column(BigInteger, default=None)
    quote_finish_at: Mapped[datetime | None] = mapped_column(default=None)
    quote_p_meet: Mapped[float | None] = mapped_column(Float, default=None)
    holds_budget: Mapped[bool] = mapped_column(Boolean, default=False)
    # What decides the size of its checkpoints, and the stall of the last one its trainer
    # measured (api.placement.checkpoints): a new attempt reports 0 until its first checkpoint,
    # which must not erase what the job measured before.
    checkpoint_key: Mapped[str | None] = mapped_column(String(64), default=None)
    checkpoint_stall_s: Mapped[float | None] = mapped_column(Float, default=None)
    # What sets its trainer's rate on a given GPU (api.placement.throughput).
    throughput_key: Mapped[str | None] = mapped_column(String(64), default=None)
    # Its checkpoints' prefix (gpujobs.checkpoints), set at its first launch: every later
    # attempt and the artifacts API use it, whatever the deployment's root has become since.
    checkpoint_uri: Mapped[str | None] = mapped_column(Text, default=None)

    team: Mapped[Team] = relationship(lazy="joined")


class AttemptRole(StrEnum):
    """What an attempt is to its job: the primary is the job's attempt (the one that trains, or
    trained), a standby is held beside it until a handover makes it the primary
    (api.jobs.standby holds a standby's states)."""

    PRIMARY = "primary"
    STANDBY = "standby"


class _RoleComparator(Comparator[AttemptRole]):
    """`JobAttempt.role == AttemptRole.X` in a query, as a test of the stored flag (no CASE, so
    an index on the flag would serve it)."""

    def __init__(self, flag: InstrumentedAttribute[bool]) -> None:
        # Compared by way of the flag the role is stored as: a bool column, not a role one.
        super().__init__(flag)  # type: ignore[arg-type]
        self.flag = flag

    # SQL comparisons return expressions, not bools (as every column's do).
    def __eq__(self, other: AttemptRole) -> ColumnElement[bool]:  # type: ignore[override]
        return self.flag.is_(AttemptRole(other) is AttemptRole.STANDBY)

    def __ne__(self, other: AttemptRole) -> ColumnElement[bool]:  # type: ignore[override]
        return self.flag.is_(AttemptRole(other) is AttemptRole.PRIMARY)


class JobAttempt(Base):
    """One placement of a job. Closed attempts are the cost ledger and are never rewritten."""

    __tablename__ = "job_attempts"
    __table_args__ = (
        UniqueConstraint("job_id", "number", name="uq_job_attempts_job_number"),
        # What the scheduler learns of each spot pool reads the attempts of the last week.
        Index("ix_job_attempts_kind_created", "capacity_type", "created_at"),
        Index("ix_job_attempts_kind_ended", "capacity_type", "ended_at"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    cloud: Mapped[str] = mapped_column(String(20))
    region: Mapped[str] = mapped_column(String(40))
    zone: Mapped[str] = mapped_column(String(40))
    instance_type: Mapped[str] = mapped_column(String(60))
    gpu_model: Mapped[str] = mapped_column(String(40))
    gpu_count: Mapped[int] = mapped_column(Integer)
    capacity_type: Mapped[str] = mapped_column(String(16))
    nodes: Mapped[int] = mapped_column(Integer)
    price_per_hour: Mapped[float] = mapped_column(Float)
    on_demand_price_per_hour: Mapped[float] = mapped_column(Float)
    reservation_id: Mapped[str | None] = mapped_column(
        ForeignKey("reservations.id", ondelete="SET NULL"), default=None
    )
    checkpoint_every_seconds: Mapped[float | None] = mapped_column(Float, default=None)
    launch_handle: Mapped[str | None] = mapped_column(String(255), default=None)
    launched_at: Mapped[datetime | None] = mapped_column(default=None)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    ended_at: Mapped[datetime | None] = mapped_column(default=None)
    end_reason: Mapped[str | None] = mapped_column(String(32), default=None)  # an EndReason
    # Why we asked the attempt to stop (a StopReason: gpujobs.reasons), so its exit is read
    # correctly.
    stop_reason: Mapped[str | None] = mapped_column(String(16), default=None)
    exit_code: Mapped[int | None] = mapped_column(Integer, default=None)
    cost_microusd: Mapped[int | None] = mapped_column(BigInteger, default=None)
    resume_from_step: Mapped[int | None] = mapped_column(Integer, default=None)
    end_step: Mapped[int | None] = mapped_column(Integer, default=None)
    steps_lost: Mapped[int | None] = mapped_column(Integer, default=None)
    # The rate its trainer reported (samples a second over all ranks) on this GPU model, its
    # windows averaged over time (api.jobs.measured_rate), written while the attempt is open
    # (api.placement.throughput).
    samples_per_s: Mapped[float | None] = mapped_column(Float, default=None)
    # Make-before-break: held beside the job's running attempt until a handover promotes it
    # (then False). One that ended unpromoted stays True: it never was the job's attempt, but
    # its minutes are on the ledger all the same. Read and written as `role`, never directly:
    # the column is this flag only so that no migration was needed (tests/test_attempt_role.py).
    standby: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # First seen running; a standby's again when it is promoted and begins to train (the
    # wait for its trainer's first report counts from it: worker.first_report).
    running_at: Mapped[datetime | None] = mapped_column(default=None)
    ready_at: Mapped[datetime | None] = mapped_column(default=None)  # its trainer first waited
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    @classmethod
    def placed(cls, placement: Placement, **columns: Any) -> JobAttempt:
        """A new attempt running on `placement`; `columns` are the rest of the row."""
        values = {name: getattr(placement, name) for name in PLACEMENT_COLUMNS}
        values["capacity_type"] = placement.capacity_type.value
        return cls(**values, **columns)

    @hybrid_property
    def role(self) -> AttemptRole:
        return AttemptRole.STANDBY if self.standby else AttemptRole.PRIMARY

    @role.inplace.setter
    def _role_setter(self, value: AttemptRole) -> None:
        self.standby = AttemptRole(value) is AttemptRole.STANDBY

    @role.inplace.comparator
    @classmethod
    def _role_comparator(cls) -> _RoleComparator:
        return _RoleComparator(cls.standby)

    @property
    def placement(self) -> Placement:
        """Where this attempt runs and its price, as the scheduler placed it."""
        values = {name: getattr(self, name) for name in PLACEMENT_COLUMNS}
        values["capacity_type"] = CapacityType(self.capacity_type)
        return Placement(**values)


class JobEvent(Base):
    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text, default=None)
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class Reservation(Base):
    """Prepaid capacity: `count` instances of a type in a zone, paid whether used or not."""

    __tablename__ = "reservations"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    cloud: Mapped[str] = mapped_column(String(20))
    region: Mapped[str] = mapped_column(String(40))
    zone: Mapped[str] = mapped_column(String(40))
    instance_type: Mapped[str] = mapped_column(String(60))
    count: Mapped[int] = mapped_column(Integer)
    price_per_hour: Mapped[float] = mapped_column(Float)
    starts_at: Mapped[datetime | None] = mapped_column(default=None)
    ends_at: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class TeamBudget(Base):
    __tablename__ = "team_budgets"

    team_id: Mapped[str] = mapped_column(
        ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True
    )
    monthly_microusd: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class CapacityOutage(Base):
    """An offer's capacity type that said "no capacity" recently: avoided until `until`."""

    __tablename__ = "capacity_outages"

    zone: Mapped[str] = mapped_column(String(40), primary_key=True)
    instance_type: Mapped[str] = mapped_column(String(60), primary_key=True)
    capacity_type: Mapped[str] = mapped_column(String(16), primary_key=True)
    until: Mapped[datetime] = mapped_column()
    reason: Mapped[str | None] = mapped_column(Text, default=None)
