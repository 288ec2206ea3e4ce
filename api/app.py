"""The FastAPI application. Composition roots (worker.api_app in production, worker.standalone,
api.main without logs) call `create_app`."""

from __future__ import annotations

import logging
from collections.abc import Callable

from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from api import deployment, health, metrics
from api.admission import Admission as JobAdmission
from api.artifacts import endpoints as artifacts
from api.auth import PrincipalCache
from api.budgets import endpoints as budgets
from api.catalog import endpoints as catalog
from api.dashboard import endpoints as dashboard
from api.database import make_engine, make_session_factory
from api.estimates import endpoints as estimates
from api.http import AdminOnly, Admission, RequestBody, install_error_handlers
from api.jobs import endpoints as jobs
from api.jobs.service import AdmissionCheck
from api.logs import endpoints as job_logs
from api.logs.reader import LogReader
from api.openapi import install_openapi, operation_id
from api.reservations import endpoints as reservations
from api.settings import Settings, get_settings
from api.team_places import TeamPlaces
from api.teams import endpoints as teams
from api.tokens import endpoints as tokens
from api.usage import endpoints as usage

log = logging.getLogger(__name__)

# Called after a commit with (task, job_id): "look now". The database decides; a lost nudge
# only delays work until the next periodic tick.
Nudge = Callable[[str, str], None]


def _no_nudge(task: str, job_id: str) -> None:
    return None


def create_app(
    settings: Settings | None = None,
    *,
    session_factory: sessionmaker[Session] | None = None,
    nudge: Nudge | None = None,
    admission: AdmissionCheck | None = None,
    logs: LogReader | None = None,
) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(
        title="gpujobs",
        version="0.1.0",
        summary="Run GPU training jobs on the cheapest capacity that meets their deadline.",
        docs_url=None,  # served from the package by install_openapi: no CDN
        redoc_url=None,
        generate_unique_id_function=operation_id,
    )
    app.state.settings = settings
    app.state.session_factory = session_factory or make_session_factory(make_engine(settings))
    app.state.nudge = nudge or celery_nudge(settings) or _no_nudge
    # Quoted with this app's settings (restart time): the scheduler quotes with the same.
    app.state.admission = admission if admission is not None else JobAdmission(settings=settings)
    app.state.logs = logs
    app.state.log_followers = TeamPlaces(
        limit=settings.log_followers_per_team,
        refusal="this team already follows {limit} log streams; close one or read without "
        "follow=true",
    )
    app.state.estimates = TeamPlaces(
        limit=settings.estimates_per_team,
        refusal="this team already has {limit} estimates computing; retry once one is answered",
    )
    app.state.principals = PrincipalCache(settings.auth_cache_s)
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(deployment.router)
    app.include_router(jobs.router)
    app.include_router(job_logs.router)
    app.include_router(artifacts.router)
    app.include_router(usage.router)
    app.include_router(dashboard.router)
    app.include_router(metrics.router)
    app.include_router(catalog.router)
    app.include_router(estimates.router)
    app.include_router(reservations.router)
    app.include_router(budgets.router)
    app.include_router(teams.router)
    app.include_router(tokens.router)
    install_openapi(app)
    # The last added runs first: a request's body is in before it waits for admission, and an
    # admin route's caller is checked once it is admitted, before the body is looked at.
    app.add_middleware(AdminOnly)
    app.add_middleware(
        Admission,
        limit=settings.api_concurrency,
        wait_s=settings.api_queue_wait_s,
        exempt=frozenset({"/healthz"}),
    )
    app.add_middleware(
        RequestBody, max_bytes=settings.max_body_bytes, timeout_s=settings.api_body_timeout_s
    )
    app.add_middleware(metrics.RequestMetrics)
    return app


def celery_nudge(settings: Settings) -> Nudge | None:
    """Nudge the worker by task name, so `api` never imports `worker`."""
    if not settings.broker_url:
        return None
    from celery import Celery

    client = Celery("gpujobs-api", broker=settings.broker_url)

    def nudge(task: str, job_id: str) -> None:
        try:
            client.send_task(f"gpujobs.{task}", kwargs={"job_id": job_id}, retry=False)
        except Exception:  # the next beat tick picks the job up anyway
            log.warning("could not nudge the worker (%s %s)", task, job_id, exc_info=True)

    return nudge
