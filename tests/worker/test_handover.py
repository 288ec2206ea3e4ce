"""Make-before-break on the control plane (worker.handover): a real database (SQLite and
PostgreSQL), the real scheduler, reconciler and API service; the launcher's observations are
scripted. Each step is taken by a pass of its own, so a pass that never happens (a worker killed
between two) is a test of crash safety: the next pass takes the same step from the database."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from sqlalchemy.orm import Session, sessionmaker

from api.auth import Principal, authenticate
from api.database import transaction
from api.errors import Unauthorized
from api.jobs import service as jobs
from api.models import CapacityOutage, JobAttempt, utcnow
from api.money import cost_microusd
from api.placement import Withdraw
from api.settings import Settings
from gpujobs.resources import JobStatus
from gpujobs.runtime import EXIT_PREEMPTED, StandbyAnswer, StandbyCall
from tests.worker.support import (
    Clock,
    RecordingLauncher,
    attempts,
    control_plane,
    count,
    events,
    handle_of,
    job,
    principal,
    submit,
    trainer_report,
)
from worker.control import ControlPlane
from worker.launchers.base import Capability, ObservedState
from worker.reconciler import reconcile_once
from worker.scheduler import _apply_withdraw, schedule_once

S = JobStatus


@dataclass
class StandbyLauncher(RecordingLauncher):
    capabilities: frozenset[Capability] = field(
        default_factory=lambda: frozenset({Capability.SPOT_AVAILABILITY, Capability.STANDBY})
    )


@dataclass
class World:
    cp: ControlPlane
    launcher: StandbyLauncher
    clock: Clock
    factory: sessionmaker[Session]
    who: Principal

    def running_on_demand(self, *, deadline: bool = True) -> tuple[str, str]:
        """A job on on-demand, running: (job id, attempt id). With a deadline: estimated at 1 h
        with little slack, placed on on-demand once waiting for spot (out) would risk it; then
        its trainer measures a rate that leaves half an hour of work, so slack is back."""
        self.launcher.spot = False
        limits = {"estimated_hours": 1.0, "deadline_hours": 1.05} if deadline else {}
        job_id = submit(self.factory, self.who, capacity={"types": ["spot", "on_demand"]}, **limits)
        placed = schedule_once(self.cp).placed
        for _ in range(10):  # it waits for spot while the slack allows
            if placed:
                break
            self.clock.advance(60)
            placed = schedule_once(self.cp).placed
        self.launcher.script(placed[0], ObservedState.RUNNING)
        reconcile_once(self.cp)
        assert job(self.factory, job_id).status == S.RUNNING.value
        assert attempts(self.factory, job_id)[0].capacity_type == "on_demand"
        if deadline:
            # 100 steps of 8 samples at 0.89 samples/s: 50 steps left are 0.125 h of work.
            self.report(job_id, placed[0], step=50, checkpoint=50, samples_per_s=0.89)
        return job_id, placed[0]

    def hold_standby(self, job_id: str) -> str:
        """Spot is back: the scheduler holds a standby on it; returns its attempt id."""
        self.launcher.spot = True
        result = schedule_once(self.cp)
        assert result.standbys == 1 and result.migrated == 0, result
        standby = attempts(self.factory, job_id)[-1]
        assert standby.standby and standby.capacity_type == "spot"
        return standby.id

    def ask(self, job_id: str, attempt_id: str) -> StandbyAnswer:
        """What the standby's trainer asks, with its own job token, through the API service."""
        request = next(r for r in self.launcher.launches if r.attempt_id == attempt_id)
        with transaction(self.factory) as session:
            who = authenticate(session, authorization=f"Bearer {request.job_token}", admin_token="")
            answer, _ = jobs.standby_answer(
                session,
                principal=who,
                job_id=job_id,
                call=StandbyCall(attempt_id=attempt_id),
                now=utcnow(),
            )
        return answer

    def report(
        self,
        job_id: str,
        attempt_id: str,
        *,
        step: int,
        checkpoint: int,
        samples_per_s: float | None = None,
        lasts: bool = False,
    ) -> None:
        request = next(r for r in self.launcher.launches if r.attempt_id == attempt_id)
        trainer_report(
            self.factory,
            job_token=request.job_token,
            job_id=job_id,
            attempt_id=attempt_id,
            step=step,
            checkpoint=checkpoint,
            samples_per_s=samples_per_s,
            lasts=lasts,
        )

    def attempt(self, attempt_id: str) -> JobAttempt:
        with self.factory() as session:
            row = session.get(JobAttempt, attempt_id)
            assert row is not None
            return row

    def notes(self, job_id: str) -> list[str]:
        return [
            e.reason or "" for e in events(self.factory, job_id) if e.from_status == e.to_status
        ]

    def statuses(self, job_id: str) -> list[str]:
        return [e.to_status for e in events(self.factory, job_id) if e.from_status != e.to_status]


@pytest.fixture
def world(settings: Settings, session_factory: sessionmaker[Session]) -> World:
    launcher = StandbyLauncher()
    clock = Clock()
    return World(
        cp=control_plane(settings, session_factory, launcher, clock),
        launcher=launcher,
        clock=clock,
        factory=session_factory,
        who=principal(session_factory),
    )


def test_a_job_is_handed_from_on_demand_to_spot_without_stopping(world: World) -> None:
    job_id, running_id = world.running_on_demand()
    standby_id = world.hold_standby(job_id)
    request = world.launcher.launches[-1]
    assert request.attempt_id == standby_id and request.run_config.standby
    assert request.placement.capacity_type.value == "spot"
    assert world.notes(job_id)[-1].startswith("standby on spot ")

    # Held, not yet running: nothing is billed, the running attempt is left alone.
    world.launcher.script(standby_id, ObservedState.PENDING)
    reconcile_once(world.cp)
    assert world.attempt(standby_id).started_at is None
    assert world.launcher.cancels == []
    # Capacity found: billed from its launch; its trainer has not asked yet, so no handover.
    world.launcher.script(standby_id, ObservedState.RUNNING)
    world.clock.advance(60)
    reconcile_once(world.cp)
    assert world.attempt(standby_id).started_at is not None
    assert world.launcher.cancels == []
    # A second scheduling pass holds no second standby and moves nothing.
    again = schedule_once(world.cp)
    assert again.standbys == 0 and again.migrated == 0
    # Its trainer waits: the answer is wait, and the running attempt is released.
    assert world.ask(job_id, standby_id).action == "wait"
    world.report(job_id, running_id, step=60, checkpoint=55)
    reconcile_once(world.cp)
    assert world.attempt(running_id).stop_reason == "handover"
    assert world.launcher.cancels == [handle_of(running_id)]
    assert world.ask(job_id, standby_id).action == "wait"  # it still trains: no go yet
    # A pass while it checkpoints sends the stop again (a lost stop costs one pass).
    reconcile_once(world.cp)
    assert world.launcher.cancels == [handle_of(running_id)] * 2
    # It checkpoints on the notice and exits: handed over in one transaction.
    world.report(job_id, running_id, step=61, checkpoint=61)
    world.clock.advance(30)
    world.launcher.script(running_id, ObservedState.FAILED, exit_code=EXIT_PREEMPTED)
    reconcile_once(world.cp)

    old, new = world.attempt(running_id), world.attempt(standby_id)
    assert old.end_reason == "handed_over" and old.steps_lost == 0 and old.cost_microusd
    assert not new.standby and new.ended_at is None and new.resume_from_step == 61
    answer = world.ask(job_id, standby_id)
    assert answer.action == "go" and answer.resume_from_step == 61
    the_job = job(world.factory, job_id)
    assert the_job.status == S.RUNNING.value
    assert the_job.preemptions == 0 and the_job.restarts == 0
    # The job never left RUNNING, and the events say what happened and what it cost.
    assert world.statuses(job_id) == ["PENDING", "SCHEDULED", "RUNNING"]
    handed = world.notes(job_id)[-1]
    assert new.started_at is not None and old.ended_at is not None
    overlap = cost_microusd(
        price_per_hour=new.price_per_hour, started_at=new.started_at, ended_at=old.ended_at
    )
    assert handed.startswith(f"handed over at step 61 from attempt {old.number} (on-demand")
    assert f"to attempt {new.number} (spot" in handed and "0 steps lost" in handed
    assert f"${overlap / 1e6:.4f}" in handed
    # The promoted attempt is the job's: its progress is taken; the old one's token died with
    # its attempt, so a process of it left running is refused at the door.
    world.report(job_id, standby_id, step=65, checkpoint=61)
    with pytest.raises(Unauthorized, match="revoked"):
        world.report(job_id, running_id, step=66, checkpoint=61)
    # It runs on spot now: the scheduler leaves it there.
    assert schedule_once(world.cp).migrated == 0
    assert len(attempts(world.factory, job_id)) == 2


def test_a_standby_that_finds_no_capacity_costs_nothing_and_the_job_runs_on(world: World) -> None:
    job_id, running_id = world.running_on_demand()
    standby_id = world.hold_standby(job_id)
    world.launcher.script(standby_id, ObservedState.NO_CAPACITY, message="no spot GPUs")

    reconcile_once(world.cp)

    standby = world.attempt(standby_id)
    assert standby.end_reason == "no_capacity" and standby.cost_microusd == 0
    assert count(world.factory, CapacityOutage) == 1
    assert world.attempt(running_id).ended_at is None
    assert world.launcher.cancels == []
    assert job(world.factory, job_id).status == S.RUNNING.value
    assert "ended before the handover (no capacity: no spot GPUs)" in world.notes(job_id)[-1]
    # That pool is out for a while: a new standby, if any, goes to another.
    schedule_once(world.cp)
    lost = (standby.zone, standby.instance_type)
    assert all((a.zone, a.instance_type) != lost for a in attempts(world.factory, job_id)[2:])


def test_a_standby_preempted_before_the_handover_is_billed_and_leaves_the_job_running(
    world: World,
) -> None:
    job_id, running_id = world.running_on_demand()
    standby_id = world.hold_standby(job_id)
    world.launcher.script(standby_id, ObservedState.RUNNING)
    reconcile_once(world.cp)
    world.clock.advance(600)
    world.launcher.script(standby_id, ObservedState.PREEMPTED)

    reconcile_once(world.cp)

    standby = world.attempt(standby_id)
    assert standby.end_reason == "preempted"
    assert standby.started_at is not None and standby.ended_at is not None
    assert standby.cost_microusd == cost_microusd(
        price_per_hour=standby.price_per_hour,
        started_at=standby.started_at,
        ended_at=standby.ended_at,
    )
    assert standby.cost_microusd > 0
    the_job = job(world.factory, job_id)
    assert the_job.status == S.RUNNING.value and the_job.preemptions == 0
    assert world.attempt(running_id).stop_reason is None
    # Its token died with it: its trainer, still asking, is refused, which it reads as "stop"
    # (trainer/standby.py).
    with pytest.raises(Unauthorized, match="revoked"):
        world.ask(job_id, standby_id)
    # The job's cost so far counts both attempts' minutes.
    with world.factory() as session:
        spent = jobs.spends(session, jobs=[the_job])[job_id].cost_microusd
    assert spent >= standby.cost_microusd


def test_a_standby_lost_after_the_release_leaves_the_job_to_be_placed_again(world: World) -> None:
    job_id, running_id = world.running_on_demand()
    standby_id = world.hold_standby(job_id)
    world.launcher.script(standby_id, ObservedState.RUNNING)
    world.ask(job_id, standby_id)
    reconcile_once(world.cp)
    assert world.attempt(running_id).stop_reason == "handover"
    # The standby dies (SIGKILL) while the running attempt checkpoints.
    world.launcher.script(standby_id, ObservedState.FAILED, exit_code=-9)
    reconcile_once(world.cp)
    assert world.attempt(standby_id).end_reason == "failed"
    world.launcher.script(running_id, ObservedState.FAILED, exit_code=EXIT_PREEMPTED)

    reconcile_once(world.cp)

    assert world.attempt(running_id).end_reason == "handed_over"
    the_job = job(world.factory, job_id)
    assert the_job.status == S.PENDING.value and the_job.restarts == 0
    assert world.statuses(job_id)[-2:] == ["PREEMPTED", "PENDING"]
    # Placed again, on one attempt: nothing trains twice.
    assert len(schedule_once(world.cp).placed) == 1
    open_attempts = [a for a in attempts(world.factory, job_id) if a.ended_at is None]
    assert len(open_attempts) == 1 and not open_attempts[0].standby


def test_the_old_attempt_killed_during_the_handover_still_hands_over(world: World) -> None:
    """SIGKILL of the released attempt: its last checkpoint is older, and the standby resumes
    from it (the trainer restores the newest complete checkpoint); the steps since are lost."""
    job_id, running_id = world.running_on_demand()
    standby_id = world.hold_standby(job_id)
    world.launcher.script(standby_id, ObservedState.RUNNING)
    world.ask(job_id, standby_id)
    world.report(job_id, running_id, step=60, checkpoint=55)
    reconcile_once(world.cp)
    world.launcher.script(running_id, ObservedState.FAILED, exit_code=-9)

    reconcile_once(world.cp)

    old = world.attempt(running_id)
    assert old.end_reason == "handed_over" and old.steps_lost == 5
    assert world.ask(job_id, standby_id) == StandbyAnswer(action="go", resume_from_step=55)
    assert "5 steps lost" in world.notes(job_id)[-1]


def test_a_job_that_finishes_before_the_handover_stops_its_standby(world: World) -> None:
    job_id, running_id = world.running_on_demand()
    standby_id = world.hold_standby(job_id)
    world.launcher.script(standby_id, ObservedState.RUNNING)
    world.launcher.script(running_id, ObservedState.SUCCEEDED, exit_code=0)

    reconcile_once(world.cp)  # the job succeeds; its standby is stopped
    reconcile_once(world.cp)

    assert job(world.factory, job_id).status == S.SUCCEEDED.value
    assert handle_of(standby_id) in world.launcher.cancels
    assert world.attempt(standby_id).ended_at is None  # billed until it has gone
    world.launcher.script(standby_id, ObservedState.CANCELLED)
    reconcile_once(world.cp)
    standby = world.attempt(standby_id)
    assert standby.end_reason == "standby_stopped" and standby.cost_microusd is not None


def slow_down(world: World, job_id: str, running_id: str) -> None:
    """The running trainer measures a slower rate, and keeps it: 50 steps of 8 samples at
    0.1128 samples/s are 0.985 h of work in the hour left, on-demand still meets the deadline,
    but a restart back onto it after a handover (0.01 h here, and one more step) would not."""
    world.report(job_id, running_id, step=50, checkpoint=50, samples_per_s=0.1128, lasts=True)


def unwanted_standby(world: World) -> tuple[str, str, str]:
    """A job on on-demand with a standby running beside it, which the slower rate makes the
    rule no longer want: (job, running attempt, standby attempt)."""
    job_id, running_id = world.running_on_demand()
    standby_id = world.hold_standby(job_id)
    world.launcher.script(standby_id, ObservedState.RUNNING)
    reconcile_once(world.cp)
    slow_down(world, job_id, running_id)
    return job_id, running_id, standby_id


def test_a_standby_the_rule_no_longer_wants_is_withdrawn_and_never_takes_over(
    world: World,
) -> None:
    job_id, running_id, standby_id = unwanted_standby(world)

    result = schedule_once(world.cp)
    assert result.withdrawn == 1 and result.standbys == 0 and result.migrated == 0, result
    assert world.attempt(standby_id).stop_reason == "withdrawn"
    note = world.notes(job_id)[-1]
    assert note.startswith("standby attempt 2 withdrawn: the fallback to on-demand"), note
    assert schedule_once(world.cp).withdrawn == 0  # once
    # Its trainer, ready now, is told to stop; the running attempt is never released.
    assert world.ask(job_id, standby_id).action == "stop"
    reconcile_once(world.cp)
    assert world.launcher.cancels == [handle_of(standby_id)]
    world.clock.advance(60)
    world.launcher.script(standby_id, ObservedState.CANCELLED)
    reconcile_once(world.cp)
    standby, running = world.attempt(standby_id), world.attempt(running_id)
    assert standby.end_reason == "withdrawn" and standby.cost_microusd  # its own minutes
    assert running.stop_reason is None and running.ended_at is None
    assert job(world.factory, job_id).status == S.RUNNING.value
    assert world.statuses(job_id) == ["PENDING", "SCHEDULED", "RUNNING"]


def test_a_standby_being_stopped_that_the_pool_takes_teaches_the_preemption(
    world: World,
) -> None:
    """Withdrawn, then preempted before the stop took effect: the pool's news is kept (a
    preemption learned), not hidden behind the stop."""
    job_id, running_id, standby_id = unwanted_standby(world)
    assert schedule_once(world.cp).withdrawn == 1
    world.clock.advance(60)
    world.launcher.script(standby_id, ObservedState.PREEMPTED)
    reconcile_once(world.cp)
    assert world.attempt(standby_id).end_reason == "preempted"
    assert world.attempt(running_id).ended_at is None


def test_a_withdrawn_standby_is_not_held_again_there_before_the_backoff(world: World) -> None:
    """A rate estimate hovering at the rule's edge must not start a standby and withdraw it
    pass after pass: after a withdrawal that offer waits out `no_capacity_backoff_s`."""
    job_id, running_id, standby_id = unwanted_standby(world)
    assert schedule_once(world.cp).withdrawn == 1
    world.launcher.script(standby_id, ObservedState.CANCELLED)
    reconcile_once(world.cp)
    # The rate recovers (and lasts): the rule would hold a standby again, but not there yet.
    world.report(job_id, running_id, step=50, checkpoint=50, samples_per_s=0.89, lasts=True)
    offer = world.attempt(standby_id).placement.offer_key
    assert schedule_once(world.cp).standbys == 0
    world.clock.advance(world.cp.settings.no_capacity_backoff_s + 1)
    assert schedule_once(world.cp).standbys == 1
    (held,) = [a for a in attempts(world.factory, job_id) if a.standby and a.ended_at is None]
    assert held.placement.offer_key == offer  # the same offer, once the backoff has passed


def test_a_standby_is_not_withdrawn_once_the_running_attempt_is_released(world: World) -> None:
    """The handover has begun (the running attempt checkpoints to stop): the standby is the
    attempt that trains next, whatever the rule now says."""
    job_id, running_id = world.running_on_demand()
    standby_id = world.hold_standby(job_id)
    world.launcher.script(standby_id, ObservedState.RUNNING)
    world.ask(job_id, standby_id)
    reconcile_once(world.cp)
    assert world.attempt(running_id).stop_reason == "handover"
    slow_down(world, job_id, running_id)

    assert schedule_once(world.cp).withdrawn == 0
    assert world.attempt(standby_id).stop_reason is None
    # A decision taken before the release and applied after it is refused too.
    late = Withdraw(job_id, standby_id, "the rule changed its mind")
    with transaction(world.factory) as session:
        assert _apply_withdraw(session, decision=late) == 0
    assert world.attempt(standby_id).stop_reason is None


def test_a_withdrawal_judged_on_one_standby_never_stops_another(world: World) -> None:
    job_id, running_id = world.running_on_demand()
    standby_id = world.hold_standby(job_id)
    for stale in (running_id, "no-such-attempt"):
        with transaction(world.factory) as session:
            assert _apply_withdraw(session, decision=Withdraw(job_id, stale, "late")) == 0
    assert world.attempt(standby_id).stop_reason is None
    assert world.attempt(running_id).stop_reason is None


def test_a_standby_withdrawn_before_its_launch_is_never_launched(world: World) -> None:
    """A worker killed between the standby's insert and its launch, then the rule changes its
    mind: the reconciler closes it instead of launching it."""
    job_id, running_id = world.running_on_demand()
    world.launcher.fail_launches = 1
    standby_id = world.hold_standby(job_id)
    slow_down(world, job_id, running_id)
    assert schedule_once(world.cp).withdrawn == 1

    reconcile_once(world.cp)

    assert len([r for r in world.launcher.launches if r.attempt_id == standby_id]) == 1
    standby = world.attempt(standby_id)
    assert standby.end_reason == "withdrawn" and standby.cost_microusd == 0
    assert world.attempt(running_id).ended_at is None


def test_a_cancel_stops_both_attempts(world: World) -> None:
    job_id, running_id = world.running_on_demand()
    standby_id = world.hold_standby(job_id)
    world.launcher.script(standby_id, ObservedState.RUNNING)
    with transaction(world.factory) as session:
        jobs.cancel(session, principal=world.who, job_id=job_id)
    world.launcher.script(running_id, ObservedState.CANCELLED)
    world.launcher.script(standby_id, ObservedState.CANCELLED)

    reconcile_once(world.cp)

    assert set(world.launcher.cancels) >= {handle_of(running_id), handle_of(standby_id)}
    assert all(a.end_reason == "cancelled" for a in attempts(world.factory, job_id))


def test_without_the_capability_or_the_setting_no_standby_is_held(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    for launcher, allowed in ((RecordingLauncher(), True), (StandbyLauncher(), False)):
        clock = Clock()
        world = World(
            cp=control_plane(
                settings.model_copy(update={"standby": allowed}), session_factory, launcher, clock
            ),
            launcher=launcher,  # type: ignore[arg-type]
            clock=clock,
            factory=session_factory,
            who=principal(session_factory, team=f"team-{int(allowed)}-{launcher.name}"),
        )
        job_id, _ = world.running_on_demand()
        world.launcher.spot = True
        result = schedule_once(world.cp)
        assert result.standbys == 0, result
        assert not any(a.standby for a in attempts(world.factory, job_id))


def test_a_standby_whose_launch_crashed_is_launched_by_the_next_pass_once(world: World) -> None:
    """A worker killed between the standby's insert and its launch (the launch raises here):
    the reconciler launches it, and there is still one standby."""
    job_id, _ = world.running_on_demand()
    world.launcher.fail_launches = 1
    standby_id = world.hold_standby(job_id)
    assert world.attempt(standby_id).launch_handle is None

    reconcile_once(world.cp)
    assert schedule_once(world.cp).standbys == 0  # one at a time, even unlaunched

    assert world.attempt(standby_id).launch_handle == handle_of(standby_id)
    launched = [r for r in world.launcher.launches if r.attempt_id == standby_id]
    assert len(launched) == 2 and all(r.run_config.standby for r in launched)
    assert sum(a.standby for a in attempts(world.factory, job_id)) == 1


def test_a_standby_whose_trainer_never_waits_is_stopped_and_not_tried_there_again(
    world: World,
) -> None:
    """The wait for its trainer counts from when it was first seen running, not from its launch
    (a spot node and an image pull may take most of the timeout); one that never waits is
    stopped, and the job holds no standby on that offer again (such failures repeat)."""
    job_id, running_id = world.running_on_demand()
    standby_id = world.hold_standby(job_id)
    world.launcher.script(standby_id, ObservedState.PENDING)
    world.clock.advance(world.cp.settings.launch_timeout_s - 30)  # a slow node and image
    reconcile_once(world.cp)
    world.launcher.script(standby_id, ObservedState.RUNNING)
    reconcile_once(world.cp)
    world.clock.advance(60)
    reconcile_once(world.cp)
    assert world.launcher.cancels == []  # building, 60 s after it got its node
    world.clock.advance(world.cp.settings.launch_timeout_s)

    reconcile_once(world.cp)

    assert world.launcher.cancels == [handle_of(standby_id)]
    assert world.attempt(standby_id).stop_reason == "standby_stuck"
    assert "did not wait within" in world.notes(job_id)[-1]
    assert world.attempt(running_id).stop_reason is None  # the job runs on
    # Asked again until it has gone; gone, it is on the ledger from its launch.
    reconcile_once(world.cp)
    assert world.launcher.cancels == [handle_of(standby_id)] * 2
    world.launcher.script(standby_id, ObservedState.CANCELLED)
    reconcile_once(world.cp)
    standby = world.attempt(standby_id)
    assert standby.end_reason == "standby_stuck" and standby.cost_microusd
    offer = standby.placement.offer_key
    schedule_once(world.cp)
    assert all(a.placement.offer_key != offer for a in attempts(world.factory, job_id)[2:])


def test_a_stopped_standby_never_releases_a_later_attempt(world: World) -> None:
    """The attempt it stood beside fails; the job is placed again. The standby, being stopped,
    must not hand the new attempt over: it is asked to stop on every pass until it has gone."""
    job_id, running_id = world.running_on_demand()
    standby_id = world.hold_standby(job_id)
    world.launcher.script(standby_id, ObservedState.RUNNING)
    world.ask(job_id, standby_id)
    world.launcher.script(running_id, ObservedState.FAILED, exit_code=1)
    reconcile_once(world.cp)  # the job goes back to PENDING; the standby is stopped
    reconcile_once(world.cp)
    assert world.attempt(standby_id).stop_reason == "standby_stop"
    (placed,) = schedule_once(world.cp).placed
    world.launcher.script(placed, ObservedState.RUNNING)

    reconcile_once(world.cp)
    reconcile_once(world.cp)

    assert world.attempt(placed).stop_reason is None  # not released to a standby
    assert world.launcher.cancels.count(handle_of(standby_id)) >= 3
    assert world.ask(job_id, standby_id).action == "stop"


def test_a_standby_whose_launch_failed_is_not_launched_for_a_job_that_ended(
    world: World,
) -> None:
    job_id, running_id = world.running_on_demand()
    world.launcher.fail_launches = 1
    standby_id = world.hold_standby(job_id)
    world.launcher.script(running_id, ObservedState.SUCCEEDED, exit_code=0)

    reconcile_once(world.cp)

    assert job(world.factory, job_id).status == S.SUCCEEDED.value
    launched = [r for r in world.launcher.launches if r.attempt_id == standby_id]
    assert len(launched) == 1  # the one that failed: no second launch, no new token
    standby = world.attempt(standby_id)
    assert standby.end_reason == "standby_stopped" and standby.cost_microusd == 0
