"""The control plane's composition: settings, database, launcher, catalog, clock.

Built once per process (Celery worker, beat, or the embedded standalone server) and passed to
the scheduling and reconciling steps, which are plain functions of it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from api.database import make_engine, make_session_factory
from api.models import utcnow
from api.placement.snapshot import Reservation
from api.pricing.catalog import Catalog, default_catalog
from api.pricing.preemption import Priors, default_priors
from api.settings import Settings
from worker.launchers.base import Launcher
from worker.launchers.local.spot_market import SpotMarket

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


def make_launcher(settings: Settings) -> Launcher:
    if settings.launcher == "kubernetes":
        from worker.launchers.kubernetes import KubernetesLauncher

        return KubernetesLauncher.from_settings(settings)
    from worker.launchers.environment import S3Credentials
    from worker.launchers.identity import UidRange
    from worker.launchers.local import LocalLauncher
    from worker.launchers.runtime import trainer_runtime

    s3 = None
    if settings.trainer_s3_access_key_id:
        s3 = S3Credentials(
            access_key_id=settings.trainer_s3_access_key_id,
            secret_access_key=settings.trainer_s3_secret_access_key,
            region=settings.trainer_s3_region,
        )
    trainers = settings.make_trainer_home()
    runtime = trainer_runtime(
        trainers / "runtime",
        python=settings.trainer_python,
        python_path=settings.trainer_python_path,
    )
    return LocalLauncher(
        root=trainers / "attempts",
        market=make_market(settings),
        notice_s=settings.spot_notice_s,
        trainer_python=runtime.python,
        python_path=runtime.python_path,
        s3=s3,
        uids=UidRange(first=settings.trainer_uid_first, count=settings.trainer_uid_count),
    )


# Shipped with the package (public data, see its README) so a clone needs no reference data set.
DEFAULT_TRACE = (
    Path(__file__).parent / "launchers" / "local" / "traces" / "aws-us-east-1a-p3.2xlarge.json"
)


def drain_on_shutdown(settings: Settings) -> list[str]:
    """The worker is stopping and its trainers die with it (GPUJOBS_DRAIN_ON_SHUTDOWN, set in
    containers): stop them as a spot notice would, so they checkpoint and resume later."""
    if not settings.drain_on_shutdown or settings.launcher != "local":
        return []
    from worker.launchers.local import LocalLauncher

    launcher = LocalLauncher(
        root=settings.trainer_home_dir() / "attempts", notice_s=settings.spot_notice_s
    )
    drained = launcher.drain()
    if drained:
        logger.warning("stopped %d trainer(s) to resume later: %s", len(drained), drained)
    return drained


def make_market(settings: Settings) -> SpotMarket | None:
    from worker.launchers.local.spot_market import (
        SHIPPED_TRACE_START,
        RateMarket,
        TraceMarket,
        market_origin,
    )

    if settings.spot_market == "trace":
        start = settings.spot_trace_start
        if start is None:
            start = 0 if settings.spot_trace else SHIPPED_TRACE_START
        return TraceMarket.from_file(
            Path(settings.spot_trace) if settings.spot_trace else DEFAULT_TRACE,
            time_scale=settings.spot_trace_time_scale,
            t0=market_origin(settings.home),
            start=start,
        )
    if settings.spot_market == "rate":
        return RateMarket(
            rate_per_hour=settings.spot_preemption_rate_per_hour,
            time_scale=settings.spot_trace_time_scale,
        )
    return None


def build_control_plane(
    settings: Settings, *, factory: sessionmaker[Session] | None = None
) -> ControlPlane:
    return ControlPlane(
        settings=settings,
        factory=factory or make_session_factory(make_engine(settings)),
        launcher=make_launcher(settings),
        budgets=team_budgets,
        reservations=reservation_pools,
    )


def team_budgets(session: Session, teams: list[str], now: datetime) -> Mapping[str, float | None]:
    from api.budgets.service import remaining_usd

    return {team: remaining_usd(session, team_id=team, now=now) for team in teams}


def reservation_pools(session: Session, now: datetime) -> list[Reservation]:
    from api.placement.world import with_usage

    return list(with_usage(session, now=now))
