"""The Python SDK: `Client` (blocking) and `AsyncClient`, typed with the contract models.

    from gpujobs.client import Client

    with Client() as gj:                      # url and token: see gpujobs.config
        job = gj.submit("examples/gpt-small.yaml")
        done = gj.wait(job.id, on_progress=lambda j: print(j.status))

Every call retries connection errors, 5xx and 429 with exponential backoff and full jitter (a
`Retry-After` header is honoured); 4xx answers are never retried. `submit` sends an
`Idempotency-Key` (generated per call unless given), so its retries never create two jobs.
"""

from __future__ import annotations

import asyncio
import builtins
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, overload

import httpx
import yaml
from pydantic import ValidationError

from gpujobs import config, errors
from gpujobs.plans import Estimate
from gpujobs.resources import FieldError, Job, JobAttempt, JobEvent, JobStatus, Page
from gpujobs.spec import JobSpec
from gpujobs.usage import UsageGroupBy, UsageReport
from gpujobs.version import __version__

SpecSource = JobSpec | dict[str, Any] | str | Path
StatusFilter = str | JobStatus | Iterable[str | JobStatus] | None
ProgressCallback = Callable[[Job], None]
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """`max_attempts` tries in all; delays grow `backoff * 2**n` up to `max_backoff`, jittered."""

    max_attempts: int = 4
    backoff: float = 0.25
    max_backoff: float = 8.0

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        if retry_after is not None:
            try:
                return min(self.max_backoff, max(0.0, float(retry_after)))
            except ValueError:
                pass
        ceiling = min(self.max_backoff, self.backoff * (2**attempt))
        return random.uniform(0, ceiling)  # full jitter


def load_spec(source: SpecSource) -> JobSpec:
    """A JobSpec from a model, a dict, or a YAML/JSON file path, checked against the contract."""
    if isinstance(source, JobSpec):
        return source
    if isinstance(source, str | Path):
        path = Path(source).expanduser()
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as error:
            raise errors.InvalidSpec(
                f"cannot read {path}: {error.strerror or error}", code="unreadable_spec"
            ) from error
        except yaml.YAMLError as error:
            raise errors.InvalidSpec(
                f"{path} is not valid YAML: {error}", code="invalid_yaml"
            ) from error
        if not isinstance(data, dict):
            raise errors.InvalidSpec(
                f"{path} must hold a mapping (a job spec)", code="invalid_spec"
            )
        source = data
    try:
        return JobSpec.model_validate(source)
    except ValidationError as error:
        raise errors.from_validation_error(error) from error


def _statuses(status: StatusFilter) -> builtins.list[str]:
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


def _usage_params(
    from_: datetime | str | None, to: datetime | str | None, group_by: UsageGroupBy | str
) -> dict[str, str]:
    params = {"group_by": UsageGroupBy(group_by).value}
    for name, value in (("from", from_), ("to", to)):
        if value is not None:
            params[name] = _timestamp(name, value)
    return params


def _estimate(body: Any) -> Estimate:
    """A POST /v1/estimate answer as the contract's model."""
    try:
        return Estimate.model_validate(body)
    except ValidationError as error:
        raise errors.ServerError("unexpected estimate answer", code="bad_response") from error


class _Base:
    def __init__(
        self,
        url: str | None,
        token: str | None,
        *,
        timeout: float,
        retry: RetryPolicy | None,
        max_attempts: int | None,
    ) -> None:
        credentials = config.resolve(url=url, token=token)
        self.url = credentials.url
        self.token = credentials.token
        self.retry = retry or RetryPolicy()
        if max_attempts is not None:
            self.retry = RetryPolicy(
                max_attempts=max(1, max_attempts),
                backoff=self.retry.backoff,
                max_backoff=self.retry.max_backoff,
            )
        self.timeout = httpx.Timeout(timeout, connect=min(timeout, 10.0))

    def _headers(self) -> dict[str, str]:
        headers = {"User-Agent": f"gpujobs-python/{__version__}", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _retryable(self, attempt: int, response: httpx.Response | None) -> bool:
        if attempt + 1 >= self.retry.max_attempts:
            return False
        return response is None or response.status_code in RETRY_STATUSES

    @staticmethod
    def _connection_failed(url: str, error: httpx.TransportError) -> errors.ConnectionFailed:
        return errors.ConnectionFailed(
            f"cannot reach the gpujobs API at {url}: {error!s} ({type(error).__name__})",
            code="connection_failed",
        )


class Client(_Base):
    """Blocking client; arguments override GPUJOBS_URL, GPUJOBS_TOKEN and the credentials file."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        max_attempts: int | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, token, timeout=timeout, retry=retry, max_attempts=max_attempts)
        self._http = httpx.Client(
            base_url=self.url, headers=self._headers(), timeout=self.timeout, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- plumbing ------------------------------------------------------------------------------

    def _send(
        self, method: str, path: str, *, stream: bool = False, **kwargs: Any
    ) -> httpx.Response:
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                request = self._http.build_request(method, path, **kwargs)
                response = self._http.send(request, stream=stream)
            except httpx.TransportError as error:
                if not self._retryable(attempt, None):
                    raise self._connection_failed(self.url, error) from error
                delay = self.retry.delay(attempt)
            else:
                if response.status_code < 400:
                    return response
                if not self._retryable(attempt, response):
                    body = response.read()
                    response.close()
                    raise errors.from_response(response.status_code, body)
                delay = self.retry.delay(attempt, response.headers.get("Retry-After"))
                response.close()
            time.sleep(delay)
            attempt += 1

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._send(method, path, **kwargs).json()

    # -- jobs ----------------------------------------------------------------------------------

    def submit(self, spec: SpecSource, *, idempotency_key: str | None = None) -> Job:
        """Submit a job; a retry of this call (or a call with the same key) returns the same job."""
        body = load_spec(spec).model_dump(mode="json", exclude_unset=True)
        key = idempotency_key or str(uuid.uuid4())
        return Job.model_validate(
            self._json("POST", "/v1/jobs", json=body, headers={"Idempotency-Key": key})
        )

    def get(self, job_id: str) -> Job:
        return Job.model_validate(self._json("GET", f"/v1/jobs/{job_id}"))

    def list(self, *, status: StatusFilter = None, page_size: int = 100) -> Iterator[Job]:
        """Every job visible to the token, newest first, fetching pages as it goes."""
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": page_size, "status": _statuses(status)}
            if cursor:
                params["cursor"] = cursor
            page = Page[Job].model_validate(self._json("GET", "/v1/jobs", params=params))
            yield from page.items
            cursor = page.next_cursor
            if not cursor:
                return

    def cancel(self, job_id: str) -> Job:
        return Job.model_validate(self._json("POST", f"/v1/jobs/{job_id}/cancel"))

    def attempts(self, job_id: str) -> builtins.list[JobAttempt]:
        return [
            JobAttempt.model_validate(a) for a in self._json("GET", f"/v1/jobs/{job_id}/attempts")
        ]

    def events(self, job_id: str) -> builtins.list[JobEvent]:
        return [JobEvent.model_validate(e) for e in self._json("GET", f"/v1/jobs/{job_id}/events")]

    def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        poll: float = 2.0,
        on_progress: ProgressCallback | None = None,
    ) -> Job:
        """Poll until the job is SUCCEEDED, FAILED or CANCELLED and return it.

        `on_progress(job)` is called after every poll; `timeout` (seconds) raises WaitTimeout.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if on_progress is not None:
                on_progress(job)
            if job.status.terminal:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise errors.WaitTimeout(
                    f"job {job_id} is still {job.status} after {timeout}s", code="wait_timeout"
                )
            pause = poll if deadline is None else min(poll, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)

    @overload
    def logs(self, job_id: str, *, follow: Literal[False] = False) -> str: ...

    @overload
    def logs(self, job_id: str, *, follow: Literal[True]) -> Iterator[str]: ...

    def logs(self, job_id: str, *, follow: bool = False) -> str | Iterator[str]:
        """The job's log text; with `follow=True`, an iterator of chunks as they are written."""
        if not follow:
            return self._send("GET", f"/v1/jobs/{job_id}/logs").text
        return self._follow(job_id)

    def _follow(self, job_id: str) -> Iterator[str]:
        response = self._send(
            "GET",
            f"/v1/jobs/{job_id}/logs",
            params={"follow": "true"},
            stream=True,
            timeout=httpx.Timeout(self.timeout.connect, read=None),
        )
        try:
            yield from response.iter_text()
        except httpx.TransportError as error:
            raise self._connection_failed(self.url, error) from error
        finally:
            response.close()

    # -- planning and spend --------------------------------------------------------------------

    def estimate(self, spec: SpecSource) -> Estimate:
        """What the scheduler would do with a spec now, the plan it would choose first and why
        each other plan loses, without submitting."""
        body = load_spec(spec).model_dump(mode="json", exclude_unset=True)
        return _estimate(self._json("POST", "/v1/estimate", json=body))

    def usage(
        self,
        *,
        from_: datetime | str | None = None,
        to: datetime | str | None = None,
        group_by: UsageGroupBy | str = UsageGroupBy.TEAM,
    ) -> UsageReport:
        params = _usage_params(from_, to, group_by)
        return UsageReport.model_validate(self._json("GET", "/v1/usage", params=params))


class AsyncClient(_Base):
    """The same API for asyncio code; use `async with AsyncClient() as gj:`."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        max_attempts: int | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(url, token, timeout=timeout, retry=retry, max_attempts=max_attempts)
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=self._headers(), timeout=self.timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(
        self, method: str, path: str, *, stream: bool = False, **kwargs: Any
    ) -> httpx.Response:
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                request = self._http.build_request(method, path, **kwargs)
                response = await self._http.send(request, stream=stream)
            except httpx.TransportError as error:
                if not self._retryable(attempt, None):
                    raise self._connection_failed(self.url, error) from error
                delay = self.retry.delay(attempt)
            else:
                if response.status_code < 400:
                    return response
                if not self._retryable(attempt, response):
                    body = await response.aread()
                    await response.aclose()
                    raise errors.from_response(response.status_code, body)
                delay = self.retry.delay(attempt, response.headers.get("Retry-After"))
                await response.aclose()
            await asyncio.sleep(delay)
            attempt += 1

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return (await self._send(method, path, **kwargs)).json()

    async def submit(self, spec: SpecSource, *, idempotency_key: str | None = None) -> Job:
        body = load_spec(spec).model_dump(mode="json", exclude_unset=True)
        key = idempotency_key or str(uuid.uuid4())
        data = await self._json("POST", "/v1/jobs", json=body, headers={"Idempotency-Key": key})
        return Job.model_validate(data)

    async def get(self, job_id: str) -> Job:
        return Job.model_validate(await self._json("GET", f"/v1/jobs/{job_id}"))

    async def list(
        self, *, status: StatusFilter = None, page_size: int = 100
    ) -> AsyncIterator[Job]:
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": page_size, "status": _statuses(status)}
            if cursor:
                params["cursor"] = cursor
            page = Page[Job].model_validate(await self._json("GET", "/v1/jobs", params=params))
            for job in page.items:
                yield job
            cursor = page.next_cursor
            if not cursor:
                return

    async def cancel(self, job_id: str) -> Job:
        return Job.model_validate(await self._json("POST", f"/v1/jobs/{job_id}/cancel"))

    async def attempts(self, job_id: str) -> builtins.list[JobAttempt]:
        data = await self._json("GET", f"/v1/jobs/{job_id}/attempts")
        return [JobAttempt.model_validate(a) for a in data]

    async def events(self, job_id: str) -> builtins.list[JobEvent]:
        data = await self._json("GET", f"/v1/jobs/{job_id}/events")
        return [JobEvent.model_validate(e) for e in data]

    async def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        poll: float = 2.0,
        on_progress: Callable[[Job], None | Awaitable[None]] | None = None,
    ) -> Job:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = await self.get(job_id)
            if on_progress is not None:
                result = on_progress(job)
                if isinstance(result, Awaitable):
                    await result
            if job.status.terminal:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise errors.WaitTimeout(
                    f"job {job_id} is still {job.status} after {timeout}s", code="wait_timeout"
                )
            pause = poll if deadline is None else min(poll, max(0.0, deadline - time.monotonic()))
            await asyncio.sleep(pause)

    async def logs(self, job_id: str) -> str:
        return (await self._send("GET", f"/v1/jobs/{job_id}/logs")).text

    async def follow_logs(self, job_id: str) -> AsyncIterator[str]:
        """Chunks of the job's log as they are written (`?follow=true`)."""
        response = await self._send(
            "GET",
            f"/v1/jobs/{job_id}/logs",
            params={"follow": "true"},
            stream=True,
            timeout=httpx.Timeout(self.timeout.connect, read=None),
        )
        try:
            async for chunk in response.aiter_text():
                yield chunk
        except httpx.TransportError as error:
            raise self._connection_failed(self.url, error) from error
        finally:
            await response.aclose()

    async def estimate(self, spec: SpecSource) -> Estimate:
        body = load_spec(spec).model_dump(mode="json", exclude_unset=True)
        return _estimate(await self._json("POST", "/v1/estimate", json=body))

    async def usage(
        self,
        *,
        from_: datetime | str | None = None,
        to: datetime | str | None = None,
        group_by: UsageGroupBy | str = UsageGroupBy.TEAM,
    ) -> UsageReport:
        params = _usage_params(from_, to, group_by)
        return UsageReport.model_validate(await self._json("GET", "/v1/usage", params=params))
