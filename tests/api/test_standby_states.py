"""A standby's states, read from its attempt's columns, and the transitions between them
(api.jobs.standby): each allowed one writes what the handover reads, each other one is refused
and writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import select
from sqlalchemy.dialects import postgresql

from api.jobs import standby
from api.jobs.standby import IllegalTransition, StandbyState, Transition
from api.models import AttemptRole, JobAttempt
from gpujobs.reasons import EndReason, StopReason

NOW = datetime(2026, 1, 5, 12, tzinfo=UTC)
LAUNCHED = datetime(2026, 1, 5, 11, tzinfo=UTC)


def held() -> JobAttempt:
    return JobAttempt(number=2, role=AttemptRole.STANDBY, launched_at=LAUNCHED)


def primary(stop: StopReason | None = None) -> JobAttempt:
    return JobAttempt(number=1, role=AttemptRole.PRIMARY, stop_reason=stop)


def in_state(name: StandbyState) -> tuple[JobAttempt, JobAttempt]:
    """A standby in state `name`, and the attempt it stands beside."""
    s, running = held(), primary()
    if name is StandbyState.HELD:
        return s, running
    s.ready_at = NOW
    if name is StandbyState.READY:
        return s, running
    running.stop_reason = StopReason.HANDOVER
    if name is StandbyState.RELEASED:
        return s, running
    if name is StandbyState.HANDED_OVER:
        s.role = AttemptRole.PRIMARY
        return s, running
    s.stop_reason = StopReason.STANDBY_STOP
    if name is StandbyState.STOPPING:
        return s, primary()
    s.ended_at = NOW
    return s, primary()


def take(transition: Transition, s: JobAttempt, running: JobAttempt) -> None:
    if transition is Transition.READY:
        standby.ready(s, now=NOW)
    elif transition is Transition.RELEASE:
        standby.release(s, running=running)
    elif transition is Transition.HAND_OVER:
        standby.hand_over(s, old=running, resume_from_step=40, now=NOW)
    elif transition is Transition.WITHDRAW:
        standby.withdraw(s, running=running)
    else:
        standby.stop(s, reason=StopReason.STANDBY_STOP, running=running)


@pytest.mark.parametrize("name", list(StandbyState))
def test_each_state_reads_back_from_the_columns(name: StandbyState) -> None:
    s, running = in_state(name)
    assert standby.state(s, running=running) is name


def test_an_attempt_never_held_as_a_standby_has_no_standby_state() -> None:
    assert standby.state(primary()) is None
    with pytest.raises(IllegalTransition):
        standby.ready(primary(), now=NOW)


CASES = [(t, name) for t in Transition for name in StandbyState]


@pytest.mark.parametrize(("transition", "name"), CASES)
def test_a_transition_is_taken_only_from_its_sources(
    transition: Transition, name: StandbyState
) -> None:
    s, running = in_state(name)
    before = (dict(vars(s)), dict(vars(running)))
    if name in transition.sources:
        take(transition, s, running)
        assert standby.state(s, running=running) is transition.target
    else:
        with pytest.raises(IllegalTransition):
            take(transition, s, running)
        assert (dict(vars(s)), dict(vars(running))) == before  # refused: nothing written


def test_the_walk_of_a_handover() -> None:
    s, running = held(), primary()
    standby.ready(s, now=NOW)
    assert s.ready_at == NOW
    standby.release(s, running=running)
    assert running.stop_reason == StopReason.HANDOVER
    standby.hand_over(s, old=running, resume_from_step=40, now=NOW)
    assert s.role is AttemptRole.PRIMARY and s.standby is False
    assert (s.resume_from_step, s.running_at, s.started_at) == (40, NOW, LAUNCHED)


def test_a_standby_is_withdrawn_only_before_the_release() -> None:
    s, running = in_state(StandbyState.READY)
    standby.withdraw(s, running=running)
    assert s.stop_reason == StopReason.WITHDRAWN
    s, running = in_state(StandbyState.RELEASED)
    with pytest.raises(IllegalTransition, match="withdraw from released"):
        standby.withdraw(s, running=running)
    standby.stop(s, reason=StopReason.STANDBY_STOP, running=running)  # its job's stop still is
    assert s.stop_reason == StopReason.STANDBY_STOP


def test_a_stop_names_why_a_standby_stops() -> None:
    s, running = in_state(StandbyState.HELD)
    with pytest.raises(ValueError):
        standby.stop(s, reason=StopReason.HANDOVER, running=running)
    assert s.stop_reason is None


def test_a_standby_ends_unlaunched_once_not_wanted() -> None:
    s, _ = in_state(StandbyState.HELD)
    assert standby.unlaunched_end(s, job_running=True) is None
    assert standby.unlaunched_end(s, job_running=False) == EndReason.STANDBY_STOPPED
    assert s.stop_reason == StopReason.STANDBY_STOP
    s, running = in_state(StandbyState.HELD)
    standby.withdraw(s, running=running)
    assert standby.unlaunched_end(s, job_running=True) == EndReason.WITHDRAWN
    assert standby.unlaunched_end(primary(), job_running=False) is None  # not a standby's end


@pytest.mark.parametrize(
    ("role", "flag"), [(AttemptRole.PRIMARY, "false"), (AttemptRole.STANDBY, "true")]
)
def test_a_query_on_the_role_tests_the_stored_flag(role: AttemptRole, flag: str) -> None:
    query = select(JobAttempt.id).where(JobAttempt.role == role)
    sql = str(query.compile(dialect=postgresql.dialect()))
    assert sql.endswith(f"WHERE job_attempts.standby IS {flag}")
    assert JobAttempt(role=role).role is role
