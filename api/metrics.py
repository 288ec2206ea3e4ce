"""Prometheus metrics: `GET /metrics`, request latency middleware, and the scheduler's hooks.

The control loop records what it does with three calls, cheap enough for any hot path:

    from api import metrics
    metrics.record_decision("place", seconds)   # kind: place | defer | reject | migrate ...
    metrics.record_preemption()
    metrics.record_dollars(cost_usd)            # when an attempt closes

Two audiences. Anyone who can reach `/metrics` sees the process, HTTP latency by route template,
and aggregate counts that identify no one (jobs by status, decisions, preemptions). Money and
per-team series (jobs and this month's spend by team) need `Authorization: Bearer
<GPUJOBS_METRICS_TOKEN>`; without a metrics token configured they are never exposed.

Counters live in this process. The embedded default (one process) exposes them on the API's
`/metrics`; a separate worker process exposes its own with `serve(port)`.
Jobs by status are read from the database at scrape time, so every API replica agrees.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import UTC
from typing import Annotated, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from fastapi import APIRouter, Header, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.budgets import repository as budgets
from api.budgets.spend import spent_microusd
from api.errors import Unauthorized
from api.jobs import repository
from api.models import utcnow
from api.money import MICRO, month_start
from api.settings import get_settings
from api.teams import repository as teams
from gpujobs.resources import JobStatus

# What anyone may read: nothing here names a team or a job, or counts money.
REGISTRY = CollectorRegistry(auto_describe=True)
# What only the metrics token reads.
TEAM_REGISTRY = CollectorRegistry(auto_describe=True)
if PROCESS_COLLECTOR is not None:
    ProcessCollector(registry=REGISTRY)

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
    "gpujobs_dollars_accrued", "USD accrued by attempts as they close.", registry=TEAM_REGISTRY
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


def may_read_team_series(authorization: str | None, metrics_token: str) -> bool:
    """True when the caller presents the metrics token. No header: the public part only; a wrong
    token is refused, so a misconfigured scraper is noticed rather than silently given less."""
    if not metrics_token or not authorization:
        return False
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(
        token.strip().encode(), metrics_token.encode()
    ):
        return True
    raise Unauthorized("invalid metrics token; send 'Authorization: Bearer <metrics token>'")


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


def serve(port: int, addr: str = "127.0.0.1", *, metrics_token: str | None = None) -> None:
    """Expose this process's counters on their own port (for a worker outside the API), with
    the same rule as the API's `/metrics`; the token defaults to GPUJOBS_METRICS_TOKEN."""
    if metrics_token is None:
        metrics_token = get_settings().metrics_token

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        try:
            full = may_read_team_series(environ.get("HTTP_AUTHORIZATION"), metrics_token)
        except Unauthorized as error:
            start_response("401 Unauthorized", [("Content-Type", "text/plain")])
            return [error.message.encode()]
        body = generate_latest(REGISTRY) + (generate_latest(TEAM_REGISTRY) if full else b"")
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
        return [body]

    server = make_server(addr, port, app, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()


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


class TeamSeries(Collector):
    """Per-team gauges read from the database at scrape time: for the metrics token only."""

    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self.session_factory = session_factory

    def collect(self) -> Iterator[Metric]:
        now = utcnow().astimezone(UTC)
        start = month_start(now)
        with self.session_factory() as session:
            jobs = teams.jobs_by_team_and_status(session)
            charges = budgets.charges_by_team(session, start=start, end=now)
        by_status = GaugeMetricFamily(
            "gpujobs_team_jobs", "Jobs by team and status, now.", labels=["team", "status"]
        )
        for (team, status), count in sorted(jobs.items()):
            by_status.add_metric([team, status], count)
        yield by_status
        spend = GaugeMetricFamily(
            "gpujobs_team_spend_usd",
            "USD spent this calendar month (UTC) so far, running attempts included, by team.",
            labels=["team"],
        )
        for team, team_charges in sorted(charges.items()):
            spend.add_metric([team], spent_microusd(team_charges, start=start, now=now) / MICRO)
        yield spend


def exposition(session_factory: sessionmaker[Session], *, team_series: bool = False) -> bytes:
    scrape = CollectorRegistry(auto_describe=False)
    scrape.register(JobsByStatus(session_factory))
    text = generate_latest(scrape) + generate_latest(REGISTRY)
    if team_series:
        private = CollectorRegistry(auto_describe=False)
        private.register(TeamSeries(session_factory))
        text += generate_latest(private) + generate_latest(TEAM_REGISTRY)
    return text


router = APIRouter(tags=["metrics"])


@router.get("/metrics", include_in_schema=False)
def metrics(
    request: Request,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    token = request.app.state.settings.metrics_token
    team_series = may_read_team_series(authorization, token)
    return Response(
        content=exposition(request.app.state.session_factory, team_series=team_series),
        media_type=CONTENT_TYPE_LATEST,
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
