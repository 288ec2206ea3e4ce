"""Domain errors carry their own HTTP status and a message a user can act on."""

from __future__ import annotations

from gpujobs.resources import FieldError


class DomainError(Exception):
    status_code = 400
    code = "bad_request"
    retry_after_s: int | None = None  # sent as Retry-After: when a retry can succeed

    def __init__(self, message: str, *, fields: list[FieldError] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields or []


class Unauthorized(DomainError):
    status_code = 401
    code = "unauthorized"


class Forbidden(DomainError):
    status_code = 403
    code = "forbidden"


class NotFound(DomainError):
    status_code = 404
    code = "not_found"


class Conflict(DomainError):
    status_code = 409
    code = "conflict"


class InvalidRequest(DomainError):
    status_code = 422
    code = "invalid_request"


class BudgetExceeded(DomainError):
    status_code = 422
    code = "budget_exceeded"


class IllegalTransition(Conflict):
    code = "illegal_transition"


class RequestTimeout(DomainError):
    status_code = 408
    code = "request_timeout"


class PayloadTooLarge(DomainError):
    status_code = 413
    code = "payload_too_large"


class TooManyRequests(DomainError):
    status_code = 429
    code = "too_many_requests"
    retry_after_s = 5


class Unavailable(DomainError):
    """Overload or a database that cannot answer now: the client should retry, so 503 with
    Retry-After, never a 500."""

    status_code = 503
    code = "unavailable"
    retry_after_s = 1
