"""The local launcher as the settings describe it: the runtime trainers run on, the uids they
run as, the keys they get, and the simulated spot market."""

from __future__ import annotations

from pathlib import Path

from api.settings import Settings
from worker.launchers.identity import UidRange
from worker.launchers.local.launcher import LocalLauncher
from worker.launchers.local.spot_market import (
    DEFAULT_TRACE,
    SHIPPED_TRACE_START,
    RateMarket,
    SpotMarket,
    TraceMarket,
    market_origin,
)
from worker.launchers.runtime import trainer_runtime
from worker.storage_credentials import S3Credentials


def launcher_from_settings(settings: Settings) -> LocalLauncher:
    local = settings.local
    s3 = None
    if local.trainer_s3_access_key_id:
        s3 = S3Credentials(
            access_key_id=local.trainer_s3_access_key_id,
            secret_access_key=local.trainer_s3_secret_access_key,
            region=local.trainer_s3_region,
        )
    trainers = settings.make_trainer_home()
    runtime = trainer_runtime(
        trainers / "runtime",
        python=local.trainer_python,
        python_path=local.trainer_python_path,
    )
    return LocalLauncher(
        root=trainers / "attempts",
        market=market_from_settings(settings),
        notice_s=local.spot_notice_s,
        trainer_python=runtime.python,
        python_path=runtime.python_path,
        s3=s3,
        uids=UidRange(first=local.trainer_uid_first, count=local.trainer_uid_count),
        max_pids=local.trainer_max_pids,
    )


def drainer_from_settings(settings: Settings) -> LocalLauncher | None:
    """The launcher a stopping worker drains, when the operator asks (GPUJOBS_DRAIN_ON_SHUTDOWN,
    set in containers, whose trainers die with the worker): only what drain() reads, not the
    runtime or the market a launch needs."""
    local = settings.local
    if not local.drain_on_shutdown:
        return None
    return LocalLauncher(
        root=settings.trainer_home_dir() / "attempts", notice_s=local.spot_notice_s
    )


def market_from_settings(settings: Settings) -> SpotMarket | None:
    local = settings.local
    if local.spot_market == "trace":
        start = local.spot_trace_start
        if start is None:
            start = 0 if local.spot_trace else SHIPPED_TRACE_START
        return TraceMarket.from_file(
            Path(local.spot_trace) if local.spot_trace else DEFAULT_TRACE,
            time_scale=local.spot_trace_time_scale,
            t0=market_origin(settings.home),
            start=start,
        )
    if local.spot_market == "rate":
        return RateMarket(
            rate_per_hour=local.spot_preemption_rate_per_hour,
            time_scale=local.spot_trace_time_scale,
        )
    return None
