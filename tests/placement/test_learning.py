"""pool_history: what a pool's attempts say about its preemption rate and its outages."""

from __future__ import annotations

import math
from dataclasses import astuple
from datetime import UTC, datetime, timedelta

import pytest

from api.placement.learning import SEEN_TOGETHER, PoolHistory, SpotAttempt, pool_history
from api.pricing.preemption import PreemptionPrior

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


def test_jobs_side_by_side_see_the_pool_once() -> None:
    """Three jobs ran in one pool from 0 h to 10 h, when one reclaim took them all (the
    reconciler closes each in its own pass, seconds apart): that is what one job saw, ten hours
    and one preemption, not thirty hours and three (a posterior three times as sure)."""
    one = [SpotAttempt(at(0), at(0), at(10), "preempted")]
    three = [
        SpotAttempt(
            at(0), at(0) + timedelta(seconds=k), at(10) + timedelta(seconds=20 * k), "preempted"
        )
        for k in range(3)
    ]
    for half_life in (None, timedelta(hours=12)):
        alone = pool_history(one, since=at(0), now=at(24), half_life=half_life)
        together = pool_history(three, since=at(0), now=at(24), half_life=half_life)
        assert astuple(together) == pytest.approx(astuple(alone), abs=0.02)  # the stagger
    assert alone.preemptions == pytest.approx(2 ** (-14 / 12))


def test_a_reclaims_stragglers_go_with_it() -> None:
    """The pods of one reclaim end as each saves its checkpoint within the notice, and the
    reconciler sees each on its own pass: five copies ending over two and a half minutes, each
    within the notice of the one before, are one reclaim."""
    lag = [0, 20, 60, 125, 150]
    five = [SpotAttempt(at(0), at(0), at(10) + timedelta(seconds=s), "preempted") for s in lag]
    assert pool_history(five, since=at(0), now=at(24)).preemptions == 1


def test_nodes_lost_one_by_one_count_as_the_share_of_the_pool_they_were() -> None:
    """Four jobs hold the pool for a day, and each loses its node once, at its own hour, and is
    back at once: each loss was a quarter of the pool, so the pool shows one preemption a day,
    what each job saw of it (a day's lifetime), not four (six hours)."""
    attempts = []
    for job, lost in enumerate((3, 9, 15, 21)):
        attempts += [
            SpotAttempt(at(0), at(0) + timedelta(seconds=job), at(lost), "preempted"),
            SpotAttempt(at(lost), at(lost), None, None),
        ]
    seen = pool_history(attempts, since=at(0), now=at(24))
    assert (seen.preemptions, seen.spot_hours) == (pytest.approx(1.0), pytest.approx(24.0))


def test_preemptions_apart_are_each_a_reclaim_and_hours_overlap_once() -> None:
    """A loses its node at 4 h while B runs on: half the pool then. B is lost at 8 h, all of it
    by then: one and a half preemptions over the eight hours in which the pool was watched (not
    the ten the two ran in all)."""
    attempts = [
        SpotAttempt(at(0), at(0), at(4), "preempted"),
        SpotAttempt(at(2), at(2), at(8), "preempted"),
    ]
    seen = pool_history(attempts, since=at(0), now=at(24))
    assert (seen.preemptions, seen.spot_hours) == (1.5, pytest.approx(8.0))
    # within a reclaim's notice of each other: one reclaim, all of the pool
    close = [attempts[0], SpotAttempt(at(2), at(2), at(4) + SEEN_TOGETHER, "preempted")]
    assert pool_history(close, since=at(0), now=at(24)).preemptions == 1
    # as close, but one after the other: the second run began after the first reclaim
    after = [
        attempts[0],
        SpotAttempt(at(4), at(4) + SEEN_TOGETHER / 2, at(4) + SEEN_TOGETHER, "preempted"),
    ]
    assert pool_history(after, since=at(0), now=at(24)).preemptions == 2


def test_while_another_job_runs_in_the_pool_it_has_capacity() -> None:
    """One job's refusal or preemption is no outage while another attempt holds the pool; an
    attempt that never held capacity (lost before it ran) is no sign of capacity."""
    attempts = [
        SpotAttempt(at(0), at(0), None, None),  # runs all along
        SpotAttempt(at(5), None, at(5), "no_capacity"),
        SpotAttempt(at(6), at(6), at(8), "preempted"),
    ]
    seen = pool_history(attempts, since=at(0), now=at(24))
    # the preemption took half the pool (two held it), over the day the pool was held
    assert (seen.preemptions, seen.outage_hours, seen.recoveries) == (0.5, 0.0, 0)
    assert seen.spot_hours == pytest.approx(24.0)
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


def test_with_a_half_life_older_evidence_weighs_less() -> None:
    """Each hour run, preemption, hour of outage and recovery weighs 2^(-age / half_life): a
    preemption one half-life ago counts a half, and hours run are the integral of the weight."""
    attempts = [
        SpotAttempt(at(0), at(0), at(12), "preempted"),
        SpotAttempt(at(13), None, at(13), "no_capacity"),
        SpotAttempt(at(14), at(14), None, None),
    ]
    plain = pool_history(attempts, since=at(0), now=at(24))
    aged = pool_history(attempts, since=at(0), now=at(24), half_life=timedelta(hours=12))
    assert plain == PoolHistory(1, pytest.approx(22.0), pytest.approx(1.5), 1)
    assert aged.preemptions == pytest.approx(0.5)
    per_hour = math.log(2) / 12
    weighed = (math.exp(-per_hour * 12) - math.exp(-per_hour * 24)) / per_hour
    weighed += (1 - math.exp(-per_hour * 10)) / per_hour
    assert aged.spot_hours == pytest.approx(weighed)
    outage = (math.exp(-per_hour * 10.5) - math.exp(-per_hour * 12)) / per_hour
    assert aged.outage_hours == pytest.approx(outage)
    assert aged.recoveries == pytest.approx(2 ** (-10.5 / 12))


def test_a_pool_seen_poor_long_ago_drifts_back_to_its_prior() -> None:
    """The same outage and preemptions, seen a day ago or a week ago: undecayed they weigh the
    same; with a half-life the older sight moves the prior less, so the rule tries the pool again
    (a standby is held where its learned lifetime says it pays)."""
    prior = PreemptionPrior(alpha=2.0, beta=20.0, mtta_hours=0.5, availability=0.9)

    def seen(hours_ago: float, half_life: timedelta | None) -> float:
        t = 200 - hours_ago
        attempts = [
            SpotAttempt(at(t + k), at(t + k), at(t + k + 0.5), "preempted") for k in range(4)
        ]
        history = pool_history(attempts, since=at(200 - 168), now=at(200), half_life=half_life)
        return history.posterior(prior).mean_lifetime_hours

    assert seen(24, None) == pytest.approx(seen(150, None))
    day = timedelta(hours=24)
    assert seen(24, None) < seen(24, day) < seen(150, day) < prior.mean_lifetime_hours
