"""The restart time the policy prices: the configured figure, raised by measured restarts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from api.placement.restarts import MIN_MEASURED, restart_hours, restart_seconds

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def test_a_restart_is_the_time_to_the_first_step_not_to_the_first_report() -> None:
    reported = T0 + timedelta(seconds=300)
    assert restart_seconds(
        launched_at=T0, reported_at=reported, steps_run=40, step_seconds=0.5
    ) == pytest.approx(280.0)
    assert (
        restart_seconds(launched_at=T0, reported_at=reported, steps_run=0, step_seconds=None) == 300
    )
    # steps ran at a rate not reported: their time cannot be taken off
    assert (
        restart_seconds(launched_at=T0, reported_at=reported, steps_run=5, step_seconds=None)
        is None
    )


def test_the_measured_tail_raises_the_configured_restart_never_lowers_it() -> None:
    slow = [600.0] * (MIN_MEASURED - 3) + [1800.0] * 3  # 15% of restarts take half an hour
    assert restart_hours(0.2, slow) == pytest.approx(0.5)
    assert restart_hours(0.2, slow[1:]) == 0.2  # too few to say what the tail is
    assert restart_hours(0.2, [60.0] * 100) == 0.2  # faster than configured: the floor stays
    assert restart_hours(0.01, [60.0] * 100) == pytest.approx(60 / 3600)
