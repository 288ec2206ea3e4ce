"""The job spec: what a team asks gpujobs to run.

These models are the public contract: the API validates requests with them, the SDK sends them,
the trainer reads its configuration from them, and the OpenAPI document shows them. Unknown
fields are rejected everywhere so that a typo never silently becomes a default, types are strict
(`"10"` and `true` are not integers) and floats must be finite (no NaN or Infinity).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
WORKLOAD_PATTERN = r"^([a-z][a-z0-9_]*|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$"

# `spec.env` is an allowlist: a key must look like an ordinary application variable, and must not
# be one the platform, the dynamic loader, an interpreter, a cloud SDK, the container runtime or
# torch.distributed interprets. Those could load code into the trainer (LD_PRELOAD, PYTHONPATH),
# redirect its credentials or traffic (AWS_*, HTTPS_PROXY, SSL_CERT_FILE), or break the launcher's
# own wiring (MASTER_ADDR, RANK, CUDA_VISIBLE_DEVICES). NCCL_* stays allowed: NCCL_DEBUG,
# NCCL_IB_DISABLE or NCCL_SOCKET_IFNAME tune only the job's own collectives between its own
# ranks, and teams legitimately need them; the NCCL variables that name a file to read or write
# (…_FILE) or a shared library to load (…PLUGIN…) are refused like LD_PRELOAD.
ENV_KEY = re.compile(r"^[A-Z][A-Z0-9_]*$")
RESERVED_ENV_PREFIXES = (
    "GPUJOBS_",
    "LD_",
    "DYLD_",
    "PYTHON",
    "AWS_",
    "BOTO_",
    "GOOGLE_",
    "GCLOUD_",
    "CLOUDSDK_",
    "AZURE_",
    "KUBERNETES_",
    "TORCHELASTIC_",
    "NVIDIA_",
    "SSL_",
    "MALLOC_",
    "GLIBC_",
    "PERL5",
)
RESERVED_ENV_PREFIX = RESERVED_ENV_PREFIXES[0]  # the platform's own; launchers filter on it too
RESERVED_ENV_NAMES = frozenset(
    {
        # the process's identity and shell
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TMPDIR", "TEMP", "TMP",
        "HOSTNAME", "LANG", "LANGUAGE", "TERM", "ENV", "BASH_ENV", "IFS", "CDPATH", "PS4",
        # glibc's loader and name service (ignored for setuid programs for the same reasons)
        "GCONV_PATH", "LOCPATH", "NLSPATH", "HOSTALIASES", "RES_OPTIONS", "LOCALDOMAIN",
        # where traffic and trust go
        "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY",
        "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
        # torch.distributed's rendezvous and the devices the launcher assigned
        "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
        "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE",
        "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
        # other interpreters' code paths
        "NODE_OPTIONS", "NODE_PATH", "JAVA_TOOL_OPTIONS", "RUBYOPT", "RUBYLIB",
        # the cluster's credentials
        "KUBECONFIG",
    }
)  # fmt: skip


def env_key_refusal(key: str) -> str | None:
    """Why `key` may not be set through `spec.env`, or None when it may."""
    if len(key) > 128 or not ENV_KEY.match(key):
        return "must be 1-128 uppercase letters, digits or underscores, starting with a letter"
    if key in RESERVED_ENV_NAMES:
        return "is set or interpreted by the platform; it cannot be set per job"
    for prefix in RESERVED_ENV_PREFIXES:
        if key.startswith(prefix):
            return f"{prefix}* names are interpreted by the platform; they cannot be set per job"
    if key.startswith("NCCL_") and (key.endswith("_FILE") or "PLUGIN" in key):
        return "NCCL variables that name a file or a plugin to load cannot be set per job"
    return None


# The longest run a spec may plan: its deadline_hours and estimated_hours (a leap year).
MAX_PLANNED_HOURS = 24 * 366

# Datetimes a request may carry: aware, and representable in UTC with room to compute with
# (a deadline of 9999-12-31T23:59:59-23:59 is in year 10000 once in UTC, which Python cannot hold).
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(3000, 1, 1, tzinfo=UTC)


def _in_range(value: datetime) -> datetime:
    try:
        in_utc = value.astimezone(UTC)
    except OverflowError:
        raise ValueError("out of range: must fall between 1970 and 2999 in UTC") from None
    if not EARLIEST <= in_utc < LATEST:
        raise ValueError("out of range: must fall between 1970 and 2999 in UTC")
    return value


# `strict=False`: JSON carries datetimes as strings, and the API validates decoded JSON.
Instant = Annotated[AwareDatetime, AfterValidator(_in_range), Field(strict=False)]


class StrictModel(BaseModel):
    # strict: no "10" -> 10 or true -> 1; enum and datetime fields opt out (JSON has only strings).
    model_config = ConfigDict(extra="forbid", frozen=False, strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _unicode_text(cls, value: Any) -> Any:
        # JSON may escape half a surrogate pair ("\ud800") and Python decodes it into a str that
        # no encoder takes back: a string field without a constraint (an option, an env key)
        # passed validation, and the job's JSON, row or error message failed later with a 500.
        # Checked here for every string of every model, keys included, before anything else.
        errors = [
            InitErrorDetails(
                type=PydanticCustomError(
                    "unicode_text",
                    "the {what} is not valid Unicode text: it holds a lone surrogate ({surrogate})",
                    {"what": what, "surrogate": _first_surrogate(text)},
                ),
                loc=at,
                input=_escaped(text),
            )
            for at, what, text in _not_text(value)
        ]
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return value


class AmpDtype(StrEnum):
    BF16 = "bf16"
    FP16 = "fp16"
    OFF = "off"


class CapacityType(StrEnum):
    RESERVED = "reserved"
    SPOT = "spot"
    ON_DEMAND = "on_demand"


class DataLoaderSpec(StrictModel):
    num_workers: int = Field(2, ge=0, le=64, description="DataLoader worker processes per rank.")
    pin_memory: bool = Field(True, description="Pin host memory (only takes effect on CUDA).")
    prefetch_factor: int = Field(2, ge=1, le=64, description="Batches prefetched per worker.")
    persistent_workers: bool = Field(True, description="Keep workers alive between epochs.")


class CheckpointSpec(StrictModel):
    """When to checkpoint. Neither interval set means `auto`: the scheduler picks the interval
    from the checkpoint cost and the capacity's preemption rate (Young/Daly)."""

    every_steps: int | None = Field(None, ge=1, le=10_000_000)
    every_seconds: float | None = Field(None, gt=0, le=7 * 24 * 3600)
    keep_last: int = Field(3, ge=1, le=100, description="Complete checkpoints to keep.")
    on_preemption: bool = Field(True, description="Save when the preemption notice arrives.")
    allow_config_change: bool = Field(
        False,
        description="Resume even if the settings that decide what training computes (learning "
        "rate, steps, seed, batch size...) differ from those the checkpoint was saved with.",
    )

    @model_validator(mode="before")
    @classmethod
    def _auto_shorthand(cls, value: Any) -> Any:
        if value == "auto":
            return {}
        return value

    @model_validator(mode="after")
    def _one_interval(self) -> CheckpointSpec:
        if self.every_steps is not None and self.every_seconds is not None:
            raise ValueError("set at most one of every_steps and every_seconds")
        return self

    @property
    def auto(self) -> bool:
        return self.every_steps is None and self.every_seconds is None


class TrainerSpec(StrictModel):
    workload: Annotated[str, Field(min_length=1, max_length=200, pattern=WORKLOAD_PATTERN)] = Field(
        "gpt",
        description="A built-in workload (`gpt`, `resnet`) or a user module `pkg.mod:build`.",
    )
    steps: int | None = Field(None, ge=1, le=100_000_000, description="Optimizer steps to run.")
    epochs: int | None = Field(None, ge=1, le=100_000, description="Epochs to run.")
    batch_size: int = Field(8, ge=1, le=65_536, description="Micro-batch size per GPU.")
    amp: AmpDtype = Field(
        AmpDtype.BF16, strict=False, description="Mixed precision: bf16, fp16 or off."
    )
    grad_accum_steps: int = Field(1, ge=1, le=4096)
    grad_checkpointing: bool = False
    compile: bool = Field(
        False,
        description="torch.compile the model: faster steps on a GPU after a compile of a "
        "minute or so at each start (each attempt, each resume).",
    )
    deterministic: bool = Field(
        False,
        description="Deterministic kernels (torch.use_deterministic_algorithms, "
        "CUBLAS_WORKSPACE_CONFIG, no nondeterministic attention): a run resumed after a "
        "preemption ends bitwise equal to an uninterrupted one on the same GPU model, at some "
        "cost in speed. On a CPU runs are bitwise exact either way with one intra-op thread a "
        "process (OMP_NUM_THREADS=1); with more, torch can split a reduction differently from "
        "run to run.",
    )
    learning_rate: float = Field(3e-4, gt=0, le=10)
    max_grad_norm: float | None = Field(1.0, gt=0)
    seed: int = Field(0, ge=0, le=2**32 - 1)
    dataloader: DataLoaderSpec = Field(default_factory=DataLoaderSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    args: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Workload options, checked against the options the workload declares "
        "(see gpujobs.workloads) and passed to the workload's builder.",
    )

    @field_validator("args", mode="before")
    @classmethod
    def _finite_args(cls, value: Any) -> Any:
        # Before the union is tried, so that NaN is one clear error, not four (str, int, ...).
        if isinstance(value, dict):
            bad = [k for k, v in value.items() if isinstance(v, float) and not math.isfinite(v)]
            if bad:
                raise _located(bad, "finite_number", "must be a finite number")
        return value

    @model_validator(mode="after")
    def _one_length(self) -> TrainerSpec:
        if (self.steps is None) == (self.epochs is None):
            raise ValueError("set exactly one of steps and epochs")
        return self

    @field_validator("args")
    @classmethod
    def _small_args(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(value) > 64:
            raise ValueError("at most 64 workload options")
        for key in value:
            if not key or len(key) > 64:
                raise ValueError(f"option name {key!r} must be 1-64 characters")
        return value


class ResourcesSpec(StrictModel):
    gpu_models: list[Annotated[str, Field(min_length=1, max_length=40)]] | None = Field(
        None,
        min_length=1,
        max_length=32,
        description="Allowed GPU models, e.g. ['A100', 'H100']; any if unset.",
    )
    min_gpu_memory_gb: float | None = Field(None, gt=0, le=4096)
    gpus_per_node: int = Field(1, ge=1, le=16)
    nodes: int = Field(1, ge=1, le=256)
    clouds: list[Annotated[str, Field(min_length=1, max_length=20)]] | None = Field(
        None, min_length=1, max_length=8
    )
    regions: list[Annotated[str, Field(min_length=1, max_length=40)]] | None = Field(
        None, min_length=1, max_length=64
    )


class CapacitySpec(StrictModel):
    types: list[Annotated[CapacityType, Field(strict=False)]] = Field(
        default_factory=lambda: [CapacityType.RESERVED, CapacityType.SPOT, CapacityType.ON_DEMAND],
        min_length=1,
        max_length=3,
        description="Capacity types the job may run on.",
    )
    max_price_per_hour: float | None = Field(
        None, gt=0, le=100_000, description="Highest price the whole job may run at, USD/hour."
    )
    on_budget_exceeded: Literal["reject", "defer"] = Field(
        "reject", description="What to do when the team's remaining budget cannot pay for it."
    )

    @field_validator("types")
    @classmethod
    def _unique(cls, value: list[CapacityType]) -> list[CapacityType]:
        if len(set(value)) != len(value):
            raise ValueError("capacity types must not repeat")
        return value


class JobSpec(StrictModel):
    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN)
    trainer: TrainerSpec
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    capacity: CapacitySpec = Field(default_factory=CapacitySpec)
    deadline: datetime | None = Field(
        None, strict=False, description="Absolute deadline (timezone-aware, before 3000)."
    )
    deadline_hours: float | None = Field(
        None, gt=0, le=MAX_PLANNED_HOURS, description="Deadline in hours from submission."
    )
    estimated_hours: float | None = Field(
        None,
        gt=0,
        le=MAX_PLANNED_HOURS,
        description="Expected uninterrupted run time on the requested resources, on the first "
        "of `resources.gpu_models` (an A100 when none is named); the scheduler converts it to "
        "the other models by their speed and refines it from the trainer's measured progress.",
    )
    priority: int = Field(50, ge=0, le=100, description="Higher runs first when capacity is short.")
    max_restarts: int = Field(
        3, ge=0, le=1000, description="Restarts after failures (preemptions do not count)."
    )
    image: str | None = Field(None, min_length=1, max_length=500, pattern=r"^[^\s]+$")
    env: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict,
        description="Environment variables for the trainer: KEY names of uppercase letters, "
        "digits and underscores; names the platform, the loader, Python, cloud SDKs or "
        "torch.distributed interpret (LD_*, PYTHON*, AWS_*, GPUJOBS_*, PATH, HOME, RANK, ...) "
        "are refused.",
    )

    @field_validator("deadline")
    @classmethod
    def _future_deadline(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("deadline must include a timezone, e.g. 2026-12-31T00:00:00Z")
        # A stored spec was checked when it was submitted (perhaps under older rules); its
        # deadline may have passed since.
        if (info.context or {}).get("stored"):
            return value
        _in_range(value)
        if value <= datetime.now(UTC):
            raise ValueError("deadline must be in the future")
        return value

    @field_validator("env", mode="wrap")
    @classmethod
    def _env_keys(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> dict[str, str]:
        env: dict[str, str] = handler(value)
        if len(env) > 128:
            raise ValueError("at most 128 environment variables")
        errors = [
            InitErrorDetails(
                type=PydanticCustomError("env_key", "{key}: {reason}", {"key": k, "reason": r}),
                loc=(k,),
                input=k,
            )
            for k in env
            if (r := env_key_refusal(k)) is not None
        ]
        # A NUL ends a C string: no process environment holds one, so every launch would fail.
        # A spec stored under older rules still loads; its launch fails the job, saying why.
        if not (info.context or {}).get("stored"):
            errors += [
                InitErrorDetails(
                    type=PydanticCustomError(
                        "env_value",
                        "{key}: the value holds a NUL character, which no process environment "
                        "can hold",
                        {"key": k},
                    ),
                    loc=(k,),
                    input=k,
                )
                for k, v in env.items()
                if "\0" in v
            ]
        if errors:
            # Located at env.<KEY>, so the 422 names the key itself.
            raise ValidationError.from_exception_data("env", errors)
        return env

    @model_validator(mode="after")
    def _one_deadline(self) -> JobSpec:
        if self.deadline is not None and self.deadline_hours is not None:
            raise ValueError("set at most one of deadline and deadline_hours")
        return self

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> JobSpec:
        """Load a spec that was validated at submission (skips the checks that depend on now)."""
        return cls.model_validate(data, context={"stored": True})

    def deadline_at(self, submitted_at: datetime) -> datetime | None:
        """The absolute deadline, resolving `deadline_hours` against the submission time."""
        if self.deadline is not None:
            return self.deadline.astimezone(UTC)
        if self.deadline_hours is not None:
            return submitted_at + timedelta(hours=self.deadline_hours)
        return None


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _first_surrogate(value: str) -> str:
    return next(f"\\u{ord(c):04x}" for c in value if "\ud800" <= c <= "\udfff")


def _escaped(value: str) -> str:
    """`value` with every lone surrogate written as its escape, so a message can show it."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def _not_text(value: Any) -> Iterator[tuple[tuple[str | int, ...], str, str]]:
    """(where, "key" or "value", the string) for each string in decoded JSON that is not valid
    Unicode text. Iterative: the body may nest as deep as the JSON decoder allows."""
    pending: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while pending:
        at, item = pending.pop()
        if isinstance(item, str):
            if not _is_text(item):
                yield at, "value", item
        elif isinstance(item, dict):
            for key, inner in item.items():
                if isinstance(key, str) and not _is_text(key):
                    yield (*at, _escaped(key)), "key", key
                else:
                    pending.append(((*at, key), inner))
        elif isinstance(item, list | tuple):
            pending.extend(((*at, index), inner) for index, inner in enumerate(item))


def _located(keys: list[str], kind: str, message: str) -> ValidationError:
    """An error per key, located under the field being validated (e.g. `trainer.args.lr`)."""
    return ValidationError.from_exception_data(
        kind,
        [
            InitErrorDetails(type=PydanticCustomError(kind, message), loc=(k,), input=k)
            for k in keys
        ],
    )
