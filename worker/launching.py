"""Start an attempt through the launcher, and stop one. IO happens outside transactions.

A launch is safe to repeat: the launcher finds an attempt it already started, and the handle is
recorded only once. So a worker killed in the middle of a launch leaves an attempt without a
handle, which the reconciler launches again, never a second attempt.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from api.auth import issue_token
from api.database import transaction
from api.jobs import lifecycle, standby
from api.jobs import service as jobs
from api.models import AttemptRole, Job, JobAttempt
from gpujobs.reasons import EndReason
from gpujobs.resources import JobStatus
from gpujobs.runtime import RunConfig
from gpujobs.spec import JobSpec
from worker import repository as repo
from worker.billing import close, ending
from worker.control import ControlPlane
from worker.launchers.base import LaunchRefused, LaunchRequest

log = logging.getLogger(__name__)


def launch_attempt(cp: ControlPlane, *, attempt_id: str) -> str | None:
    with transaction(cp.factory) as session:
        attempt = repo.attempt_for_update(session, attempt_id=attempt_id)
        if attempt is None or attempt.ended_at is not None or attempt.launch_handle:
            return None
        job = repo.job_for_update(session, job_id=attempt.job_id)
        if job is None:
            return None
        # A standby whose launch failed and whose job has ended or moved since, or one withdrawn
        # before it launched: nothing to stand beside, and no token to issue for it.
        ended = standby.unlaunched_end(attempt, job_running=job.status == JobStatus.RUNNING.value)
        if ended is not None:
            close(session, attempt=attempt, job=job, now=cp.clock(), end_reason=ended)
            return None
        # A fresh job-scoped token per launch: the clear token is never stored, so a retried
        # launch cannot reuse the first one's. It dies with the attempt (worker.billing.close).
        token = issue_token(
            session,
            team_id=job.team_id,
            job_id=job.id,
            attempt_id=attempt.id,
            name=f"attempt {attempt.number}",
        )
        if job.checkpoint_uri is None:  # its first launch: from now on its checkpoints stay here
            job.checkpoint_uri = jobs.checkpoint_uri(job, settings=cp.settings)
        request = _request(cp, job=job, attempt=attempt, token=token)
    if cp.storage is not None:
        try:
            storage = cp.storage.issue(
                attempt_id=attempt_id, checkpoint_uri=request.run_config.checkpoint_uri
            )
        except Exception:
            log.exception(
                "minting the S3 keys of attempt %s failed; the reconciler retries", attempt_id
            )
            return None
        request = replace(request, storage=storage)
    try:
        handle = cp.launcher.launch(request)
    except LaunchRefused as refused:
        _refused(cp, attempt_id=attempt_id, why=str(refused))
        return None
    except Exception:
        log.exception("launch of attempt %s failed; the reconciler retries", attempt_id)
        return None
    with transaction(cp.factory) as session:
        attempt = repo.attempt_for_update(session, attempt_id=attempt_id)
        closed = attempt is None or attempt.ended_at is not None
        if attempt is not None and not closed and attempt.launch_handle is None:
            attempt.launch_handle = handle
            attempt.launched_at = cp.clock()
    if closed:
        # Closed while we launched (a cancel, or a launch given up as lost): nothing watches
        # or bills what we just started, so stop it.
        stop_attempt(cp, handle=handle)
    return handle


def _refused(cp: ControlPlane, *, attempt_id: str, why: str) -> None:
    """The launcher can never start the attempt: it ends as a configuration error, and its job
    fails saying why (a standby's job runs on). Retried, each pass minted a job token for a
    launch that could not happen, and the job stayed SCHEDULED."""
    log.warning("attempt %s cannot be launched: %s", attempt_id, why)
    with transaction(cp.factory) as session:
        attempt = repo.attempt_for_update(session, attempt_id=attempt_id)
        if attempt is None or attempt.ended_at is not None:
            return
        job = repo.job_for_update(session, job_id=attempt.job_id)
        close(session, attempt=attempt, job=job, now=cp.clock(), end_reason=EndReason.CONFIG_ERROR)
        if job is None or JobStatus(job.status).terminal:
            return
        reason = f"the job cannot be launched as specified, not retried: {why}"
        if attempt.role is AttemptRole.STANDBY:
            lifecycle.note(session, job, reason=f"standby attempt {attempt.number}: {reason}")
            return
        lifecycle.switch_status(
            session, job, JobStatus.FAILED, reason=reason, data=ending(attempt, job)
        )


def stop_attempt(cp: ControlPlane, *, handle: str) -> None:
    try:
        cp.launcher.cancel(handle)
    except Exception:
        log.exception("stopping %s failed; the reconciler retries", handle)


def _request(cp: ControlPlane, *, job: Job, attempt: JobAttempt, token: str) -> LaunchRequest:
    spec = JobSpec.from_stored(job.spec)
    settings = cp.settings
    run_config = RunConfig(
        job_id=job.id,
        attempt_id=attempt.id,
        trainer=spec.trainer,
        checkpoint_uri=jobs.checkpoint_uri(job, settings=settings),
        checkpoint_every_seconds=attempt.checkpoint_every_seconds,
        s3_endpoint_url=settings.s3_endpoint_url or None,
        api_url=settings.api_url(),
        allowed_workload_prefixes=settings.workload_prefixes_for(job.team.name),
        standby=attempt.role is AttemptRole.STANDBY,
    )
    return LaunchRequest(
        job_id=job.id,
        attempt_id=attempt.id,
        attempt_number=attempt.number,
        job_name=job.name,
        team=job.team.name,
        placement=attempt.placement,
        gpus_per_node=spec.resources.gpus_per_node,
        run_config=run_config,
        job_token=token,
        image=spec.image,
        env=dict(spec.env),
    )
