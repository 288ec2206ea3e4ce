"""What the service learns of each spot pool from its own attempts, through the real scheduler,
reconciler and database: preemptions move the pool's rate for every job (not only the one
preempted), launches that find no capacity move its availability."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from sqlalchemy.orm import Session, sessionmaker

from api.database import read_session
from api.placement import world as worlds
from api.placement.learning import SpotAttempt, pool_history
from api.placement.states import Calibration
from api.pricing.catalog import default_catalog
from api.pricing.cost_model import RESTART_HOURS
from api.pricing.preemption import PreemptionPrior, default_priors
from api.settings import Settings
from gpujobs.spec import CapacityType
from tests.worker.support import (
    Clock,
    RecordingLauncher,
    attempts,
    control_plane,
    principal,
    submit,
    trainer_report,
)
from worker.control import ControlPlane
from worker.launchers.base import ObservedState
from worker.reconciler import reconcile_once
from worker.scheduler import schedule_once


def _placed(cp: ControlPlane, job_id: str) -> tuple[str, str, str]:
    """Schedule; the job's newest attempt as (id, zone, instance type)."""
    schedule_once(cp)
    [*_, attempt] = attempts(cp.factory, job_id)
    assert attempt.capacity_type == CapacityType.SPOT.value
    return attempt.id, attempt.zone, attempt.instance_type


def _learned(cp: ControlPlane, pool: tuple[str, str]) -> PreemptionPrior | None:
    with read_session(cp.factory) as session:
        snap = worlds.snapshot(
            session,
            now=cp.clock(),
            jobs=[],
            catalog=cp.catalog,
            priors=default_priors(),
            budgets={},
            calibration=Calibration(restart_hours=RESTART_HOURS, step_hours=1 / 60),
        )
    return snap.rates.get(pool)


def test_preemptions_in_one_zone_send_new_jobs_to_another(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    """Measured: with spot preempted every ~2 s, each new attempt went back to the same pool
    ("spot: cheapest expected cost while slack remains"); the rate never moved enough to matter."""
    launcher, clock = RecordingLauncher(), Clock()
    # Cloud pools, where a restart provisions a node: two-minute runs then do not pay for it.
    # (A local process starts in 0.01 h: two minutes of spot between preemptions can pay.)
    on_nodes = settings.model_copy(update={"restart_hours": RESTART_HOURS})
    cp = control_plane(on_nodes, session_factory, launcher, clock)
    who = principal(session_factory)
    first = submit(session_factory, who)  # no deadline: spot
    attempt_id, zone, instance_type = _placed(cp, first)
    pool = (zone, instance_type)
    assert _learned(cp, pool) is None  # nothing seen yet: the prior
    prior = _prior(pool)
    moved = []
    job_id = first
    for _ in range(6):
        launcher.script(attempt_id, ObservedState.RUNNING)
        reconcile_once(cp)
        clock.advance(120)
        launcher.script(attempt_id, ObservedState.PREEMPTED, exit_code=75)
        reconcile_once(cp)
        # A new job, not the one preempted (its own back-off is another mechanism)
        job_id = submit(session_factory, who)
        attempt_id, zone, kind = _placed(cp, job_id)
        moved.append((zone, kind) != pool)
        if moved[-1]:
            break
    assert moved[-1], "six preemptions in two-minute runs and new jobs still go to the pool"
    learned = _learned(cp, pool)
    assert learned is not None and learned.rate > 2 * prior.rate
    assert len(moved) <= 6, moved


def test_jobs_preempted_by_one_reclaim_teach_the_pool_what_one_job_would(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    """Two jobs run side by side in one pool for two hours, and one reclaim takes both (the
    reconciler closes each in its own pass): the pool learned one preemption in two hours, as
    one job alone would have shown it, not two in four (the same rate, twice as sure)."""
    launcher, clock = RecordingLauncher(), Clock()
    cp = control_plane(settings, session_factory, launcher, clock)
    who = principal(session_factory)
    first, second = submit(session_factory, who), submit(session_factory, who)  # spot
    placed = [_placed(cp, first), _placed(cp, second)]
    pools = {(zone, kind) for _, zone, kind in placed}
    assert len(pools) == 1, placed
    (pool,) = pools
    for attempt_id, _, _ in placed:
        launcher.script(attempt_id, ObservedState.RUNNING)
    reconcile_once(cp)
    for launch in launcher.launches:  # both trainers train (report), as long as they run
        trainer_report(session_factory, job_token=launch.job_token, job_id=launch.job_id,
                       attempt_id=launch.attempt_id, step=1, checkpoint=0)  # fmt: skip
    began = clock()
    clock.advance(2 * 3600)
    for attempt_id, _, _ in placed:
        launcher.script(attempt_id, ObservedState.PREEMPTED, exit_code=75)
        reconcile_once(cp)
        clock.advance(5)
    learned = _learned(cp, pool)
    one = pool_history(
        [SpotAttempt(began, began, began + timedelta(hours=2), "preempted")],
        since=clock() - worlds.OBSERVATION_WINDOW,
        now=clock(),
        half_life=worlds.EVIDENCE_HALF_LIFE,
    )
    assert learned is not None
    expected = one.posterior(_prior(pool))
    assert (learned.alpha, learned.beta) == pytest.approx((expected.alpha, expected.beta), abs=0.01)


def test_launches_that_find_no_capacity_lengthen_the_pools_outages(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    launcher, clock = RecordingLauncher(), Clock()
    cp = control_plane(settings, session_factory, launcher, clock)
    who = principal(session_factory)
    job_id = submit(session_factory, who)
    attempt_id, zone, instance_type = _placed(cp, job_id)
    pool = (zone, instance_type)
    prior = _prior(pool)
    launcher.script(attempt_id, ObservedState.NO_CAPACITY, message="sold out")
    reconcile_once(cp)
    backoff = settings.no_capacity_backoff_s + 1
    clock.advance(backoff)
    assert _learned(cp, pool) is None  # one refusal: how long the pool stays out is not known
    # Tried again once the back-off lapses (the pool is still the cheapest): out again.
    again_id, *again_pool = _placed(cp, job_id)
    assert tuple(again_pool) == pool
    launcher.script(again_id, ObservedState.NO_CAPACITY, message="sold out")
    reconcile_once(cp)
    learned = _learned(cp, pool)  # out for the back-off at least, and not seen back
    assert learned is not None
    assert learned.mtta_hours > prior.mtta_hours
    assert learned.availability < prior.availability
    assert learned.rate == prior.rate  # no spot hours, no preemption
    clock.advance(backoff)
    back_id, *back_pool = _placed(cp, job_id)
    assert tuple(back_pool) == pool
    launcher.script(back_id, ObservedState.RUNNING)
    reconcile_once(cp)
    back = _learned(cp, pool)  # back after minutes: spot returns sooner than the prior says
    assert back is not None and back.mtta_hours < prior.mtta_hours < learned.mtta_hours


def _offer(zone: str) -> tuple[str, str]:
    found = next(o for o in default_catalog().offers if o.zone == zone)
    return found.region, found.cloud


def _region(zone: str) -> str:
    return _offer(zone)[0]


def _cloud(zone: str) -> str:
    return _offer(zone)[1]


def test_what_a_pool_taught_is_forgotten_after_the_observation_window(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    """Measured: the counters were cumulative, so a pool that preempted a lot once was weighed
    by it for good. Pools drift over days; the last week of attempts is what counts, the older
    weighing less (EVIDENCE_HALF_LIFE)."""
    launcher, clock = RecordingLauncher(), Clock()
    cp = control_plane(settings, session_factory, launcher, clock)
    who = principal(session_factory)
    job_id = submit(session_factory, who)
    attempt_id, zone, instance_type = _placed(cp, job_id)
    pool = (zone, instance_type)
    launcher.script(attempt_id, ObservedState.RUNNING)
    reconcile_once(cp)
    clock.advance(1800)
    running = _learned(cp, pool)  # a running attempt counts its spot hours up to now
    assert running is not None and running.alpha == _prior(pool).alpha
    assert running.beta == pytest.approx(_prior(pool).beta + _weighed_hours(0.5))
    launcher.script(attempt_id, ObservedState.PREEMPTED, exit_code=75)
    reconcile_once(cp)
    preempted = _learned(cp, pool)
    assert preempted is not None and preempted.alpha == pytest.approx(_prior(pool).alpha + 1)
    assert worlds.EVIDENCE_HALF_LIFE is not None
    clock.advance(worlds.EVIDENCE_HALF_LIFE.total_seconds())
    older = _learned(cp, pool)  # one half-life on, the preemption counts a half
    assert older is not None and older.alpha == pytest.approx(_prior(pool).alpha + 0.5)
    clock.advance(worlds.OBSERVATION_WINDOW.total_seconds() + 60)
    assert _learned(cp, pool) is None  # the prior again


def _weighed_hours(hours: float) -> float:
    """Hours just run, each weighed by its age: the integral of 2^(-age / half-life)."""
    assert worlds.EVIDENCE_HALF_LIFE is not None
    per_hour = math.log(2) / (worlds.EVIDENCE_HALF_LIFE.total_seconds() / 3600)
    return (1 - math.exp(-per_hour * hours)) / per_hour


def _prior(pool: tuple[str, str]) -> PreemptionPrior:
    zone, instance_type = pool
    return default_priors().lookup(
        zone=zone, region=_region(zone), instance_type=instance_type, cloud=_cloud(zone)
    )
