"""The control plane's composition: settings, database, launcher, catalog, clock.

Built once per process (Celery worker, beat, or the embedded standalone server) and passed to
the scheduling and reconciling steps, which are plain functions of it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from api.database import make_engine, make_session_factory
from api.models import utcnow
from api.placement.snapshot import Reservation
from api.pricing.catalog import Catalog, default_catalog
from api.pricing.preemption import Priors, default_priors
from api.settings import Settings
from worker.launchers import registry
from worker.launchers.base import Launcher, drains
from worker.storage_credentials import StorageCredentials
from worker.storage_credentials.configure import from_settings as storage_from_settings
from worker.storage_credentials.revocation import Pace

logger = logging.getLogger(__name__)

# Hooks that read team budgets and reservation usage; they come from api's budget and
# reservation services, and default to "no caps, no reservations".
BudgetsQuery = Callable[[Session, list[str], datetime], Mapping[str, float | None]]
ReservationsQuery = Callable[[Session, datetime], list[Reservation]]


def _no_budgets(session: Session, teams: list[str], now: datetime) -> Mapping[str, float | None]:
    return {}


def _no_reservations(session: Session, now: datetime) -> list[Reservation]:
    return []


@dataclass
class ControlPlane:
    settings: Settings
    factory: sessionmaker[Session]
    launcher: Launcher
    catalog: Catalog = field(default_factory=default_catalog)
    priors: Priors = field(default_factory=default_priors)
    clock: Callable[[], datetime] = utcnow
    budgets: BudgetsQuery = _no_budgets
    reservations: ReservationsQuery = _no_reservations
    # Mints each attempt's own S3 keys; None: the launcher's static trainer keys, if any.
    storage: StorageCredentials | None = None
    # When this worker last listed the holders of S3 keys, to revoke those of ended attempts.
    revocations: Pace = field(default_factory=Pace)


def drain_on_shutdown(settings: Settings) -> list[str]:
    """The worker is stopping and its trainers die with it (GPUJOBS_DRAIN_ON_SHUTDOWN, set in
    containers): stop them as a spot notice would, so they checkpoint and resume later."""
    build = registry.plugin(settings.launcher).build_to_drain
    launcher = None if build is None else build(settings)
    drainer = None if launcher is None else drains(launcher)
    if drainer is None:
        return []
    drained = drainer.drain()
    if drained:
        logger.warning("stopped %d trainer(s) to resume later: %s", len(drained), drained)
    return drained


def build_control_plane(
    settings: Settings, *, factory: sessionmaker[Session] | None = None
) -> ControlPlane:
    return ControlPlane(
        settings=settings,
        factory=factory or make_session_factory(make_engine(settings)),
        launcher=registry.make_launcher(settings),
        budgets=team_budgets,
        reservations=reservation_pools,
        storage=storage_from_settings(settings),
    )


def team_budgets(session: Session, teams: list[str], now: datetime) -> Mapping[str, float | None]:
    from api.budgets.service import remaining_usd

    return {team: remaining_usd(session, team_id=team, now=now) for team in teams}


def reservation_pools(session: Session, now: datetime) -> list[Reservation]:
    from api.placement.world import with_usage

    return list(with_usage(session, now=now))
