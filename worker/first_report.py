"""An attempt whose trainer never reports: noticed, said, and ended.

A trainer reports progress every few seconds from its first steps (trainer.progress). One that
has not reported its first a while after the launcher first saw it running is stuck before
training: an import that waits forever, a deadlock, a DataLoader whose workers cannot hand
anything over. Nothing else notices (it is RUNNING, and billed), so the reconciler does:

1. after `Settings.first_report_warn_s` its job's status reason and events say so, with the last
   lines of its log (what it was doing), once per attempt;
2. after `Settings.first_report_fail_s` the attempt is stopped (stop_reason `no_first_report`)
   and, once the launcher reports it gone, the job FAILS, not retried: a trainer that hung at
   its start hangs again. The attempt is billed until it stopped, as any other.

The clock starts when the launcher first saw the attempt running (`running_at`: a pod waiting
for a node or an image does not count; a standby's, when it was promoted and began to train),
and a standby that waits for its go is never asked. Whose report it is the API records with the
progress (`api.progress.Progress`, its report's `attempt_id`).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from sqlalchemy.orm import Session

from api import progress as stored_progress
from api.database import read_session, transaction
from api.jobs import lifecycle
from api.models import AttemptRole, Job, JobAttempt
from api.settings import Settings
from gpujobs.reasons import EndReason, StopReason
from gpujobs.resources import JobStatus
from worker import repository as repo
from worker.control import ControlPlane
from worker.handover import STILL_THERE
from worker.launchers.base import Launcher, Observation, ObservedState, offset_logs
from worker.launching import stop_attempt
from worker.outcomes import Outcome

log = logging.getLogger(__name__)

# In its events' data, beside the attempt's number: what was done (the key is the reason's own).
NOTE = StopReason.NO_FIRST_REPORT.value
STOPPED = "stopped, not retried:"  # how the reason of a stopped one begins
LOG_LINES = 5
LOG_LINE_CHARS = 300
LOG_TAIL_BYTES = 16 * 1024
LOG_STREAM_MAX_BYTES = 8 * 1024 * 1024  # a launcher whose log reads from the start: this much


class Silence(StrEnum):
    WARN = "warn"  # say so in the job's status and events
    STOP = "stop"  # stop it: its job fails once it has gone
    HEARD = "heard"  # it reported after a warning: the job's status no longer says it has not


@dataclass(frozen=True)
class Facts:
    """What a pass knows of an open attempt's trainer."""

    running_since: datetime | None  # None: not training for its job (not yet, or a standby)
    reported: bool  # its trainer has reported progress
    warned: bool  # its job's events say it has not (looked up only while it has not)
    stopping: bool  # it is being stopped, for this or another reason
    status_warns: bool = False  # its job's status reason is still the warning


def decide(facts: Facts, *, now: datetime, settings: Settings) -> Silence | None:
    if facts.reported:
        return Silence.HEARD if facts.status_warns else None
    if facts.stopping or facts.running_since is None:
        return None
    silent_s = (now - facts.running_since).total_seconds()
    if silent_s >= settings.first_report_fail_s:
        return Silence.STOP
    if silent_s >= settings.first_report_warn_s and not facts.warned:
        return Silence.WARN
    return None


def check(cp: ControlPlane, *, attempt_id: str) -> int:
    """Warn about the attempt, or stop it, if its trainer has been silent too long; returns how
    many attempts changed. The log is read outside any transaction; the change is made only if
    the decision still holds under the rows' locks."""
    with read_session(cp.factory) as session:
        attempt = session.get(JobAttempt, attempt_id)
        job = session.get(Job, attempt.job_id) if attempt is not None else None
        if attempt is None or job is None or attempt.ended_at is not None:
            return 0
        handle = attempt.launch_handle
        silence = decide(facts(session, attempt=attempt, job=job), now=cp.clock(),
                         settings=cp.settings)  # fmt: skip
    if silence is None or handle is None:
        return 0
    tail = [] if silence == Silence.HEARD else last_lines(cp.launcher, handle)
    with transaction(cp.factory) as session:
        attempt = repo.attempt_for_update(session, attempt_id=attempt_id)
        job = repo.job_for_update(session, job_id=attempt.job_id) if attempt is not None else None
        if attempt is None or job is None or attempt.ended_at is not None:
            return 0
        now = cp.clock()
        known = facts(session, attempt=attempt, job=job)
        if decide(known, now=now, settings=cp.settings) != silence:
            return 0
        since = known.running_since or now
        reason = _reason(silence, number=attempt.number, silent_s=(now - since).total_seconds(),
                         fail_after_s=cp.settings.first_report_fail_s, tail=tail)  # fmt: skip
        if silence == Silence.STOP:
            attempt.stop_reason = StopReason.NO_FIRST_REPORT
        # Shown at once: the job stays RUNNING until the launcher reports the trainer gone.
        job.status_reason = lifecycle.capped_reason(reason)
        lifecycle.note(
            session, job, reason=reason, data={"attempt": attempt.number, NOTE: silence.value}
        )
        job_id = job.id
    log.warning("job %s: %s", job_id, reason)
    if silence == Silence.STOP:
        stop_attempt(cp, handle=handle)
    return 1


def facts(session: Session, *, attempt: JobAttempt, job: Job) -> Facts:
    training = job.status == JobStatus.RUNNING.value and attempt.role is AttemptRole.PRIMARY
    progress = stored_progress.read_or_none(job.progress)
    reported = progress is not None and progress.report.attempt_id == attempt.id
    # The events are read only for an attempt not heard from yet: a few seconds of most.
    warned = not reported and any(
        NOTE in data and data.get("attempt") == attempt.number
        for data in repo.notes(session, job_id=job.id)
    )
    return Facts(
        running_since=attempt.running_at if training else None,
        reported=reported,
        warned=warned,
        stopping=attempt.stop_reason is not None,
        status_warns=(job.status_reason or "").startswith(_silent(attempt.number)),
    )


def outcome(
    *, observation: Observation, job_status: JobStatus, stop_reason: str | None, reason: str | None
) -> Outcome | None:
    """An attempt stopped for want of a first report has gone: its job fails, not retried.
    None: not such an attempt, or not over (one that finished meanwhile succeeded)."""
    over = observation.state not in {*STILL_THERE, ObservedState.SUCCEEDED}
    if stop_reason != StopReason.NO_FIRST_REPORT or not over:
        return None
    via_running = (JobStatus.RUNNING,) if job_status == JobStatus.SCHEDULED else ()
    if not (reason and reason.startswith(STOPPED)):
        reason = f"{STOPPED} its trainer never reported progress"  # the words were overwritten
    path = (*via_running, JobStatus.FAILED)
    return Outcome(EndReason.NO_FIRST_REPORT, path, reason, failure=True, started=True)


def _reason(
    silence: Silence, *, number: int, silent_s: float, fail_after_s: float, tail: list[str]
) -> str:
    if silence == Silence.HEARD:
        after = _duration(silent_s)
        return f"attempt {number}'s trainer reported progress at last, {after} after it started"
    what = f"{_silent(number)} {_duration(silent_s)} after it started"
    lines = f"; last log lines: {' | '.join(tail)}" if tail else "; its log is empty"
    if silence == Silence.STOP:
        return f"{STOPPED} {what}{lines}"
    return f"{what}; it is stopped at {_duration(fail_after_s)} without one{lines}"


def _silent(number: int) -> str:
    return f"attempt {number}'s trainer has not reported progress"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def last_lines(launcher: Launcher, handle: str, *, count: int = LOG_LINES) -> list[str]:
    """The log's last non-blank lines, each cut to LOG_LINE_CHARS; none where the launcher
    cannot read it now (it is a help to the reader, never a reason to skip the change)."""
    try:
        reader = offset_logs(launcher)
        if reader is not None:
            chunks = reader.read_log(handle, offset=-LOG_TAIL_BYTES)
            text = b"".join(chunk.data for chunk in chunks).decode("utf-8", errors="replace")
        else:
            text = _stream_head(launcher, handle)
    except Exception:
        log.exception("reading the log of %s failed", handle)
        return []
    kept: deque[str] = deque(maxlen=count)
    for line in text.splitlines():
        if line.strip():
            kept.append(line.strip()[:LOG_LINE_CHARS])
    return list(kept)


def _stream_head(launcher: Launcher, handle: str) -> str:
    """A log read from its start (a pod's): at most LOG_STREAM_MAX_BYTES of it."""
    parts: list[str] = []
    read = 0
    for part in launcher.logs(handle):
        parts.append(part)
        read += len(part)
        if read >= LOG_STREAM_MAX_BYTES:
            break
    return "".join(parts)
