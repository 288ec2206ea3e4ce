"""The rate a running attempt trains at is its windows' mean over time (api.jobs.measured_rate)."""

from __future__ import annotations

import pytest

from api.jobs.measured_rate import MEMORY_S, Rate, after

STEADY = 400.0


def steady(seconds: float = 10 * MEMORY_S) -> Rate:
    """An attempt that has trained at STEADY for `seconds`, in five-second windows."""
    rate = after(None, STEADY / 3, seconds=5.0)  # its warm-up window
    for _ in range(int(seconds // 5)):
        rate = after(rate, STEADY, seconds=5.0)
    return rate


def test_the_first_window_stands_until_the_next_replaces_it() -> None:
    """The first window holds the warm-up (compile, autotune, the first batch): it is the rate
    until the next window, and counts for nothing after it."""
    warm = after(None, 40.0, seconds=5.0)
    assert warm.samples_per_s == 40.0
    assert after(warm, STEADY, seconds=5.0).samples_per_s == pytest.approx(STEADY)


def test_one_slow_window_moves_the_rate_by_its_share_of_the_time() -> None:
    """CI, stop 29: a neighbour's start slowed one window to a tenth of the steady rate."""
    rate = after(steady(), STEADY / 10, seconds=5.0)
    assert rate.samples_per_s > STEADY / 10
    assert rate.samples_per_s > STEADY * 0.9  # a tenth, taken alone
    # Twenty seconds of them (four windows) still leave most of the rate.
    for _ in range(3):
        rate = after(rate, STEADY / 10, seconds=5.0)
    assert rate.samples_per_s > STEADY * 0.6


def test_a_lasting_change_is_believed_within_minutes() -> None:
    """The deadline's safety net counts the work left from this rate: a real slowdown must
    show in it soon, 95% within three memory spans."""
    rate = steady()
    for _ in range(int(3 * MEMORY_S // 5)):
        rate = after(rate, STEADY / 2, seconds=5.0)
    assert rate.samples_per_s - STEADY / 2 < 0.06 * (STEADY / 2)


def test_time_not_the_count_of_reports_sets_the_weight() -> None:
    """A trainer that reports five times as often moves its rate no faster."""
    often = steady()
    for _ in range(5):
        often = after(often, STEADY / 10, seconds=1.0)
    once = after(steady(), STEADY / 10, seconds=5.0)
    assert often.samples_per_s == pytest.approx(once.samples_per_s, rel=1e-2)


def test_a_long_gap_before_a_window_does_not_make_it_the_rate() -> None:
    """The window is measured by the server, from the report before: after an outage of the API
    one report covers minutes, but its rate is a few seconds of the trainer's."""
    gap = after(steady(), STEADY / 10, seconds=3600.0)
    assert gap.samples_per_s > STEADY / 3


def test_a_report_at_the_same_instant_changes_nothing() -> None:
    before = steady()
    assert after(before, STEADY / 10, seconds=0.0) == before
    assert after(before, STEADY / 10, seconds=-3.0) == before
