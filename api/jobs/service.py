"""Job use cases: keyword arguments in, rows out; the caller's unit of work commits."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api import progress as stored_progress
from api import workloads
from api.auth import Principal
from api.errors import Conflict, DomainError, InvalidRequest, NotFound
from api.estimates import local_machine
from api.jobs import lifecycle, measured_rate, repository, standby
from api.jobs.standby import StandbyState, Transition
from api.models import Job, JobAttempt, JobEvent, utcnow
from api.money import cost_microusd
from api.placement.trainer_keys import trainer_keys
from api.settings import Settings
from gpujobs import progress as progress_bounds
from gpujobs.checkpoints import job_checkpoint_uri
from gpujobs.resources import FieldError, JobStatus, ProgressReport
from gpujobs.runtime import StandbyAnswer, StandbyCall
from gpujobs.spec import NAME_PATTERN, JobSpec


@dataclass(frozen=True)
class Admitted:
    """What admission recorded about an accepted job: its quote and whether it holds budget."""

    quote_cost_microusd: int | None = None
    quote_typical_microusd: int | None = None
    quote_hold_microusd: int | None = None
    quote_finish_at: datetime | None = None
    quote_p_meet: float | None = None
    holds_budget: bool = False


# Admission control (budgets, feasibility) is a pluggable check so that `api` stays free of
# placement details here; pricing installs it. It raises a DomainError to refuse a job, and may
# return the job's quote to record.
AdmissionCheck = Callable[..., Admitted | None]


@dataclass(frozen=True)
class Submitted:
    job: Job
    created: bool


def _request_hash(spec: JobSpec) -> str:
    return hashlib.sha256(spec.model_dump_json().encode()).hexdigest()


def submit(
    session: Session,
    *,
    principal: Principal,
    spec: JobSpec,
    idempotency_key: str | None,
    admission: AdmissionCheck | None = None,
    workload_prefixes: Sequence[str] = (),
    settings: Settings | None = None,
) -> Submitted:
    """`workload_prefixes`: the module prefixes this team may run besides the built-ins;
    `settings`: the deployment's, whose launcher must be able to run the spec."""
    principal.require_team()
    request_hash = _request_hash(spec)
    if idempotency_key is not None:
        existing = repository.find_by_idempotency_key(
            session, team_id=principal.team_id, key=idempotency_key
        )
        if existing is not None:
            return _replay(existing, request_hash)
    workloads.check(spec.trainer, allowed_prefixes=workload_prefixes)
    if settings is not None:
        local_machine.check(spec, settings=settings)
    now = utcnow()
    admitted = None
    if admission is not None:
        try:
            admitted = admission(session=session, team_id=principal.team_id, spec=spec, now=now)
        except DomainError:
            # A name in use is the answer that helps: fixing the spec would not let it in.
            if repository.active_with_name(session, name=spec.name, team_id=principal.team_id):
                raise _name_in_use(spec.name) from None
            raise
    admitted = admitted or Admitted()
    job = Job(
        team_id=principal.team_id,
        name=spec.name,
        status=JobStatus.PENDING.value,
        spec=spec.model_dump(mode="json"),
        priority=spec.priority,
        deadline_at=spec.deadline_at(now),
        created_at=now,
        updated_at=now,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        quote_cost_microusd=admitted.quote_cost_microusd,
        quote_typical_microusd=admitted.quote_typical_microusd,
        quote_hold_microusd=admitted.quote_hold_microusd,
        quote_finish_at=admitted.quote_finish_at,
        quote_p_meet=admitted.quote_p_meet,
        holds_budget=admitted.holds_budget,
        **asdict(trainer_keys(spec)),
    )
    # Concurrent submits race on the unique indexes, not on a lock: one key (a retry) or one
    # unfinished name per team, and the losers find out which. The index is also the only name
    # check (a query before it would be one more round trip on every submit to catch the rare
    # clash early). Nothing was written before this insert, so a loser rolls back whole.
    try:
        session.add(job)
        session.flush()
    except IntegrityError:
        session.rollback()
        if idempotency_key is not None:
            existing = repository.find_by_idempotency_key(
                session, team_id=principal.team_id, key=idempotency_key
            )
            if existing is not None:
                return _replay(existing, request_hash)
        if repository.active_with_name(session, name=spec.name, team_id=principal.team_id):
            raise _name_in_use(spec.name) from None
        raise
    lifecycle.record_created(session, job)
    return Submitted(job=job, created=True)


def _name_in_use(name: str) -> Conflict:
    return Conflict(
        f"the team already has an unfinished job named {name!r}: wait for it, cancel it, or "
        "choose another name",
        fields=[FieldError(field="name", reason="in use by an unfinished job of this team")],
    )


def _replay(existing: Job, request_hash: str) -> Submitted:
    if existing.request_hash != request_hash:
        raise Conflict(
            "this Idempotency-Key was already used for a different job spec",
            fields=[FieldError(field="Idempotency-Key", reason="reused with a different body")],
        )
    return Submitted(job=existing, created=False)


def _is_id(value: str) -> bool:
    """Ids are UUIDs; anything else (a NUL byte, which PostgreSQL refuses) is simply not found."""
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


ID_PREFIX = re.compile(r"^[0-9a-f]{4,8}(-[0-9a-f]{0,4}){0,4}$")
NAME = re.compile(NAME_PATTERN)
AMBIGUITY_SHOWN = 5


def get(session: Session, *, principal: Principal, job_id: str) -> Job:
    """A job by reference: its id, a unique prefix of its id (4+ characters, as `ls` shows), or
    its name (the newest job of that name; names are unique among a team's unfinished jobs)."""
    team_id = None if principal.is_admin else principal.team_id
    if _is_id(job_id):
        job = repository.get(session, job_id=job_id, team_id=team_id)
    else:
        job = _resolve(session, team_id=team_id, reference=job_id)
    if job is None or (principal.job_id is not None and principal.job_id != job.id):
        raise NotFound(f"job {job_id!r} not found")
    return job


def checkpoint_uri(job: Job, *, settings: Settings) -> str:
    """Where the job's checkpoints are: the prefix its first launch recorded, so a later change
    of the deployment's root strands none of them; a job not launched yet, or first launched
    before prefixes were recorded (migration 0010), under the current root."""
    return job.checkpoint_uri or job_checkpoint_uri(settings.checkpoint_root(), job.id)


def _resolve(session: Session, *, team_id: str | None, reference: str) -> Job | None:
    if len(reference) > 63:
        return None
    if ID_PREFIX.match(reference):
        matches = repository.by_id_prefix(
            session, prefix=reference, team_id=team_id, limit=AMBIGUITY_SHOWN + 1
        )
        if len(matches) > 1:
            shown = ", ".join(job.id for job in matches[:AMBIGUITY_SHOWN])
            raise Conflict(
                f"{reference!r} is the start of several job ids ({shown}"
                f"{', ...' if len(matches) > AMBIGUITY_SHOWN else ''}); give more characters"
            )
        if matches:
            return matches[0]
    if NAME.match(reference):
        return repository.newest_by_name(session, name=reference, team_id=team_id)
    return None


def decode_cursor(cursor: str | None) -> str | None:
    if cursor is None:
        return None
    try:
        value = base64.urlsafe_b64decode(cursor.encode() + b"==").decode()
    except (binascii.Error, UnicodeError, ValueError):
        value = ""
    if not _is_id(value):
        raise InvalidRequest(
            "invalid cursor", fields=[FieldError(field="cursor", reason="not a cursor we issued")]
        )
    return value


def encode_cursor(job_id: str) -> str:
    return base64.urlsafe_b64encode(job_id.encode()).decode().rstrip("=")


def list_jobs(
    session: Session,
    *,
    principal: Principal,
    statuses: list[JobStatus],
    cursor: str | None,
    limit: int,
) -> tuple[list[Job], str | None]:
    principal.require_team_token()
    rows = repository.list_page(
        session,
        team_id=None if principal.is_admin else principal.team_id,
        statuses=[s.value for s in statuses],
        before_id=decode_cursor(cursor),
        limit=limit + 1,
    )
    next_cursor = encode_cursor(rows[limit - 1].id) if len(rows) > limit else None
    return rows[:limit], next_cursor


@dataclass(frozen=True)
class Spend:
    """What a job view adds to the row: where it runs or ran last, and its cost so far."""

    latest: JobAttempt | None = None
    cost_microusd: int = 0


def spend(ledger: repository.Ledger | None, *, now: datetime) -> Spend:
    """Ended attempts at their recorded cost; the open ones (the latest, and a standby beside
    it), while they hold capacity, at their price up to `now`."""
    if ledger is None:
        return Spend()
    total = ledger.recorded_microusd
    for attempt in (ledger.latest, ledger.standby):
        if attempt is not None and attempt.ended_at is None and attempt.started_at is not None:
            total += cost_microusd(
                price_per_hour=attempt.price_per_hour,
                started_at=attempt.started_at,
                ended_at=max(now, attempt.started_at),
            )
    return Spend(latest=ledger.latest, cost_microusd=total)


def spends(session: Session, *, jobs: Sequence[Job]) -> dict[str, Spend]:
    """Every job's spend, by job id, in one query for the lot."""
    now = utcnow()
    # A job never placed has no attempt to read (attempts_count grows with the attempt's insert).
    placed = [job.id for job in jobs if job.attempts_count]
    ledgers = repository.ledgers(session, job_ids=placed) if placed else {}
    return {job.id: spend(ledgers.get(job.id), now=now) for job in jobs}


def cancel(session: Session, *, principal: Principal, job_id: str) -> Job:
    """Cancel now in the database; the reconciler stops any running attempt through its launcher."""
    principal.require_team_token()
    job_id = get(session, principal=principal, job_id=job_id).id  # another team's job: 404
    # Lock the row: the reconciler may be finishing the job at this very moment.
    job = repository.get_for_update(session, job_id=job_id)
    assert job is not None
    status = JobStatus(job.status)
    if status == JobStatus.CANCELLED:
        return job
    if status.terminal:
        raise Conflict(f"job {job_id} already ended as {status}; nothing to cancel")
    job.cancel_requested = True
    lifecycle.switch_status(session, job, JobStatus.CANCELLED, reason="cancelled by user")
    return job


def events(session: Session, *, principal: Principal, job_id: str) -> list[JobEvent]:
    job = get(session, principal=principal, job_id=job_id)
    return repository.events(session, job_id=job.id)


def attempts(session: Session, *, principal: Principal, job_id: str) -> list[JobAttempt]:
    job = get(session, principal=principal, job_id=job_id)
    return repository.attempts(session, job_id=job.id)


def report_progress(
    session: Session,
    *,
    principal: Principal,
    job_id: str,
    report: ProgressReport,
    now: datetime,
) -> Job:
    """A trainer reports progress with its job-scoped token."""
    if principal.job_id != job_id and not principal.is_admin:
        raise NotFound(f"job {job_id} not found")
    job = get(session, principal=principal, job_id=job_id)
    if JobStatus(job.status).terminal:
        # Its token may be remembered a few seconds past the end (api.auth.PrincipalCache).
        raise Conflict(f"job {job_id} has ended ({job.status}): progress is no longer recorded")
    latest = repository.latest_attempt(session, job_id=job_id)
    current = latest if latest is not None and latest.ended_at is None else None
    if report.attempt_id is not None and (current is None or current.id != report.attempt_id):
        raise Conflict("progress from an attempt that is no longer current")
    _check_bounds(job, report)
    before = stored_progress.read_or_none(job.progress)
    job.progress = stored_progress.Progress(
        # Whose report it is: the reconciler waits for an attempt's first (worker.first_report).
        report=report.model_copy(update={"attempt_id": current.id if current else None}),
        updated_at=now,
        # The rate was measured on the attempt's GPU: the scheduler converts it to the others
        # the job may run on (api.pricing.gpu_speed). Ours, not the trainer's word.
        gpu_model=latest.gpu_model if latest is not None else None,
        rate=_attempt_rate(current, before.rate if before else None, report, now)
        if current is not None
        else None,
    ).stored()
    if report.checkpoint_stall_s:  # 0: no checkpoint yet in this attempt
        job.checkpoint_stall_s = report.checkpoint_stall_s
    if report.checkpoint_step is not None:
        job.resume_from_step = max(job.resume_from_step or 0, report.checkpoint_step)
    return job


def _check_bounds(job: Job, report: ProgressReport) -> None:
    """A 422 naming each figure out of what the machine and the job can be (gpujobs.progress):
    the scheduler weighs them for the job and prices the team's later jobs by them."""
    found = progress_bounds.problems(
        JobSpec.from_stored(job.spec),
        step=report.step,
        total_steps=report.total_steps,
        checkpoint_step=report.checkpoint_step,
        samples_per_s=report.samples_per_s,
        checkpoint_stall_s=report.checkpoint_stall_s,
    )
    if found:
        fields = [FieldError(field=name, reason=reason) for name, reason in found]
        raise InvalidRequest("; ".join(f"{f.field}: {f.reason}" for f in fields), fields=fields)


def _attempt_rate(
    current: JobAttempt,
    before: stored_progress.AttemptRate | None,
    report: ProgressReport,
    now: datetime,
) -> stored_progress.AttemptRate | None:
    """The open attempt's rate after this report, as the progress keeps it: its windows'
    mean over time (api.jobs.measured_rate), the one the scheduler counts the work left from.
    Only a report that names the attempt measures it (the shipped trainer always names it): one
    from an earlier attempt would be credited to another GPU. Any report keeps the attempt's
    rate once it has one; until then one that names no attempt is shown as it came. A window
    counts once: a report of the window counted last, by its `measured_at` (a checkpoint's
    report of it, a post retried after its answer was lost), leaves the rate as it is."""
    known = None
    if current.samples_per_s:
        known = measured_rate.Rate(current.samples_per_s, before.seconds if before else 0.0)
    at = before.at if before else None
    measured_at = before.measured_at if before else None
    if (
        report.attempt_id == current.id
        and report.samples_per_s
        and not _counted(known, measured_at, report)
    ):
        window = _seconds_since(at, now) if known is not None else 0.0
        known = measured_rate.after(known, report.samples_per_s, seconds=window)
        current.samples_per_s = known.samples_per_s
        at = now
        if report.measured_at is not None:
            measured_at = report.measured_at
    if known is None:
        return None
    return stored_progress.AttemptRate(
        samples_per_s=known.samples_per_s, seconds=known.seconds, at=at, measured_at=measured_at
    )


def _counted(
    known: measured_rate.Rate | None, last: datetime | None, report: ProgressReport
) -> bool:
    """Whether the report's window is the one the attempt's rate took last (`last`, its
    trainer's time). Only while the attempt has a rate: the progress's last window before that
    was another attempt's. The same time, not an earlier one: the reporter posts its windows in
    order, and a trainer relaunched within the attempt may read a clock behind the one before
    it."""
    if known is None or report.measured_at is None:
        return False
    return report.measured_at == last


def _seconds_since(then: datetime | None, now: datetime) -> float:
    """Seconds from a time the server wrote to now; 0 where there is none."""
    if then is None:
        return 0.0
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return max(0.0, (now - then).total_seconds())


def standby_answer(
    session: Session, *, principal: Principal, job_id: str, call: StandbyCall, now: datetime
) -> tuple[StandbyAnswer, bool]:
    """What a standby's trainer does next, and whether it has just become ready (its first
    call: the handover can begin). Only the job's own token, and only about its attempts."""
    if principal.job_id != job_id and not principal.is_admin:
        raise NotFound(f"job {job_id} not found")
    job = get(session, principal=principal, job_id=job_id)
    attempt = session.get(JobAttempt, call.attempt_id)
    if attempt is None or attempt.job_id != job.id:
        raise NotFound(f"attempt {call.attempt_id} of job {job_id} not found")
    if JobStatus(job.status).terminal or attempt.ended_at is not None:
        return StandbyAnswer(action="stop"), False
    held = standby.state(attempt)
    if held is StandbyState.STOPPING:
        return StandbyAnswer(action="stop"), False  # being stopped: not wanted any more
    if held in (None, StandbyState.HANDED_OVER):
        # Promoted: the attempt it stood beside has checkpointed and ended.
        return StandbyAnswer(action="go", resume_from_step=job.resume_from_step), False
    ready = standby.may(Transition.READY, attempt)
    if ready:
        standby.ready(attempt, now=now)
    return StandbyAnswer(action="wait", resume_from_step=job.resume_from_step), ready
