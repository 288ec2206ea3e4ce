"""Weigh a spec the way the scheduler will: the same snapshot (learned rates, restart time,
reservations, budgets, capacity known gone, the checkpoint cost the team's earlier run of the
trainer measured), decide() itself, and every plan it considered.
Admission at submit calls `weigh`. The estimate endpoint reads first (`read`) and weighs once
its session is closed: a year-long quote computes for seconds and must hold no connection (on
SQLite, no lock) meanwhile."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from api.errors import InvalidRequest
from api.placement import Estimate, JobState, Snapshot, estimate, world
from api.pricing.catalog import Catalog
from api.pricing.preemption import Priors
from api.settings import Settings
from gpujobs.resources import FieldError
from gpujobs.spec import JobSpec


def require_estimate(spec: JobSpec) -> float:
    if spec.estimated_hours is None:
        reason = "needed to estimate cost and finish time (uninterrupted hours on the resources)"
        raise InvalidRequest(
            f"estimated_hours: {reason}",
            fields=[FieldError(field="estimated_hours", reason=reason)],
        )
    return spec.estimated_hours


@dataclass(frozen=True, slots=True)
class Weighing:
    """What weighing a spec reads from the database: the spec as a pending job, and the world
    the scheduler would see. Weighing it (decide(), the quote) is pure computation."""

    job: JobState
    snapshot: Snapshot

    def weigh(self, *, limit: int = 20) -> Estimate:
        return estimate(self.snapshot, self.job, limit=limit)


def read(
    session: Session,
    *,
    spec: JobSpec,
    team_id: str,
    team_name: str | None,
    now: datetime,
    catalog: Catalog,
    priors: Priors,
    settings: Settings,
    remaining_budget: float | None,
) -> Weighing:
    """Every read that weighing the spec needs; a spec without `estimated_hours` is a 422."""
    require_estimate(spec)
    calibration = world.calibration(settings)
    job = world.prospective(
        session,
        spec=spec,
        team_id=team_id,
        team_name=team_name,
        now=now,
        speeds=calibration.gpu_speeds,
    )
    # The spec alone: the other jobs' claims on reservations and budget are already in the
    # database (reservations in use, holds), and their own decisions are not the estimate's.
    snapshot = world.snapshot(
        session,
        now=now,
        jobs=[],
        catalog=catalog,
        priors=priors,
        budgets={team_id: remaining_budget},
        calibration=calibration,
        # Both shipped launchers hold standbys (the API cannot ask the worker's launcher): the
        # quote prices them wherever the operator allows them.
        standby=settings.standby,
    )
    return Weighing(job=job, snapshot=snapshot)


def weigh(
    session: Session,
    *,
    spec: JobSpec,
    team_id: str,
    team_name: str | None,
    now: datetime,
    catalog: Catalog,
    priors: Priors,
    settings: Settings,
    remaining_budget: float | None,
    limit: int = 20,
) -> Estimate:
    """decide()'s answer for the spec submitted now, and the plans it weighed; a spec without
    `estimated_hours` is a 422."""
    return read(
        session,
        spec=spec,
        team_id=team_id,
        team_name=team_name,
        now=now,
        catalog=catalog,
        priors=priors,
        settings=settings,
        remaining_budget=remaining_budget,
    ).weigh(limit=limit)
