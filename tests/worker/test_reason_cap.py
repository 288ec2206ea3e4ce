"""A launcher's message about an attempt (a trainer's termination message, a pod's) reaches the
job's status reason and its events capped, whichever launcher sent it: a 20 MB termination log
was stored whole and returned by every read of the job (issue 22)."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from api.jobs.lifecycle import REASON_MAX_CHARS
from api.settings import Settings
from gpujobs.resources import JobStatus
from tests.worker.support import (
    RecordingLauncher,
    control_plane,
    events,
    job,
    principal,
    submit,
)
from worker.launchers.base import ObservedState
from worker.reconciler import reconcile_once
from worker.scheduler import schedule_once


def test_a_huge_message_from_the_launcher_is_capped_where_the_status_changes(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    launcher = RecordingLauncher()
    cp = control_plane(settings, session_factory, launcher)
    job_id = submit(session_factory, principal(session_factory), max_restarts=2)
    [attempt_id] = schedule_once(cp).placed
    message = "Traceback: " + "x" * (2 * 1024 * 1024) + " the cause, written last"
    launcher.script(attempt_id, ObservedState.FAILED, exit_code=1, message=message)

    reconcile_once(cp)

    reason = job(session_factory, job_id).status_reason
    assert reason is not None and len(reason) <= REASON_MAX_CHARS
    assert reason.startswith("attempt failed (exit code 1: Traceback: xxx")
    assert reason.endswith("the cause, written last); restart 1 of 2")
    assert "characters cut" in reason
    reasons = [event.reason or "" for event in events(session_factory, job_id)]
    assert max(len(r) for r in reasons) <= REASON_MAX_CHARS
    assert reasons[-1] == reason
    assert job(session_factory, job_id).status == JobStatus.PENDING.value
