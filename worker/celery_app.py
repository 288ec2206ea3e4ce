"""Celery: beat ticks the scheduling and reconciling passes; the API nudges them by name.

    celery -A worker.celery_app worker     celery -A worker.celery_app beat

The database decides: a task only says "look now", so duplicates, retries and lost messages
are harmless, and beat sends the next one within a tick. So tasks are acknowledged on receipt:
a broker restart then leaves no unacknowledged messages for kombu to restore, the step in which
its Redis transport can fail to reconnect and stop the worker.
"""

from __future__ import annotations

from functools import lru_cache

from celery import Celery
from celery.signals import worker_ready, worker_shutdown

from api import metrics
from api.settings import get_settings
from worker.control import ControlPlane, build_control_plane, drain_on_shutdown
from worker.reconciler import reconcile_once
from worker.scheduler import schedule_once

settings = get_settings()
app = Celery("gpujobs", broker=settings.broker_url or "redis://127.0.0.1:6379/0")
app.conf.update(
    task_acks_late=False,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    # A pass older than a few ticks is stale: the next tick does the same work.
    task_default_expires=max(30.0, 5 * settings.schedule_interval_s),
    beat_schedule={
        "schedule": {"task": "gpujobs.schedule", "schedule": settings.schedule_interval_s},
        "reconcile": {"task": "gpujobs.reconcile", "schedule": settings.reconcile_interval_s},
    },
)


@worker_ready.connect
def _serve_metrics(**_: object) -> None:
    # The worker's counters (decisions, preemptions, dollars) live in this process.
    if settings.worker_metrics_port:
        metrics.serve(settings.worker_metrics_port, addr=settings.host)


@worker_shutdown.connect
def _drain_trainers(**_: object) -> None:
    drain_on_shutdown(get_settings())


@lru_cache
def control_plane() -> ControlPlane:
    return build_control_plane(get_settings())


@app.task(name="gpujobs.schedule")
def schedule(job_id: str | None = None) -> int:
    return len(schedule_once(control_plane()).placed)


@app.task(name="gpujobs.reconcile")
def reconcile(job_id: str | None = None) -> int:
    return reconcile_once(control_plane())
