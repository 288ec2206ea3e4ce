"""pool_history: what a pool's attempts say about its preemption rate and its outages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from api.placement.learning import PoolHistory, SpotAttempt, pool_history

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def test_a_waiting_job_probing_an_outage_counts_its_time_not_its_refusals() -> None:
    """Measured: counting each refusal as a sample of availability made a pool up 95% of the
    time look up 15%, because a waiting job retries every five minutes while spot is out. Here
    the pool runs 9.5 h, is out about 0.5 h (six refusals, the last at 9 h 55), then runs again
    at 10 h: the outage ended halfway between the last refusal and the launch that ran."""
    attempts = [SpotAttempt(at(0), at(0), at(9.5), "preempted")]
    attempts += [
        SpotAttempt(at(9.5 + k / 12), None, at(9.5 + k / 12), "no_capacity") for k in range(6)
    ]
    attempts.append(SpotAttempt(at(10), at(10), None, None))
    seen = pool_history(attempts, since=at(0), now=at(20))
    assert seen == PoolHistory(
        preemptions=1,
        spot_hours=pytest.approx(19.5),
        outage_hours=pytest.approx(11 / 24),
        recoveries=1,
    )


def test_an_outage_still_open_counts_to_when_it_was_last_seen_and_no_recovery() -> None:
    """Not to now: a pool nobody tried since would otherwise look out for days, be avoided for
    it, and never be seen back."""
    attempts = [
        SpotAttempt(at(0), at(0), at(2), "preempted"),
        SpotAttempt(at(3), None, at(3), "no_capacity"),
    ]
    seen = pool_history(attempts, since=at(0), now=at(100))
    assert (seen.outage_hours, seen.recoveries) == (pytest.approx(1.0), 0)


def test_while_another_job_runs_in_the_pool_it_has_capacity() -> None:
    """One job's refusal or preemption is no outage while another attempt holds the pool; an
    attempt that never held capacity (lost before it ran) is no sign of capacity."""
    attempts = [
        SpotAttempt(at(0), at(0), None, None),  # runs all along
        SpotAttempt(at(5), None, at(5), "no_capacity"),
        SpotAttempt(at(6), at(6), at(8), "preempted"),
    ]
    seen = pool_history(attempts, since=at(0), now=at(24))
    assert (seen.preemptions, seen.outage_hours, seen.recoveries) == (1, 0.0, 0)
    lost = [
        SpotAttempt(at(0), at(0), at(1), "preempted"),
        SpotAttempt(at(2), at(3), at(3), "lost"),
        SpotAttempt(at(4), None, at(4), "no_capacity"),
    ]
    seen = pool_history(lost, since=at(0), now=at(24))
    assert (seen.outage_hours, seen.recoveries) == (pytest.approx(3.0), 0)


def test_only_the_window_counts() -> None:
    """A long attempt that began before the window counts its hours inside it; a preemption
    and an outage before the window count nothing; an outage seen once, at its start, counts
    nothing yet."""
    attempts = [
        SpotAttempt(at(0), at(0), at(1), "preempted"),
        SpotAttempt(at(2), at(2), at(30), "preempted"),
    ]
    seen = pool_history(attempts, since=at(24), now=at(40))
    assert seen.preemptions == 1 and seen.spot_hours == pytest.approx(6.0)
    assert (seen.outage_hours, seen.recoveries) == (0.0, 0)
    assert pool_history([], since=at(0), now=at(1)).empty
