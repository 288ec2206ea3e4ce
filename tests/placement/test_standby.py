"""decide()'s make-before-break: a standby on spot beside a job running on on-demand, held where
the rule would move the job to spot or where one pays for itself (api.placement.standby)."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta

from api.placement import Current, JobState, Migrate, Standby, Withdraw, decide
from api.placement.options import Market
from api.placement.situation import situation
from api.placement.slack import Choice, SlackView
from api.placement.standby import keeps_fallback, standby_beats_move, standby_pays
from api.placement.verdict import ruling
from api.pricing.preemption import PreemptionPrior
from gpujobs.spec import CapacityType
from tests.placement.test_policy import NOW, OFFERS, job, snap

OD = next(o for o in OFFERS if o.zone == "us-west-2b")


def on_demand(hours_left_of_work: float = 5.0, *, deadline: float | None = 40) -> JobState:
    base = job(1, hours=10, deadline=deadline)
    return replace(
        base,
        remaining_hours=hours_left_of_work,
        state="running",
        current=Current(OD.key, CapacityType.ON_DEMAND, NOW - timedelta(hours=1)),
    )


def test_where_the_rule_would_move_to_spot_a_standby_is_held_instead() -> None:
    (d,) = decide(snap([on_demand()], standby=True))
    assert isinstance(d, Standby)
    assert d.to.plan.capacity_type == "spot" and d.to.plan.offer.zone == "us-east-1b"
    assert d.reason.startswith("spot is back")
    # Without the launcher's standby, the move stops on-demand first, as before.
    (moved,) = decide(snap([on_demand()]))
    assert isinstance(moved, Migrate)


def test_a_job_holding_a_standby_is_left_to_its_handover() -> None:
    held = replace(
        on_demand(), standby=Current(OFFERS[1].key, CapacityType.SPOT, NOW - timedelta(minutes=1))
    )
    assert decide(snap([held], standby=True)) == []
    assert decide(snap([held])) == []  # not migrated either: the handover moves it


def test_a_held_standby_the_rule_would_no_longer_hold_is_withdrawn() -> None:
    """Judged again each pass by the rule that held it, on its own offer: kept while the rule
    would still hold it, withdrawn (on-demand trains on) once it would not."""
    (first,) = decide(snap([on_demand(9.0, deadline=9.3)], standby=True))
    assert isinstance(first, Standby)  # it pays: held
    spot = first.to.plan.offer.key
    since = NOW - timedelta(minutes=1)

    def holding(work: float, deadline: float) -> JobState:
        held = Current(spot, CapacityType.SPOT, since, attempt_id="standby-1")
        return replace(on_demand(work, deadline=deadline), standby=held)

    assert decide(snap([holding(9.0, 9.3)], standby=True)) == []  # still wanted: kept
    # The trainer measured a slower rate: a restart back onto on-demand after a handover would
    # no longer fit, so leaving on-demand could not be undone in time.
    (d,) = decide(snap([holding(9.0, 9.2)], standby=True))
    assert isinstance(d, Withdraw) and "fallback to on-demand" in d.reason
    assert "the deadline is now too near" in d.reason  # what changed since it was held
    assert d.attempt_id == "standby-1"  # the standby judged, not whichever is open later
    # Being stopped already, or its handover begun: nothing to decide.
    stopping = replace(holding(9.0, 9.2).standby, stopping=True)
    assert decide(snap([replace(holding(9.0, 9.2), standby=stopping)], standby=True)) == []
    # Its pool refused a new instance a moment ago: that is news for new instances only (the
    # standby holds its own capacity, or shows it has none), so it is not judged on it.
    zone, instance = first.to.plan.offer.zone, first.to.plan.offer.instance_type
    out = frozenset({(zone, instance, CapacityType.SPOT)})
    assert decide(snap([holding(9.0, 9.2)], standby=True, unavailable=out)) == []
    # Nearly done: nothing left that a spot run would save.
    (d,) = decide(snap([holding(0.05, 9.3)], standby=True))
    assert isinstance(d, Withdraw) and d.reason.startswith("it no longer pays for itself")
    # A standby on an offer the market no longer shows is left to show for itself.
    gone = replace(holding(9.0, 9.2), standby=Current("nowhere/x/spot", CapacityType.SPOT, since))
    assert decide(snap([gone], standby=True)) == []


def test_a_held_standby_is_judged_on_its_own_pool_not_on_the_best_one() -> None:
    """Spot is back in the cheapest pool, where the rule would move the job; the standby is held
    in another whose learned lifetime has since fallen below what pays: withdrawn."""
    (best,) = decide(snap([on_demand()], standby=True))
    assert isinstance(best, Standby) and best.reason.startswith("spot is back")
    other = next(o for o in OFFERS if o.spot_price and o.key != best.to.plan.offer.key)
    held = Current(other.key, CapacityType.SPOT, NOW, attempt_id="standby-1")
    poor = PreemptionPrior(alpha=50.0, beta=1.0, mtta_hours=1.0, availability=0.5)  # 1.2 min
    rates = {(other.zone, other.instance_type): poor}
    (d,) = decide(snap([replace(on_demand(), standby=held)], standby=True, rates=rates))
    assert isinstance(d, Withdraw) and d.reason.startswith("it no longer pays for itself")
    # The same pool healthy: kept.
    assert decide(snap([replace(on_demand(), standby=held)], standby=True)) == []


def test_a_standby_pays_for_itself_where_the_rule_keeps_on_demand() -> None:
    """Little slack: the rule keeps on-demand (a move would spend a restart it cannot afford),
    but a standby spends its changeover while on-demand trains; it is held while the fallback
    to on-demand still fits after one more step."""
    tight = on_demand(9.0, deadline=9.3)
    assert decide(snap([tight])) == []  # the rule alone stays on on-demand
    (d,) = decide(snap([tight], standby=True))
    assert isinstance(d, Standby) and d.reason.startswith("a standby on spot pays for itself")
    # Held beside on-demand, it says why on-demand stays: the two do not read as a reversal.
    assert "(on-demand stays: " in d.reason, d.reason
    # No room for a restart back onto on-demand after the handover: none.
    assert decide(snap([on_demand(9.0, deadline=9.2)], standby=True)) == []


def test_spot_only_or_no_spot_offer_holds_no_standby() -> None:
    no_spot = frozenset((o.zone, o.instance_type, CapacityType.SPOT) for o in OFFERS)
    assert decide(snap([on_demand()], standby=True, unavailable=no_spot)) == []


def test_a_standby_pays_when_its_expected_run_saves_more_than_its_overlap() -> None:
    terms = {"work_left": 10.0, "restart": 0.2, "step": 0.05, "price_ratio": 3.0}
    assert standby_pays(lifetime=math.inf, **terms)
    assert standby_pays(lifetime=5.0, **terms)
    assert not standby_pays(lifetime=0.1, **terms)  # preempted before its handover, likely
    assert not standby_pays(lifetime=5.0, **{**terms, "price_ratio": 1.0})
    # at the end of the work there is nothing left to save
    assert not standby_pays(lifetime=5.0, **{**terms, "work_left": 0.1})


def test_the_fallback_must_fit_after_the_handover_and_one_more_step() -> None:
    def view(hours_left: float) -> SlackView:
        return SlackView(
            hours_left=hours_left,
            work_left=5.0,
            on=Choice.ON_DEMAND,
            changeover_left=0.0,
            spot_available=True,
            restart_hours=0.25,
            step_hours=0.05,
            initial_slack=10.0,
            window_hours=30.0,
            spot_lifetime_hours=5.0,
            price_ratio=3.0,
        )

    assert keeps_fallback(view(5.30))
    assert not keeps_fallback(view(5.29))


def test_without_a_deadline_the_move_is_cheaper_unless_the_pool_goes_during_it() -> None:
    (d,) = decide(snap([on_demand(deadline=None)], standby=True))
    assert isinstance(d, Migrate)  # the shipped priors' pools outlive a changeover many times
    terms = {"restart": 0.2, "step": 0.02, "price_ratio": 3.0}
    assert not standby_beats_move(lifetime=20.0, **terms)
    assert standby_beats_move(lifetime=0.1, **terms)  # gone before most changeovers end
    assert not standby_beats_move(lifetime=2.0, **terms)


def test_a_job_handed_over_to_spot_is_seen_with_no_changeover_left() -> None:
    """The spot attempt a handover promoted spent its restart beside on-demand: decide() sees
    it training at once (warm), not restarting, which is what keeps the safety net from sending
    it straight back to on-demand with just the slack a handover keeps."""
    spot = OFFERS[1]
    warm = Current(spot.key, CapacityType.SPOT, NOW - timedelta(seconds=30), warm=True)
    handed = replace(on_demand(9.0, deadline=9.3), current=warm)
    view = ruling(situation(Market(snap([handed])), handed, NOW)).view
    assert view is not None and view.changeover_left == 0.0
    cold = replace(handed, current=replace(warm, warm=False))
    view = ruling(situation(Market(snap([cold])), cold, NOW)).view
    assert view is not None and view.changeover_left > 0.15  # restart (0.2 h) less 30 s
