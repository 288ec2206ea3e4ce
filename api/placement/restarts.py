"""How long a new attempt takes to train: the configured restart time, raised by what this
service measured.

A restart is everything between a launch and the first step: a node to provision and an image
to pull on Kubernetes, a process to start, torch to import and the checkpoint to restore. The
deadline rule moves a job to on-demand at the last moment that still leaves one restart, so a
restart slower than the configured `restart_hours` makes that job miss its deadline, and the
quote price fewer hours than it bills. Each attempt's restart is measured at its first progress
report (from its launch, less the steps it ran before reporting, at the rate it reported), and
once enough of the last week's are known their 90th percentile raises the configured figure. It
never lowers it: an operator's figure is a floor (the restart of a pool not seen lately, a large
restore to come), and a faster measured restart only leaves slack unused.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

# Fewer than this says little about a tail: a percentile of a handful is one outlier.
MIN_MEASURED = 20
PERCENTILE = 0.9


def restart_seconds(
    *, launched_at: datetime, reported_at: datetime, steps_run: int, step_seconds: float | None
) -> float | None:
    """An attempt's restart, at its first progress report; None when the steps it ran before
    reporting cannot be taken off (no rate yet)."""
    if steps_run > 0 and not step_seconds:
        return None
    elapsed = (reported_at - launched_at).total_seconds() - steps_run * (step_seconds or 0.0)
    return max(0.0, elapsed)


def restart_hours(configured: float, measured: Sequence[float]) -> float:
    """The restart the policy prices: the configured hours, or the measured 90th percentile
    (seconds) when that is longer and enough are known."""
    if len(measured) < MIN_MEASURED:
        return configured
    ordered = sorted(measured)
    tail = ordered[min(len(ordered) - 1, int(PERCENTILE * len(ordered)))]
    return max(configured, tail / 3600.0)
