"""The pure mapping from what a launcher observed to what happens to the attempt and its job."""

from __future__ import annotations

import pytest

from api.jobs.lifecycle import can_switch
from gpujobs.resources import JobStatus
from gpujobs.runtime import EXIT_CONFIG_ERROR, EXIT_PREEMPTED, EXIT_PREEMPTED_NO_CHECKPOINT
from worker.launchers.base import Observation, ObservedState
from worker.outcomes import Outcome, outcome

S = JobStatus
Obs = ObservedState


def run(
    state: ObservedState,
    *,
    job: JobStatus = S.RUNNING,
    stop: str | None = None,
    restarts: int = 0,
    max_restarts: int = 3,
    code: int | None = None,
    message: str | None = None,
) -> Outcome:
    return outcome(
        observation=Observation(state, exit_code=code, message=message),
        job_status=job,
        stop_reason=stop,
        restarts=restarts,
        max_restarts=max_restarts,
    )


def legal(start: JobStatus, path: tuple[JobStatus, ...]) -> bool:
    current = start
    for status in path:
        if not can_switch(current, status):
            return False
        current = status
    return True


@pytest.mark.parametrize("job", [S.SCHEDULED, S.RUNNING])
def test_pending_keeps_the_attempt_open_and_does_not_bill(job: JobStatus) -> None:
    result = run(Obs.PENDING, job=job)
    assert result.end_reason is None
    assert result.path == ()
    assert not result.started


def test_running_moves_a_scheduled_job_to_running_and_starts_billing() -> None:
    result = run(Obs.RUNNING, job=S.SCHEDULED)
    assert result == Outcome(None, (S.RUNNING,), "running", started=True)
    assert run(Obs.RUNNING, job=S.RUNNING).path == ()
    assert run(Obs.RUNNING, job=S.RUNNING).started


@pytest.mark.parametrize("job", [S.SCHEDULED, S.RUNNING])
def test_succeeded(job: JobStatus) -> None:
    result = run(Obs.SUCCEEDED, job=job, code=0)
    assert result.end_reason == "succeeded"
    assert result.path[-1] == S.SUCCEEDED
    assert result.path == ((S.RUNNING, S.SUCCEEDED) if job == S.SCHEDULED else (S.SUCCEEDED,))
    assert legal(job, result.path)
    assert result.started and not result.failure and not result.preempted


@pytest.mark.parametrize("job", [S.SCHEDULED, S.RUNNING])
@pytest.mark.parametrize("restarts", [0, 3])  # preemptions never spend restarts
def test_preempted_goes_back_to_pending_and_counts_as_a_preemption(
    job: JobStatus, restarts: int
) -> None:
    result = run(Obs.PREEMPTED, job=job, code=75, restarts=restarts, message="reclaimed")
    assert result.end_reason == "preempted"
    assert result.path[-2:] == (S.PREEMPTED, S.PENDING)
    assert result.path[0] == S.RUNNING if job == S.SCHEDULED else result.path[0] == S.PREEMPTED
    assert legal(job, result.path)
    assert result.preempted
    assert not result.failure
    assert result.started
    assert result.reason == "reclaimed"


@pytest.mark.parametrize("state", [Obs.FAILED, Obs.LOST])
@pytest.mark.parametrize("job", [S.SCHEDULED, S.RUNNING])
def test_failure_with_restarts_left_goes_back_to_pending_and_spends_one(
    state: ObservedState, job: JobStatus
) -> None:
    result = run(state, job=job, code=1 if state == Obs.FAILED else None, restarts=1)
    assert result.end_reason == ("failed" if state == Obs.FAILED else "lost")
    assert result.path[-1] == S.PENDING
    assert S.FAILED not in result.path
    assert legal(job, result.path)
    assert result.failure and not result.preempted
    assert "restart 2 of 3" in result.reason


@pytest.mark.parametrize("job", [S.SCHEDULED, S.RUNNING])
def test_failure_without_restarts_left_fails_the_job(job: JobStatus) -> None:
    result = run(Obs.FAILED, job=job, code=1, restarts=3, max_restarts=3)
    assert result.end_reason == "failed"
    assert result.path[-1] == S.FAILED
    assert S.PENDING not in result.path
    assert legal(job, result.path)
    assert result.failure
    assert "exit code 1" in result.reason and "no restarts left" in result.reason


@pytest.mark.parametrize("job", [S.SCHEDULED, S.RUNNING])
@pytest.mark.parametrize("code", [2, EXIT_CONFIG_ERROR])
def test_a_configuration_error_fails_the_job_at_once_with_the_trainers_message(
    job: JobStatus, code: int
) -> None:
    message = "configuration error: workload 'nope.mod:build': cannot import nope.mod"
    result = run(Obs.FAILED, job=job, code=code, restarts=0, max_restarts=3, message=message)
    assert result.end_reason == "config_error"
    assert result.path[-1] == S.FAILED and S.PENDING not in result.path
    assert legal(job, result.path)
    assert message in result.reason
    assert result.started  # the minutes it ran are billed (and reported as wasted)


def test_a_failure_carries_the_trainers_last_lines() -> None:
    result = run(Obs.FAILED, code=1, message="RuntimeError: CUDA error: out of memory")
    assert S.PENDING in result.path
    assert "exit code 1: RuntimeError: CUDA error: out of memory" in result.reason


@pytest.mark.parametrize("code", [EXIT_PREEMPTED, EXIT_PREEMPTED_NO_CHECKPOINT])
def test_a_trainer_that_exits_as_preempted_without_a_notice_is_a_failure(code: int) -> None:
    """A preemption is what the launcher saw: 75 is a code a team's trainer may exit with."""
    result = run(Obs.FAILED, code=code, restarts=1, max_restarts=3)
    assert result.failure and not result.preempted
    assert result.end_reason == "failed" and result.path == (S.PENDING,)
    assert f"exit code {code}, with no preemption notice" in result.reason
    last = run(Obs.FAILED, code=code, restarts=3, max_restarts=3)
    assert last.failure and not last.preempted and last.path == (S.FAILED,)


@pytest.mark.parametrize("code", [EXIT_PREEMPTED, EXIT_PREEMPTED_NO_CHECKPOINT, -9, None])
def test_a_preemption_the_launcher_saw_is_one_whatever_the_exit_code(code: int | None) -> None:
    result = run(Obs.PREEMPTED, code=code, restarts=3, max_restarts=3)
    assert result.preempted and not result.failure
    assert result.path[-1] == S.PENDING  # resumes though no restarts are left


def test_no_restarts_allowed_fails_at_the_first_failure() -> None:
    assert run(Obs.FAILED, code=1, restarts=0, max_restarts=0).path == (S.FAILED,)


@pytest.mark.parametrize("job", [S.SCHEDULED, S.RUNNING])
@pytest.mark.parametrize("state", [Obs.CANCELLED, Obs.PREEMPTED, Obs.FAILED, Obs.LOST])
def test_a_migrate_stop_is_migrated_and_not_a_preemption(
    job: JobStatus, state: ObservedState
) -> None:
    result = run(state, job=job, stop="migrate", code=75, restarts=3, max_restarts=3)
    assert result.end_reason == "migrated"
    assert result.path[-2:] == (S.PREEMPTED, S.PENDING)
    assert legal(job, result.path)
    assert not result.preempted
    assert not result.failure  # a move we asked for never spends a restart


def test_a_migrated_attempt_that_had_already_finished_succeeds() -> None:
    result = run(Obs.SUCCEEDED, stop="migrate", code=0)
    assert result.end_reason == "succeeded"
    assert result.path == (S.SUCCEEDED,)


def test_a_running_attempt_we_asked_to_migrate_stays_open_until_it_stops() -> None:
    assert run(Obs.RUNNING, stop="migrate").end_reason is None


def test_cancel_we_asked_for_closes_the_attempt_as_cancelled() -> None:
    result = run(Obs.CANCELLED, job=S.CANCELLED, stop="cancel", code=75)
    assert result.end_reason == "cancelled"
    assert result.path == (S.CANCELLED,)
    assert not result.failure and not result.preempted


def test_a_stop_nobody_asked_for_is_a_failure() -> None:
    result = run(Obs.CANCELLED, stop=None, code=-9, restarts=0)
    assert result.failure
    assert result.path == (S.PENDING,)
    no_restarts = run(Obs.CANCELLED, stop=None, code=-9, restarts=3, max_restarts=3)
    assert no_restarts.path == (S.FAILED,)


@pytest.mark.parametrize("restarts", [0, 3])
def test_no_capacity_goes_back_to_pending_without_billing_or_spending(restarts: int) -> None:
    result = run(
        Obs.NO_CAPACITY, job=S.SCHEDULED, restarts=restarts, max_restarts=3, message="sold out"
    )
    assert result.end_reason == "no_capacity"
    assert result.path == (S.PENDING,)
    assert legal(S.SCHEDULED, result.path)
    assert result.no_capacity
    assert not result.started and not result.failure and not result.preempted
    assert result.reason == "sold out"


@pytest.mark.parametrize("state", list(ObservedState))
@pytest.mark.parametrize("stop", [None, "cancel", "migrate"])
@pytest.mark.parametrize("restarts", [0, 5])
def test_every_path_from_scheduled_or_running_is_legal(
    state: ObservedState, stop: str | None, restarts: int
) -> None:
    for job in (S.SCHEDULED, S.RUNNING):
        result = run(state, job=job, stop=stop, restarts=restarts, max_restarts=3, code=1)
        if stop == "cancel" and state == Obs.CANCELLED:
            continue  # the job was cancelled in the database before the attempt stopped
        assert legal(job, result.path), (job, state, stop, result.path)
        if result.end_reason is None:
            assert result.path in ((), (S.RUNNING,))
