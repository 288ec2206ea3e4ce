"""The rate a running attempt trains at remembers its earlier windows (api.jobs.measured_rate)."""

from __future__ import annotations

import pytest

from api.jobs.measured_rate import smoothed

MEMORY = 36.0  # seconds: the local launcher's restart


def test_the_first_window_is_taken_as_it_is() -> None:
    assert smoothed(None, 250.0, seconds=5.0, memory_seconds=MEMORY) == 250.0


def test_a_short_slow_window_moves_the_rate_by_less_than_its_share_of_a_restart() -> None:
    rate = smoothed(400.0, 40.0, seconds=5.0, memory_seconds=MEMORY)
    assert 40.0 < rate < 400.0
    assert 400.0 - rate <= (400.0 - 40.0) * 5.0 / MEMORY  # at most the window's share


def test_a_lasting_change_is_believed() -> None:
    rate = 400.0
    for _ in range(3 * int(MEMORY) // 5):  # three restarts of five-second windows
        rate = smoothed(rate, 40.0, seconds=5.0, memory_seconds=MEMORY)
    assert rate == pytest.approx(40.0, rel=0.5)
    assert rate - 40.0 < 0.06 * (400.0 - 40.0)


def test_time_not_the_count_of_reports_sets_the_weight() -> None:
    """A trainer that reports ten times as often moves its rate no faster."""
    often = 400.0
    for _ in range(10):
        often = smoothed(often, 40.0, seconds=1.0, memory_seconds=MEMORY)
    once = smoothed(400.0, 40.0, seconds=10.0, memory_seconds=MEMORY)
    assert often == pytest.approx(once, rel=1e-9)


def test_a_window_of_no_time_changes_nothing_and_no_memory_keeps_none() -> None:
    assert smoothed(400.0, 40.0, seconds=0.0, memory_seconds=MEMORY) == 400.0
    assert smoothed(400.0, 40.0, seconds=-3.0, memory_seconds=MEMORY) == 400.0
    assert smoothed(400.0, 40.0, seconds=5.0, memory_seconds=0.0) == 40.0
