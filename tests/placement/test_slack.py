"""The deadline rule's reserve comes from the job's own quantities, not fitted constants."""

from dataclasses import replace

import pytest

from api.placement.slack import Choice, SlackView, choose, reserve


def view(**kw: object) -> SlackView:
    base = SlackView(
        hours_left=48.0,
        work_left=38.4,
        on=Choice.WAIT,
        changeover_left=0.0,
        spot_available=False,
        restart_hours=0.2,
        step_hours=195 / 3600,
        initial_slack=48.0 - 38.4 - 0.2,
        window_hours=48.0,
        spot_lifetime_hours=2.7,
        price_ratio=3.06 / 0.9731,
        spot_outage_hours=1.8,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_reserve_is_one_restart_per_outage_still_to_come() -> None:
    v = view()
    assert reserve(v) == pytest.approx(0.2 * 38.4 / 2.7)
    # a longer changeover or a pool that preempts more often keeps more slack back
    assert reserve(view(restart_hours=0.5)) > reserve(v)
    assert reserve(view(spot_lifetime_hours=1.5)) > reserve(v)
    # less work left, fewer outages to cover
    assert reserve(view(work_left=20.0, hours_left=29.6)) < reserve(v)


def test_reserve_never_exceeds_uniform_progress() -> None:
    v = view(work_left=43.2, initial_slack=48.0 - 43.2 - 0.2, restart_hours=0.5)
    assert reserve(v) == pytest.approx(v.initial_slack)  # 0.5 * 43.2 / 2.7 is more


def test_nothing_is_kept_when_the_slack_can_wait_out_every_outage() -> None:
    # 2 h of work, 30 h of slack: about one outage of 1.8 h to come
    v = view(work_left=2.0, hours_left=32.2)
    assert reserve(v) == 0.0 and choose(v) is Choice.WAIT


def test_nothing_is_kept_for_spot_that_does_not_pay_its_restarts() -> None:
    # spot at 95% of on-demand: going back to it never repays two restarts
    assert reserve(view(price_ratio=1.0 / 0.95)) == 0.0


def test_waits_above_the_reserve_and_runs_on_demand_at_it() -> None:
    keep = reserve(view())
    above = view(hours_left=38.4 + 0.2 + keep + 1.0)
    at = view(hours_left=38.4 + 0.2 + keep)
    assert choose(above) is Choice.WAIT
    assert choose(at) is Choice.ON_DEMAND


def test_on_demand_tries_spot_again_only_once_the_pool_is_likely_back() -> None:
    """Leaving on-demand stops it before the spot launch is tried: just after leaving spot
    (out then) the pool is unlikely to be back; after a while it pays to try."""
    v = view(on=Choice.ON_DEMAND, spot_available=True, hours_left=45.0, work_left=30.0)
    assert choose(replace(v, on_hours=0.05)) is Choice.ON_DEMAND
    assert choose(replace(v, on_hours=3.0)) is Choice.SPOT


def test_a_slower_spot_gpu_progresses_less_work_per_step_in_the_safety_net() -> None:
    # Work counts hours of the on-demand GPU: a step on spot twice as slow does half a step of
    # it, so the net moves to on-demand one step sooner than at the same pace.
    v = view(on=Choice.SPOT, spot_available=True, work_left=5.0, hours_left=5.24, step_hours=0.1)
    assert choose(v) is Choice.SPOT
    assert choose(replace(v, spot_pace=2.0)) is Choice.ON_DEMAND


def test_spot_stays_where_on_demand_could_no_longer_meet_the_deadline_either() -> None:
    """A jump in the measured rate (a trainer slowed while a standby started beside it) can put a
    job running on spot, in one step, where a restart onto on-demand would miss the deadline
    too: the move cannot save it, and spot, finishing no later in expectation, still may."""
    late = view(
        on=Choice.SPOT,
        spot_available=True,
        spot_held=True,
        work_left=5.0,
        hours_left=5.1,
        step_hours=0.1,
    )
    assert late.hours_left < late.work_left + late.restart_hours
    assert choose(late) is Choice.SPOT
    # the pool judged is another than the one the job runs on: nothing known of its own
    assert choose(replace(late, spot_held=False)) is Choice.ON_DEMAND
    # on time: a spot GPU at half the pace, where on-demand after a restart still just makes it
    assert choose(replace(late, hours_left=5.24, spot_pace=2.0)) is Choice.ON_DEMAND
    # late, but spot finishes later in expectation: a slower spot GPU, or an attempt still in
    # its changeover on a pool likely to be lost before the end (a restart onto on-demand then)
    assert choose(replace(late, spot_pace=1.5)) is Choice.ON_DEMAND
    changing = replace(late, changeover_left=0.01)
    assert choose(changing) is Choice.SPOT
    assert choose(replace(changing, spot_lifetime_hours=0.5)) is Choice.ON_DEMAND
    # not running on spot (waiting, or spot gone): on-demand, the sooner start
    assert choose(replace(late, on=Choice.WAIT)) is Choice.ON_DEMAND
    assert choose(replace(late, spot_available=False)) is Choice.ON_DEMAND
