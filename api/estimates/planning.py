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
from api.placement.checkpoints import checkpoint_cost
from api.placement.repository import learned_checkpoint_costs, learned_gpu_rates
from api.placement.snapshot import prospective
from api.placement.throughput import learned_speeds, several_models
from api.placement.trainer_keys import trainer_keys
from api.pricing.catalog import Catalog
from api.pricing.gpu_speed import normalized
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
    keys = trainer_keys(spec)
    key = (team_id, keys.checkpoint_key)
    learned = learned_checkpoint_costs(session, keys=[key]).get(key)
    speeds = normalized(settings.gpu_speeds)
    rates = None
    if speeds and several_models(spec.resources.gpu_models):
        fast = (team_id, keys.throughput_key)
        rates = learned_gpu_rates(session, keys=[fast]).get(fast)
    job = prospective(
        spec,
        team=team_id,
        team_name=team_name,
        now=now,
        checkpoint_cost_seconds=checkpoint_cost(None, learned),  # nothing measured of its own
        gpu_speeds=learned_speeds(speeds, rates) if rates else None,
    )
    snapshot = world.snapshot(
        session,
        now=now,
        jobs=[],
        catalog=catalog,
        priors=priors,
        budgets={team_id: remaining_budget},
        restart_hours=settings.restart_hours,
        step_hours=settings.schedule_interval_s / 3600.0,
        gpu_speeds=speeds,
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
