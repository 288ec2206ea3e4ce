"""One reconciling pass on a real database (SQLite and PostgreSQL), scripted observations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from api.auth import Principal
from api.database import transaction
from api.jobs import service as jobs
from api.models import ApiToken, CapacityOutage, JobAttempt
from api.money import cost_microusd
from api.placement.learning import PoolHistory
from api.placement.world import pool_histories
from api.settings import Settings
from gpujobs.resources import JobStatus
from gpujobs.spec import CapacityType
from tests.worker.support import (
    Clock,
    RecordingLauncher,
    attempts,
    control_plane,
    events,
    handle_of,
    job,
    principal,
    submit,
)
from worker.control import ControlPlane
from worker.launchers.base import ObservedState
from worker.launching import launch_attempt
from worker.reconciler import reconcile_attempt, reconcile_once
from worker.scheduler import schedule_once

S = JobStatus


@dataclass
class World:
    cp: ControlPlane
    launcher: RecordingLauncher
    clock: Clock
    factory: sessionmaker[Session]
    who: Principal

    def place(self, **spec: object) -> tuple[str, str]:
        """Submit a job and schedule it; returns (job id, attempt id)."""
        job_id = submit(self.factory, self.who, **spec)
        placed = schedule_once(self.cp).placed
        assert len(placed) == 1
        return job_id, placed[0]

    def statuses(self, job_id: str) -> list[str]:
        return [e.to_status for e in events(self.factory, job_id)]


@pytest.fixture
def world(settings: Settings, session_factory: sessionmaker[Session]) -> World:
    launcher = RecordingLauncher()
    clock = Clock()
    return World(
        cp=control_plane(settings, session_factory, launcher, clock),
        launcher=launcher,
        clock=clock,
        factory=session_factory,
        who=principal(session_factory),
    )


def set_price(world: World, attempt_id: str, price: float) -> None:
    with transaction(world.factory) as session:
        session.execute(
            update(JobAttempt).where(JobAttempt.id == attempt_id).values(price_per_hour=price)
        )


def the_attempt(world: World, attempt_id: str) -> JobAttempt:
    with world.factory() as session:
        row = session.get(JobAttempt, attempt_id)
        assert row is not None
        return row


def learned(world: World, attempt: JobAttempt) -> PoolHistory | None:
    """What the scheduler's snapshot reads of the attempt's pool."""
    with world.factory() as session:
        _, seen = pool_histories(session, now=world.clock.now)  # every sight alike
    return seen.get((attempt.zone, attempt.instance_type))


def job_tokens(world: World, job_id: str) -> list[ApiToken]:
    with world.factory() as session:
        return list(session.scalars(select(ApiToken).where(ApiToken.job_id == job_id)))


def test_running_starts_the_job_and_the_attempt(world: World) -> None:
    job_id, attempt_id = world.place()
    launched_at = world.clock.now
    world.clock.advance(30)
    world.launcher.script(attempt_id, ObservedState.RUNNING)

    assert reconcile_once(world.cp) == 1

    assert job(world.factory, job_id).status == S.RUNNING.value
    attempt = the_attempt(world, attempt_id)
    assert attempt.started_at == launched_at  # billing counts from the launch
    assert attempt.ended_at is None
    assert world.statuses(job_id) == ["PENDING", "SCHEDULED", "RUNNING"]
    # Still running: nothing changes, nothing is written again.
    assert reconcile_once(world.cp) == 0
    assert world.statuses(job_id) == ["PENDING", "SCHEDULED", "RUNNING"]
    assert the_attempt(world, attempt_id).started_at == launched_at


def test_a_pending_launch_is_left_alone(world: World) -> None:
    job_id, attempt_id = world.place()
    world.launcher.script(attempt_id, ObservedState.PENDING)

    assert reconcile_once(world.cp) == 0

    assert job(world.factory, job_id).status == S.SCHEDULED.value
    assert the_attempt(world, attempt_id).started_at is None


def test_success_closes_the_attempt_with_its_exact_cost(world: World) -> None:
    job_id, attempt_id = world.place()
    set_price(world, attempt_id, 2.5)
    world.launcher.script(attempt_id, ObservedState.RUNNING)
    reconcile_once(world.cp)
    world.clock.advance(1800)  # half an hour at $2.50/h
    world.launcher.script(attempt_id, ObservedState.SUCCEEDED, exit_code=0)

    assert reconcile_once(world.cp) == 1

    attempt = the_attempt(world, attempt_id)
    assert attempt.end_reason == "succeeded"
    assert attempt.exit_code == 0
    assert attempt.ended_at == world.clock.now
    assert attempt.ended_at - attempt.started_at == timedelta(seconds=1800)
    assert attempt.cost_microusd == 1_250_000
    done = job(world.factory, job_id)
    assert done.status == S.SUCCEEDED.value
    assert done.restarts == 0 and done.preemptions == 0
    assert world.statuses(job_id) == ["PENDING", "SCHEDULED", "RUNNING", "SUCCEEDED"]
    tokens = job_tokens(world, job_id)
    assert tokens and all(t.revoked_at is not None for t in tokens)


def test_success_seen_before_running_still_bills_from_the_launch(world: World) -> None:
    job_id, attempt_id = world.place()
    set_price(world, attempt_id, 3.6)
    world.clock.advance(10)
    world.launcher.script(attempt_id, ObservedState.SUCCEEDED, exit_code=0)

    reconcile_once(world.cp)

    attempt = the_attempt(world, attempt_id)
    assert attempt.cost_microusd == 10_000  # 10 s at $3.60/h
    assert world.statuses(job_id) == ["PENDING", "SCHEDULED", "RUNNING", "SUCCEEDED"]


def test_preemption_returns_the_job_to_pending_and_teaches_the_spot_rate(world: World) -> None:
    job_id, attempt_id = world.place()
    attempt = the_attempt(world, attempt_id)
    assert attempt.capacity_type == CapacityType.SPOT.value
    world.launcher.script(attempt_id, ObservedState.RUNNING)
    reconcile_once(world.cp)
    world.clock.advance(600)
    world.launcher.script(attempt_id, ObservedState.PREEMPTED, exit_code=75, message="reclaimed")

    assert reconcile_once(world.cp) == 1

    closed = the_attempt(world, attempt_id)
    assert closed.end_reason == "preempted"
    assert closed.exit_code == 75
    assert closed.cost_microusd == round(closed.price_per_hour * 600 / 3600 * 1_000_000)
    back = job(world.factory, job_id)
    assert back.status == S.PENDING.value
    assert back.preemptions == 1
    assert back.restarts == 0  # preemptions never spend restarts
    assert world.statuses(job_id)[-3:] == ["RUNNING", "PREEMPTED", "PENDING"]
    seen = learned(world, attempt)
    assert seen is not None
    assert seen.preemptions == 1
    assert seen.spot_hours == pytest.approx(600.0 / 3600.0)
    assert seen.outage_hours == 0 and seen.recoveries == 0  # lost just now
    # The preempted attempt's token died with it: a process of it that outlived the notice
    # cannot report into the job, which lives on.
    ((first_token,),) = [[t for t in job_tokens(world, job_id) if t.attempt_id == attempt_id]]
    assert first_token.revoked_at is not None
    # The next pass places it again as attempt 2, with a token of its own; history is kept.
    placed = schedule_once(world.cp).placed
    assert len(placed) == 1
    assert [a.number for a in attempts(world.factory, job_id)] == [1, 2]
    second = attempts(world.factory, job_id)[1]
    launch_attempt(world.cp, attempt_id=second.id)
    fresh = [t for t in job_tokens(world, job_id) if t.attempt_id == second.id]
    assert len(fresh) == 1 and fresh[0].revoked_at is None


def test_no_spot_capacity_backs_off_from_that_zone(world: World) -> None:
    job_id, attempt_id = world.place()
    attempt = the_attempt(world, attempt_id)
    assert attempt.capacity_type == CapacityType.SPOT.value
    world.launcher.script(attempt_id, ObservedState.NO_CAPACITY, message="sold out")

    assert reconcile_once(world.cp) == 1

    closed = the_attempt(world, attempt_id)
    assert closed.end_reason == "no_capacity"
    assert closed.started_at is None
    assert closed.cost_microusd == 0
    back = job(world.factory, job_id)
    assert back.status == S.PENDING.value
    assert back.restarts == 0 and back.preemptions == 0
    assert world.statuses(job_id)[-2:] == ["SCHEDULED", "PENDING"]
    seen = learned(world, attempt)  # it never ran: no spot hours, no preemption; out since
    assert seen is not None and (seen.preemptions, seen.spot_hours, seen.recoveries) == (0, 0, 0)
    backoff = timedelta(seconds=world.cp.settings.no_capacity_backoff_s)
    with world.factory() as session:
        outage = session.get(
            CapacityOutage, (attempt.zone, attempt.instance_type, CapacityType.SPOT.value)
        )
        assert outage is not None and outage.until == world.clock.now + backoff
    # The next placement avoids spot in that zone for that instance type.
    [second] = [the_attempt(world, a) for a in schedule_once(world.cp).placed]
    assert (second.zone, second.instance_type, second.capacity_type) != (
        attempt.zone,
        attempt.instance_type,
        CapacityType.SPOT.value,
    )


def test_no_on_demand_capacity_backs_off_from_that_offer(world: World) -> None:
    """On-demand GPUs run out too (an unschedulable pod on Kubernetes): the offer is avoided."""
    job_id, attempt_id = world.place(capacity={"types": ["on_demand"]})
    attempt = the_attempt(world, attempt_id)
    assert attempt.capacity_type == CapacityType.ON_DEMAND.value
    world.launcher.script(attempt_id, ObservedState.NO_CAPACITY, message="unschedulable")

    assert reconcile_once(world.cp) == 1

    assert job(world.factory, job_id).status == S.PENDING.value
    [second] = [the_attempt(world, a) for a in schedule_once(world.cp).placed]
    assert second.capacity_type == CapacityType.ON_DEMAND.value
    assert (second.zone, second.instance_type) != (attempt.zone, attempt.instance_type)


def test_failure_with_restarts_left_retries(world: World) -> None:
    job_id, attempt_id = world.place(max_restarts=1)
    world.launcher.script(attempt_id, ObservedState.RUNNING)
    reconcile_once(world.cp)
    world.launcher.script(attempt_id, ObservedState.FAILED, exit_code=1)

    reconcile_once(world.cp)

    assert the_attempt(world, attempt_id).end_reason == "failed"
    assert the_attempt(world, attempt_id).exit_code == 1
    back = job(world.factory, job_id)
    assert back.status == S.PENDING.value
    assert back.restarts == 1 and back.preemptions == 0
    assert "restart 1 of 1" in (back.status_reason or "")
    # The second failure has no restart left.
    [second] = schedule_once(world.cp).placed
    world.launcher.script(second, ObservedState.FAILED, exit_code=1)
    reconcile_once(world.cp)
    failed = job(world.factory, job_id)
    assert failed.status == S.FAILED.value
    assert failed.restarts == 1
    assert all(t.revoked_at is not None for t in job_tokens(world, job_id))


def test_a_configuration_error_fails_the_job_at_once_with_the_trainers_message(
    world: World,
) -> None:
    job_id, attempt_id = world.place(max_restarts=3)
    world.launcher.script(attempt_id, ObservedState.RUNNING)
    reconcile_once(world.cp)
    world.clock.advance(90)
    message = "configuration error: workload 'nope.mod:build': cannot import nope.mod"
    world.launcher.script(attempt_id, ObservedState.FAILED, exit_code=78, message=message)

    reconcile_once(world.cp)

    closed = the_attempt(world, attempt_id)
    assert closed.end_reason == "config_error"
    assert closed.exit_code == 78
    assert closed.ended_at == world.clock.now and closed.started_at is not None
    assert closed.cost_microusd == cost_microusd(
        price_per_hour=closed.price_per_hour,
        started_at=closed.started_at,
        ended_at=closed.ended_at,
    )
    assert closed.cost_microusd > 0  # the minutes it ran are billed, and wasted
    failed = job(world.factory, job_id)
    assert failed.status == S.FAILED.value
    assert failed.restarts == 0
    assert message in (failed.status_reason or "")
    assert schedule_once(world.cp).placed == []  # no retry
    assert len(attempts(world.factory, job_id)) == 1


def test_cancel_stops_the_attempt_through_the_launcher(world: World) -> None:
    job_id, attempt_id = world.place()
    world.launcher.script(attempt_id, ObservedState.RUNNING)
    reconcile_once(world.cp)
    world.clock.advance(60)
    with transaction(world.factory) as session:
        jobs.cancel(session, principal=world.who, job_id=job_id)

    # The stop is sent; the attempt stays open (and billed) while its processes still run.
    assert reconcile_once(world.cp) == 0
    assert world.launcher.cancels == [handle_of(attempt_id)]
    stopping = the_attempt(world, attempt_id)
    assert stopping.ended_at is None and stopping.stop_reason == "cancel"
    assert job(world.factory, job_id).status == S.CANCELLED.value
    world.clock.advance(30)
    world.launcher.script(attempt_id, ObservedState.CANCELLED, exit_code=75)

    assert reconcile_once(world.cp) == 1

    closed = the_attempt(world, attempt_id)
    assert closed.end_reason == "cancelled"
    assert closed.stop_reason == "cancel"
    assert closed.ended_at == world.clock.now  # when the launcher saw it gone
    assert closed.started_at == world.clock.now - timedelta(seconds=90)
    assert closed.cost_microusd == cost_microusd(
        price_per_hour=closed.price_per_hour, started_at=closed.started_at, ended_at=closed.ended_at
    )
    assert world.statuses(job_id)[-1] == "CANCELLED"
    assert all(t.revoked_at is not None for t in job_tokens(world, job_id))
    # Closed: later passes neither stop it again nor touch the ledger.
    cancels = len(world.launcher.cancels)
    assert reconcile_once(world.cp) == 0
    assert len(world.launcher.cancels) == cancels


def test_an_attempt_the_launcher_never_got_is_launched_once(world: World) -> None:
    world.launcher.fail_launches = 1  # the scheduler's launch dies in the middle
    job_id, attempt_id = world.place()
    assert the_attempt(world, attempt_id).launch_handle is None
    assert len(world.launcher.launches) == 1

    assert reconcile_once(world.cp) == 0  # launched now, observed next pass

    assert len(world.launcher.launches) == 2
    assert the_attempt(world, attempt_id).launch_handle == handle_of(attempt_id)
    world.launcher.script(attempt_id, ObservedState.RUNNING)
    assert reconcile_once(world.cp) == 1
    assert reconcile_once(world.cp) == 0
    assert len(world.launcher.launches) == 2  # never launched a third time
    assert job(world.factory, job_id).status == S.RUNNING.value
    assert len(attempts(world.factory, job_id)) == 1


def test_a_launch_that_never_completes_is_given_up(world: World) -> None:
    world.launcher.fail_launches = 1000
    job_id, attempt_id = world.place(max_restarts=2)
    created = the_attempt(world, attempt_id).created_at
    world.clock.now = created + timedelta(seconds=world.cp.settings.launch_timeout_s + 1)

    assert reconcile_once(world.cp) == 1

    attempt = the_attempt(world, attempt_id)
    assert attempt.end_reason == "lost"
    back = job(world.factory, job_id)
    assert back.status == S.PENDING.value
    assert back.restarts == 1


CLOSINGS: dict[str, Callable[[World, str], None]] = {
    "succeeded": lambda w, a: w.launcher.script(a, ObservedState.SUCCEEDED, exit_code=0),
    "preempted": lambda w, a: w.launcher.script(a, ObservedState.PREEMPTED, exit_code=75),
    "failed": lambda w, a: w.launcher.script(a, ObservedState.FAILED, exit_code=1),
    "no_capacity": lambda w, a: w.launcher.script(a, ObservedState.NO_CAPACITY),
}


@pytest.mark.parametrize("end", sorted(CLOSINGS))
def test_reconciling_again_never_closes_twice(world: World, end: str) -> None:
    job_id, attempt_id = world.place()
    CLOSINGS[end](world, attempt_id)
    world.clock.advance(100)
    assert reconcile_once(world.cp) == 1
    closed = the_attempt(world, attempt_id)
    history = world.statuses(job_id)

    def counted(seen: PoolHistory | None) -> tuple[int, float, int] | None:
        # An outage still open grows with the clock; what an attempt counted once must not.
        return (seen.preemptions, seen.spot_hours, seen.recoveries) if seen else None

    seen = counted(learned(world, closed))

    world.clock.advance(100)
    assert reconcile_once(world.cp) == 0
    # A late pass that read the attempt as open before it was closed changes nothing either.
    assert reconcile_attempt(world.cp, attempt_id=attempt_id, job_status="RUNNING") == 0
    assert reconcile_attempt(world.cp, attempt_id=attempt_id, job_status="CANCELLED") == 0

    again = the_attempt(world, attempt_id)
    assert (again.ended_at, again.end_reason, again.cost_microusd) == (
        closed.ended_at,
        closed.end_reason,
        closed.cost_microusd,
    )
    assert world.statuses(job_id) == history
    assert counted(learned(world, closed)) == seen
    assert world.launcher.cancels == []
    assert closed.end_reason == end


def test_a_cancel_before_any_pass_saw_the_attempt_running_bills_it_from_its_launch(
    world: World,
) -> None:
    job_id, attempt_id = world.place()
    launched_at = the_attempt(world, attempt_id).launched_at
    assert launched_at is not None and the_attempt(world, attempt_id).started_at is None
    world.clock.advance(45)
    with transaction(world.factory) as session:
        jobs.cancel(session, principal=world.who, job_id=job_id)
    world.launcher.script(attempt_id, ObservedState.CANCELLED, exit_code=75)

    assert reconcile_once(world.cp) == 1

    closed = the_attempt(world, attempt_id)
    assert closed.end_reason == "cancelled"
    assert closed.started_at == launched_at
    assert closed.cost_microusd == cost_microusd(
        price_per_hour=closed.price_per_hour, started_at=launched_at, ended_at=world.clock.now
    )
    assert closed.cost_microusd > 0


def test_a_cancel_that_lands_during_the_launch_still_stops_what_was_launched(
    world: World,
) -> None:
    """The reconciler closes a cancelled attempt that has no handle yet; the launch in flight
    must then stop what it started, or it would run unwatched and unbilled."""
    job_id = submit(world.factory, world.who)
    launch = world.launcher.launch

    def launch_while_cancelled(request):  # type: ignore[no-untyped-def]
        with transaction(world.factory) as session:
            jobs.cancel(session, principal=world.who, job_id=job_id)
        assert reconcile_once(world.cp) == 1  # closes the handle-less attempt
        return launch(request)

    world.launcher.launch = launch_while_cancelled  # type: ignore[method-assign]

    [attempt_id] = schedule_once(world.cp).placed

    assert the_attempt(world, attempt_id).end_reason == "cancelled"
    assert job(world.factory, job_id).status == S.CANCELLED.value
    assert world.launcher.cancels == [handle_of(attempt_id)]
