"""The verdict decide() and the quote's simulation both ask (api.placement.verdict), and the
simulated run's state (api.placement.quote._Run)."""

from __future__ import annotations

from api.placement.options import Market
from api.placement.quote import _Run
from api.placement.situation import situation
from api.placement.slack import Choice
from api.placement.verdict import Hold, Moment, moment, ruling
from tests.placement.test_policy import NOW, snap
from tests.placement.test_standby import on_demand


def test_without_a_deadline_a_held_standby_is_kept_where_a_new_one_would_not_be_held() -> None:
    """Its start is spent once held: only a new one must beat the move to spot it replaces."""
    job = on_demand(deadline=None)
    sit = situation(Market(snap([job], standby=True)), job, NOW)
    assert sit.spot is not None
    assert ruling(sit).verdict.choice is Choice.SPOT
    assert ruling(sit).standby is None  # the move is cheaper (the shipped pools outlive it)
    assert ruling(sit, held=True).standby is Hold.SPOT_BACK


def test_the_verdict_at_another_moment_is_the_rule_on_that_moment() -> None:
    """The simulation's moments go through the same verdict: the job on-demand with its deadline
    near, where the same job with time to spare would go back to spot."""
    job = on_demand(5.0, deadline=40)
    sit = situation(Market(snap([job], standby=True)), job, NOW)
    now = moment(sit)
    assert now.on is Choice.ON_DEMAND and ruling(sit, now).verdict.choice is Choice.SPOT
    assert ruling(sit, now).standby is Hold.SPOT_BACK
    assert sit.hours_left is not None and sit.on_demand is not None
    late = now._replace(hours_left=now.work * 1.01)
    assert ruling(sit, late).verdict.choice is Choice.ON_DEMAND
    assert ruling(sit, late).standby is None  # no room to keep the fallback through a handover
    waiting = Moment(
        hours_left=now.hours_left,
        work=now.work,
        spot_work=now.spot_work,
        on=Choice.WAIT,
        changeover_left=0.0,
        on_hours=float("inf"),
    )
    assert ruling(sit, waiting).standby is None  # nothing on on-demand to hold one beside


def test_a_simulated_preemption_gives_back_the_work_since_the_last_checkpoint() -> None:
    run = _Run(work=10.0, available=True, until_flip=5.0)
    run.move(Choice.SPOT, 0.5)
    assert (run.on, run.changeover, run.started) == (Choice.SPOT, 0.5, 0.0)
    done = run.run_for(2.5, price=1.0, overhead=1.0, pace=1.0, tau=1.5)
    assert not done and run.work == 8.0 and run.changeover == 0.0
    assert run.since_ckpt == 0.5  # 2 h of work, checkpoints every 1.5 h
    assert not run.advance(2.5)
    run.preempt(run.since_ckpt, total_work=10.0)
    assert (run.on, run.work, run.since_ckpt) == (Choice.WAIT, 8.5, 0.0)
    assert (run.cost, run.billed, run.spot_hours, run.t) == (2.5, 2.5, 2.5, 2.5)


def test_a_standby_hands_over_with_no_changeover_left() -> None:
    run = _Run(work=10.0, available=True, until_flip=5.0)
    run.move(Choice.ON_DEMAND, 0.5)
    run.hold(0.6)
    run.bill_standby(0.6, price=1.0)
    assert run.held == 0.0 and run.spot_hours == 0.6
    run.advance(0.6)
    run.hand_over()
    assert (run.on, run.changeover, run.started, run.held) == (Choice.SPOT, 0.0, 0.6, None)
