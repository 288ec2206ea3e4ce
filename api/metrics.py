"""Prometheus metrics: `GET /metrics`, request latency middleware, and the scheduler's hooks.

The control loop records what it does with three calls, cheap enough for any hot path:

    from api import metrics
    metrics.record_decision("place", seconds)   # kind: place | defer | reject | migrate ...
    metrics.record_preemption()
    metrics.record_dollars(cost_usd)            # when an attempt closes

Counters live in this process. The embedded default (one process) exposes them on the API's
`/metrics`; a separate worker process exposes its own with `serve(port)`.
Jobs by status are read from the database at scrape time, so every API replica agrees.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from fastapi import APIRouter, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.jobs import repository
from gpujobs.resources import JobStatus

REGISTRY = CollectorRegistry(auto_describe=True)

DECISIONS = Counter(
    "gpujobs_scheduling_decisions",
    "Scheduling decisions made, by kind.",
    ["kind"],
    registry=REGISTRY,
)
DECISION_SECONDS = Histogram(
    "gpujobs_scheduling_decision_seconds",
    "Time to reach one scheduling decision, by kind.",
    ["kind"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)
PREEMPTIONS = Counter("gpujobs_preemptions", "Spot preemptions observed.", registry=REGISTRY)
DOLLARS = Counter(
    "gpujobs_dollars_accrued", "USD accrued by attempts as they close.", registry=REGISTRY
)
REQUEST_SECONDS = Histogram(
    "gpujobs_http_request_duration_seconds",
    "API request latency, by route template, method and status.",
    ["route", "method", "status"],
    registry=REGISTRY,
)


def record_decision(kind: str, seconds: float) -> None:
    DECISIONS.labels(kind=kind).inc()
    DECISION_SECONDS.labels(kind=kind).observe(max(0.0, seconds))


def record_preemption(count: int = 1) -> None:
    PREEMPTIONS.inc(count)


def record_dollars(amount: float) -> None:
    if amount > 0:
        DOLLARS.inc(amount)


def serve(port: int, addr: str = "127.0.0.1") -> None:
    """Expose this process's counters on their own port (for a worker outside the API)."""
    start_http_server(port, addr=addr, registry=REGISTRY)


class JobsByStatus(Collector):
    """A gauge read from the database at scrape time."""

    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self.session_factory = session_factory

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily("gpujobs_jobs", "Jobs by status, now.", labels=["status"])
        with self.session_factory() as session:
            counts = repository.counts_by_status(session)
        for status in JobStatus:
            gauge.add_metric([status.value], counts.get(status.value, 0))
        yield gauge


def exposition(session_factory: sessionmaker[Session]) -> bytes:
    scrape = CollectorRegistry(auto_describe=False)
    scrape.register(JobsByStatus(session_factory))
    return generate_latest(scrape) + generate_latest(REGISTRY)


router = APIRouter(tags=["metrics"])


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    return Response(
        content=exposition(request.app.state.session_factory), media_type=CONTENT_TYPE_LATEST
    )


METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RequestMetrics:
    """Observe every HTTP request's latency, labelled by route template (never the raw path)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope["method"] if scope["method"] in METHODS else "OTHER"
            REQUEST_SECONDS.labels(route=route, method=method, status=str(status)).observe(
                time.perf_counter() - started
            )
