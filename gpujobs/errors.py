"""Typed errors the SDK raises: one class per thing a caller may want to handle differently.

Every error carries the API's error body: an HTTP `status` (None when no answer came back), a
machine-readable `code`, a `message` a person can act on, and the offending `fields`.
"""

from __future__ import annotations

import json
from typing import Any

from gpujobs.resources import ErrorBody, FieldError


class GpuJobsError(Exception):
    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str = "error",
        fields: list[FieldError] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.fields: list[FieldError] = fields or []

    def __str__(self) -> str:
        prefix = f"{self.status} {self.code}" if self.status else self.code
        return f"{prefix}: {self.message}"


class BadRequest(GpuJobsError):
    """The request was refused (400, 413, ...) for a reason other than those below."""


class Unauthorized(GpuJobsError):
    """401: no token, or the token is invalid or revoked."""


class Forbidden(GpuJobsError):
    """403: the token is valid but may not do this."""


class NotFound(GpuJobsError):
    """404: no such job (or it belongs to another team)."""


class Conflict(GpuJobsError):
    """409: e.g. cancelling a finished job, or an idempotency key reused with another spec."""


class InvalidSpec(GpuJobsError):
    """422, or a spec that failed validation before it was sent; `fields` names each problem."""


class RateLimited(GpuJobsError):
    """429 after every retry was spent."""


class ServerError(GpuJobsError):
    """5xx after every retry was spent."""


class ConnectionFailed(GpuJobsError):
    """The API could not be reached (refused, reset, timed out) after every retry."""


class WaitTimeout(GpuJobsError, TimeoutError):
    """`wait()` gave up before the job reached a terminal status."""


_BY_STATUS: dict[int, type[GpuJobsError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: InvalidSpec,
    429: RateLimited,
}


def error_class(status: int) -> type[GpuJobsError]:
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return ServerError
    return BadRequest


def from_response(status: int, body: bytes) -> GpuJobsError:
    """Build the typed error for an HTTP error answer, from the API's ErrorBody when it is one."""
    cls = error_class(status)
    try:
        parsed = ErrorBody.model_validate(json.loads(body))
    except (ValueError, TypeError):
        text = body.decode("utf-8", "replace").strip()[:500]
        return cls(text or f"HTTP {status}", status=status, code=f"http_{status}")
    detail = parsed.error
    return cls(detail.message, status=status, code=detail.code, fields=detail.fields)


def from_validation_error(error: Any) -> InvalidSpec:
    """A pydantic ValidationError raised while building a spec locally, in the API's shape."""
    fields = [
        FieldError(field=".".join(str(p) for p in e.get("loc", ())), reason=str(e.get("msg", "")))
        for e in error.errors()
    ]
    summary = "; ".join(f"{f.field}: {f.reason}" for f in fields[:5])
    return InvalidSpec(summary or "invalid spec", code="invalid_request", fields=fields)
