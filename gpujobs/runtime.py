"""The attempt's runtime contract: how a launcher configures the trainer it starts.

A launcher writes a `RunConfig` as JSON and points the trainer at it with `GPUJOBS_RUN_CONFIG`
(a file path) or `GPUJOBS_RUN_CONFIG_JSON` (the JSON itself, for Kubernetes env vars). Secrets
never go in the config: the job token travels as `GPUJOBS_JOB_TOKEN`, S3 credentials as the
usual `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from gpujobs.spec import StrictModel, TrainerSpec
from gpujobs.workloads import MODULE_PATH

ENV_RUN_CONFIG = "GPUJOBS_RUN_CONFIG"
ENV_RUN_CONFIG_JSON = "GPUJOBS_RUN_CONFIG_JSON"
ENV_JOB_TOKEN = "GPUJOBS_JOB_TOKEN"
# Where the trainer writes a short message saying why it could not run (Kubernetes reads
# /dev/termination-log into the pod's status); the launcher puts it on the job.
ENV_TERMINATION_LOG = "GPUJOBS_TERMINATION_LOG"
TERMINATION_MESSAGE_MAX_BYTES = 4096  # Kubernetes' limit for one container's message

# The trainer saved a checkpoint after the preemption notice and exited on purpose: the attempt
# was preempted, not failed. 75 is EX_TEMPFAIL ("try again later") from sysexits.h.
EXIT_PREEMPTED = 75
# SIGTERM arrived but the checkpoint on notice was disabled or could not be written.
EXIT_PREEMPTED_NO_CHECKPOINT = 76
# The job cannot run as specified (bad configuration, a workload that is not allowed or does not
# import): retrying cannot help, so the job fails at once. 78 is EX_CONFIG from sysexits.h.
EXIT_CONFIG_ERROR = 78


class RunConfig(StrictModel):
    job_id: str = Field("local", max_length=64)
    attempt_id: str | None = Field(None, max_length=64)
    trainer: TrainerSpec
    checkpoint_uri: str = Field(
        description="Where checkpoints live: a directory, file:///dir or s3://bucket/prefix."
    )
    checkpoint_every_steps: int | None = Field(
        None, ge=1, description="Resolved interval (the scheduler fills it in for `auto`)."
    )
    checkpoint_every_seconds: float | None = Field(None, gt=0)
    s3_endpoint_url: str | None = None
    api_url: str | None = Field(None, description="Report progress here when set.")
    progress_every_s: float = Field(5.0, gt=0)
    allowed_workload_prefixes: list[
        Annotated[str, Field(min_length=1, max_length=200, pattern=MODULE_PATH.pattern)]
    ] = Field(
        default_factory=list,
        max_length=256,
        description="Module prefixes the operator allows for this job's team; the trainer "
        "refuses any other non-built-in workload before importing it.",
    )
    standby: bool = Field(
        False,
        description="Start as a standby (make-before-break): build everything, then ask "
        "`POST {api_url}/v1/jobs/{job_id}/standby` every `standby_poll_s` until the answer is "
        "`go` (the running attempt has checkpointed and ended) before restoring the newest "
        "checkpoint and training; `stop` (or SIGTERM) ends it without touching the store.",
    )
    standby_poll_s: float = Field(1.0, gt=0, le=60)


class StandbyCall(StrictModel):
    """What a standby's trainer posts while it waits: which attempt it is."""

    attempt_id: str = Field(max_length=64)


class StandbyAnswer(BaseModel):
    """`wait`: the running attempt still trains. `go`: this attempt is now the job's running
    attempt; restore the newest checkpoint (`resume_from_step` is the one the server knows of)
    and train. `stop`: this standby is no longer wanted (ended, replaced, job over)."""

    action: Literal["wait", "go", "stop"]
    resume_from_step: int | None = None
