"""The SDK's request core: each API operation defined once, as the request to send and the
contract model that reads its answer (and `pick_checkpoint`, which file `download` fetches).
`Client` and `AsyncClient` only differ in how they send.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import httpx
from pydantic import TypeAdapter

from gpujobs import errors
from gpujobs.plans import Estimate, OfferList
from gpujobs.resources import (
    Artifacts,
    Checkpoint,
    Deployment,
    FieldError,
    Job,
    JobAttempt,
    JobEvent,
    JobStatus,
    Page,
)
from gpujobs.spec import CapacityType, JobSpec
from gpujobs.usage import Budget, UsageGroupBy, UsageReport

T = TypeVar("T")
StatusFilter = str | JobStatus | Iterable[str | JobStatus] | None


@dataclass(frozen=True)
class Operation(Generic[T]):
    method: str
    path: str
    read: Callable[[httpx.Response], T]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)


def _model(model: type[T] | Any) -> Callable[[httpx.Response], T]:
    adapter: TypeAdapter[T] = TypeAdapter(model)
    # A job's spec was checked when it was submitted; its deadline may have passed since.
    return lambda response: adapter.validate_json(response.content, context={"stored": True})


def _text(response: httpx.Response) -> str:
    return response.text


def _body(spec: JobSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", exclude_unset=True)


def submit(spec: JobSpec, *, idempotency_key: str | None) -> Operation[Job]:
    key = idempotency_key or str(uuid.uuid4())  # one key for every retry of this call
    headers = {"Idempotency-Key": key}
    return Operation("POST", "/v1/jobs", _model(Job), json=_body(spec), headers=headers)


def get(job: str) -> Operation[Job]:
    return Operation("GET", f"/v1/jobs/{job}", _model(Job))


def page(*, status: StatusFilter, cursor: str | None, limit: int) -> Operation[Page[Job]]:
    params: dict[str, Any] = {"limit": limit, "status": statuses(status)}
    if cursor:
        params["cursor"] = cursor
    return Operation("GET", "/v1/jobs", _model(Page[Job]), params=params)


def cancel(job: str) -> Operation[Job]:
    return Operation("POST", f"/v1/jobs/{job}/cancel", _model(Job))


def attempts(job: str) -> Operation[builtins.list[JobAttempt]]:
    return Operation("GET", f"/v1/jobs/{job}/attempts", _model(builtins.list[JobAttempt]))


def events(job: str) -> Operation[builtins.list[JobEvent]]:
    return Operation("GET", f"/v1/jobs/{job}/events", _model(builtins.list[JobEvent]))


def logs(job: str, *, follow: bool = False, tail: int | None = None) -> Operation[str]:
    params = {"follow": "true"} if follow else {}
    if tail is not None:
        params["tail"] = str(tail)
    return Operation("GET", f"/v1/jobs/{job}/logs", _text, params=params)


def artifacts(job: str) -> Operation[Artifacts]:
    return Operation("GET", f"/v1/jobs/{job}/artifacts", _model(Artifacts))


def estimate(spec: JobSpec) -> Operation[Estimate]:
    return Operation("POST", "/v1/estimate", _model(Estimate), json=_body(spec))


def offers(
    *,
    gpu_models: Iterable[str] = (),
    regions: Iterable[str] = (),
    clouds: Iterable[str] = (),
    gpu_count: int | None = None,
    capacity: CapacityType | str | None = None,
    limit: int = 100,
) -> Operation[OfferList]:
    params: dict[str, Any] = {
        "gpu_model": list(gpu_models),
        "region": list(regions),
        "cloud": list(clouds),
        "limit": limit,
    }
    if gpu_count is not None:
        params["gpu_count"] = gpu_count
    if capacity is not None:
        params["capacity"] = CapacityType(capacity).value
    return Operation("GET", "/v1/catalog/offers", _model(OfferList), params=params)


def usage(
    *,
    from_: datetime | str | None,
    to: datetime | str | None,
    group_by: UsageGroupBy | str,
) -> Operation[UsageReport]:
    params = {"group_by": UsageGroupBy(group_by).value}
    for name, value in (("from", from_), ("to", to)):
        if value is not None:
            params[name] = _timestamp(name, value)
    return Operation("GET", "/v1/usage", _model(UsageReport), params=params)


def budget() -> Operation[Budget]:
    return Operation("GET", "/v1/budget", _model(Budget))


def deployment() -> Operation[Deployment]:
    return Operation("GET", "/v1/deployment", _model(Deployment))


def statuses(status: StatusFilter) -> builtins.list[str]:
    if status is None:
        return []
    if isinstance(status, str):
        return [JobStatus(status.upper()).value]
    return [JobStatus(str(s).upper()).value for s in status]


def _timestamp(name: str, value: datetime | str) -> str:
    """An RFC 3339 timestamp; dates and times without a timezone are taken as UTC."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise errors.BadRequest(
                f"{name}: {value!r} is not an ISO 8601 date or time",
                code="invalid_request",
                fields=[FieldError(field=name, reason="expected e.g. 2025-03-01T00:00:00Z")],
            ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.isoformat()


def pick_checkpoint(listing: Artifacts, step: int | None) -> Checkpoint:
    """The checkpoint at `step`, or the final one (the trained weights)."""
    wanted = listing.final_step if step is None else step
    for checkpoint in listing.checkpoints:
        if checkpoint.step == wanted:
            return checkpoint
    if step is None:
        raise errors.NotFound(
            f"job {listing.job_id} has no final weights yet (it has not succeeded); "
            "pass a step to download a checkpoint",
            code="not_found",
        )
    raise errors.NotFound(
        f"job {listing.job_id} has no checkpoint at step {step}", code="not_found"
    )
