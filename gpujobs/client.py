"""The Python SDK: `Client` (blocking) and `AsyncClient`, typed with the contract models.

    from gpujobs.client import Client

    with Client() as gj:                      # url and token: see gpujobs.config
        job = gj.submit("examples/first-run.yaml")
        done = gj.wait(job.id, on_progress=lambda j: print(j.status))

Every call retries connection errors, 5xx and 429 with exponential backoff and full jitter (a
`Retry-After` header is honoured); 4xx answers are never retried. `submit` sends an
`Idempotency-Key` (generated per call unless given), so its retries never create two jobs.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

import httpx

from gpujobs import config, errors
from gpujobs import operations as ops
from gpujobs.operations import Operation, StatusFilter, pick_checkpoint
from gpujobs.plans import Estimate, OfferList
from gpujobs.resources import Artifacts, Deployment, Job, JobAttempt, JobEvent
from gpujobs.spec import CapacityType
from gpujobs.spec_files import SpecSource

# load_spec stays importable from here, where SDK users found it.
from gpujobs.spec_files import load_spec as load_spec
from gpujobs.usage import Budget, UsageGroupBy, UsageReport
from gpujobs.version import __version__

T = TypeVar("T")
ProgressCallback = Callable[[Job], None]


def _seen(job: Job) -> tuple[object, ...]:
    """What `on_progress` reports a change of: where the job is and why, its steps, its
    attempts; not its cost, which grows with every poll while it runs."""
    return (job.status, job.status_reason, job.progress, job.attempts, job.preemptions)


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
    def _request(
        http: httpx.Client | httpx.AsyncClient, op: Operation[Any], **kwargs: Any
    ) -> httpx.Request:
        return http.build_request(
            op.method, op.path, params=op.params, json=op.json, headers=op.headers, **kwargs
        )

    def _transport_delay(self, attempt: int, error: httpx.TransportError) -> float:
        """How long to wait before retrying after a connection error; raises when out of tries."""
        if not self._retryable(attempt, None):
            raise self._connection_failed(self.url, error) from error
        return self.retry.delay(attempt)

    def _response_delay(self, attempt: int, response: httpx.Response) -> float | None:
        """How long to wait before retrying an error response; None: give up on it (the caller
        reads its body and raises)."""
        if not self._retryable(attempt, response):
            return None
        return self.retry.delay(attempt, response.headers.get("Retry-After"))

    @staticmethod
    def _connection_failed(url: str, error: httpx.TransportError) -> errors.ConnectionFailed:
        return errors.ConnectionFailed(
            f"cannot reach the gpujobs API at {url}: {error!s} ({type(error).__name__})",
            code="connection_failed",
        )

    def _wait_pause(
        self, job: Job, *, deadline: float | None, timeout: float | None, poll: float
    ) -> float | None:
        """None when the job has ended; otherwise how long to sleep before the next poll."""
        if job.status.terminal:
            return None
        if deadline is not None and time.monotonic() >= deadline:
            raise errors.WaitTimeout(
                f"job {job.id} is still {job.status} after {timeout}s", code="wait_timeout"
            )
        return poll if deadline is None else min(poll, max(0.0, deadline - time.monotonic()))

    def _follow_timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout.connect, read=None)


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

    def _send(self, op: Operation[Any], *, stream: bool = False, **kwargs: Any) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = self._http.send(self._request(self._http, op, **kwargs), stream=stream)
            except httpx.TransportError as error:
                delay = self._transport_delay(attempt, error)
            else:
                if response.status_code < 400:
                    return response
                retry_in = self._response_delay(attempt, response)
                body = response.read() if retry_in is None else b""
                response.close()
                if retry_in is None:
                    raise errors.from_response(response.status_code, body)
                delay = retry_in
            time.sleep(delay)
            attempt += 1

    def _call(self, op: Operation[T]) -> T:
        return op.read(self._send(op))

    # -- jobs ----------------------------------------------------------------------------------

    def submit(self, spec: SpecSource, *, idempotency_key: str | None = None) -> Job:
        """Submit a job; a retry of this call (or a call with the same key) returns the same job."""
        return self._call(ops.submit(load_spec(spec), idempotency_key=idempotency_key))

    def get(self, job: str) -> Job:
        """A job by id, unique id prefix, or name."""
        return self._call(ops.get(job))

    def list(self, *, status: StatusFilter = None, page_size: int = 100) -> Iterator[Job]:
        """Every job visible to the token, newest first, fetching pages as it goes."""
        cursor: str | None = None
        while True:
            page = self._call(ops.page(status=status, cursor=cursor, limit=page_size))
            yield from page.items
            cursor = page.next_cursor
            if not cursor:
                return

    def cancel(self, job: str) -> Job:
        return self._call(ops.cancel(job))

    def attempts(self, job: str) -> builtins.list[JobAttempt]:
        return self._call(ops.attempts(job))

    def events(self, job: str) -> builtins.list[JobEvent]:
        return self._call(ops.events(job))

    def wait(
        self,
        job: str,
        *,
        timeout: float | None = None,
        poll: float = 2.0,
        on_progress: ProgressCallback | None = None,
        on_poll: ProgressCallback | None = None,
    ) -> Job:
        """Poll until the job is SUCCEEDED, FAILED or CANCELLED and return it.

        `on_progress(job)` is called with the first poll's job and then whenever its status,
        reason, progress or attempts changed; `on_poll(job)` after every poll (a live display);
        `timeout` (seconds) raises WaitTimeout.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        last: tuple[object, ...] | None = None
        while True:
            current = self.get(job)
            if on_poll is not None:
                on_poll(current)
            if on_progress is not None and _seen(current) != last:
                last = _seen(current)
                on_progress(current)
            pause = self._wait_pause(current, deadline=deadline, timeout=timeout, poll=poll)
            if pause is None:
                return current
            time.sleep(pause)

    @overload
    def logs(self, job: str, *, follow: Literal[False] = False, tail: int | None = None) -> str: ...

    @overload
    def logs(
        self, job: str, *, follow: Literal[True], tail: int | None = None
    ) -> Iterator[str]: ...

    def logs(
        self, job: str, *, follow: bool = False, tail: int | None = None
    ) -> str | Iterator[str]:
        """The job's log text; with `follow=True`, an iterator of chunks as they are written;
        with `tail=N`, each attempt's output starts N bytes before its end."""
        if not follow:
            return self._call(ops.logs(job, tail=tail))
        return self._follow(job, tail=tail)

    def _follow(self, job: str, *, tail: int | None) -> Iterator[str]:
        response = self._send(
            ops.logs(job, follow=True, tail=tail), stream=True, timeout=self._follow_timeout()
        )
        try:
            yield from response.iter_text()
        except httpx.TransportError as error:
            raise self._connection_failed(self.url, error) from error
        finally:
            response.close()

    def artifacts(self, job: str) -> Artifacts:
        """The job's complete checkpoints; `final_step` names the trained weights."""
        return self._call(ops.artifacts(job))

    def download(self, job: str, directory: str | Path, *, step: int | None = None) -> Path:
        """Download a checkpoint's files (the final one unless `step` is given) into
        `directory/step-N/`, checking each file's sha256; returns that folder."""
        listing = self.artifacts(job)
        chosen = pick_checkpoint(listing, step)
        target = Path(directory) / f"step-{chosen.step}"
        target.mkdir(parents=True, exist_ok=True)
        for file in chosen.files:
            digest = hashlib.sha256()
            partial = target / f".{file.name}.part"
            with self._http.stream("GET", file.url) as response, open(partial, "wb") as out:
                if response.status_code >= 400:
                    raise errors.from_response(response.status_code, response.read())
                for chunk in response.iter_bytes():
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != file.sha256:
                partial.unlink()
                raise errors.ServerError(
                    f"{file.name}: the download does not match its sha256", code="bad_download"
                )
            partial.replace(target / file.name)
        return target

    # -- planning and spend --------------------------------------------------------------------

    def estimate(self, spec: SpecSource) -> Estimate:
        """Ranked plans for a spec (cheapest first), without submitting."""
        return self._call(ops.estimate(load_spec(spec)))

    def offers(
        self,
        *,
        gpu_models: Iterable[str] = (),
        regions: Iterable[str] = (),
        clouds: Iterable[str] = (),
        gpu_count: int | None = None,
        capacity: CapacityType | str | None = None,
        limit: int = 100,
    ) -> OfferList:
        """The catalog's offers, cheapest first on `capacity` (on-demand if unset)."""
        return self._call(
            ops.offers(
                gpu_models=gpu_models, regions=regions, clouds=clouds,
                gpu_count=gpu_count, capacity=capacity, limit=limit,
            )
        )  # fmt: skip

    def usage(
        self,
        *,
        from_: datetime | str | None = None,
        to: datetime | str | None = None,
        group_by: UsageGroupBy | str = UsageGroupBy.TEAM,
    ) -> UsageReport:
        return self._call(ops.usage(from_=from_, to=to, group_by=group_by))

    def budget(self) -> Budget:
        """The token's team's budget this calendar month: cap, spent, held and remaining."""
        return self._call(ops.budget())

    def deployment(self) -> Deployment:
        """What runs the jobs: with the local launcher, placements and costs are simulated."""
        return self._call(ops.deployment())


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
        self, op: Operation[Any], *, stream: bool = False, **kwargs: Any
    ) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = await self._http.send(
                    self._request(self._http, op, **kwargs), stream=stream
                )
            except httpx.TransportError as error:
                delay = self._transport_delay(attempt, error)
            else:
                if response.status_code < 400:
                    return response
                retry_in = self._response_delay(attempt, response)
                body = await response.aread() if retry_in is None else b""
                await response.aclose()
                if retry_in is None:
                    raise errors.from_response(response.status_code, body)
                delay = retry_in
            await asyncio.sleep(delay)
            attempt += 1

    async def _call(self, op: Operation[T]) -> T:
        return op.read(await self._send(op))

    async def submit(self, spec: SpecSource, *, idempotency_key: str | None = None) -> Job:
        return await self._call(ops.submit(load_spec(spec), idempotency_key=idempotency_key))

    async def get(self, job: str) -> Job:
        return await self._call(ops.get(job))

    async def list(
        self, *, status: StatusFilter = None, page_size: int = 100
    ) -> AsyncIterator[Job]:
        cursor: str | None = None
        while True:
            page = await self._call(ops.page(status=status, cursor=cursor, limit=page_size))
            for item in page.items:
                yield item
            cursor = page.next_cursor
            if not cursor:
                return

    async def cancel(self, job: str) -> Job:
        return await self._call(ops.cancel(job))

    async def attempts(self, job: str) -> builtins.list[JobAttempt]:
        return await self._call(ops.attempts(job))

    async def events(self, job: str) -> builtins.list[JobEvent]:
        return await self._call(ops.events(job))

    async def wait(
        self,
        job: str,
        *,
        timeout: float | None = None,
        poll: float = 2.0,
        on_progress: Callable[[Job], None | Awaitable[None]] | None = None,
    ) -> Job:
        """As `Client.wait`: `on_progress` (which may be async) on the first poll and on each
        change."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last: tuple[object, ...] | None = None
        while True:
            current = await self.get(job)
            if on_progress is not None and _seen(current) != last:
                last = _seen(current)
                result = on_progress(current)
                if isinstance(result, Awaitable):
                    await result
            pause = self._wait_pause(current, deadline=deadline, timeout=timeout, poll=poll)
            if pause is None:
                return current
            await asyncio.sleep(pause)

    async def logs(self, job: str, *, tail: int | None = None) -> str:
        return await self._call(ops.logs(job, tail=tail))

    async def follow_logs(self, job: str, *, tail: int | None = None) -> AsyncIterator[str]:
        """Chunks of the job's log as they are written (`?follow=true`)."""
        response = await self._send(
            ops.logs(job, follow=True, tail=tail), stream=True, timeout=self._follow_timeout()
        )
        try:
            async for chunk in response.aiter_text():
                yield chunk
        except httpx.TransportError as error:
            raise self._connection_failed(self.url, error) from error
        finally:
            await response.aclose()

    async def estimate(self, spec: SpecSource) -> Estimate:
        return await self._call(ops.estimate(load_spec(spec)))

    async def usage(
        self,
        *,
        from_: datetime | str | None = None,
        to: datetime | str | None = None,
        group_by: UsageGroupBy | str = UsageGroupBy.TEAM,
    ) -> UsageReport:
        return await self._call(ops.usage(from_=from_, to=to, group_by=group_by))

    async def budget(self) -> Budget:
        """The token's team's budget this calendar month: cap, spent, held and remaining."""
        return await self._call(ops.budget())

    async def deployment(self) -> Deployment:
        """What runs the jobs: with the local launcher, placements and costs are simulated."""
        return await self._call(ops.deployment())
