"""The quote simulates the policy as it will run, not one option to the end."""

from __future__ import annotations

import random
import statistics
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from api.placement import Snapshot, estimate
from api.placement.options import Market, Option, first
from api.placement.quote import RUNS, SEED, Quote, Runs, _Sim, hold_of, likely, quote
from api.placement.situation import Situation
from api.placement.snapshot import JobState, prospective
from api.pricing.catalog import default_catalog
from api.pricing.cost_model import Risk
from api.pricing.offers import Offer
from api.pricing.preemption import PreemptionPrior, Priors, default_priors
from gpujobs.spec import CapacityType, JobSpec

NOW = datetime(2026, 1, 1, tzinfo=UTC)
OFFER = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", "V100", 1, 16.0, 8, 61, 3.0, 1.0)


def quote_of(
    job: JobState,
    *,
    spot: Option | None,
    on_demand: Option | None,
    reserved: Option | None,
    spot_available_now: bool,
    restart_hours: float,
    hours_left: float | None,
    step_hours: float | None = None,
) -> Quote | None:
    """The quote of a situation with these options (the pool simulated is `spot`)."""
    sit = Situation(
        job=job,
        now=NOW,
        hours_left=hours_left,
        restart_hours=restart_hours,
        step_hours=step_hours,
        spot=spot,
        pool=spot,
        on_demand=on_demand,
    )
    return quote(sit, reserved=reserved, spot_available_now=spot_available_now)


def spec(hours: float, deadline: float | None, **resources: object) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": "q",
            "trainer": {"steps": 1000},
            "resources": resources or {"gpu_models": ["V100"]},
            "estimated_hours": hours,
            "deadline_hours": deadline,
        }
    )


def options(rate: float) -> tuple[Option, Option]:
    spot = Option(OFFER, CapacityType.SPOT, 1.0, Risk(preemption_rate=rate, mtta_hours=1.0))
    od = Option(OFFER, CapacityType.ON_DEMAND, 3.0, Risk())
    return spot, od


def test_without_preemptions_the_quote_is_the_plain_run() -> None:
    job = prospective(spec(10, None), team="t", team_name="t", now=NOW)
    spot, od = options(0.0)
    q = quote_of(
        job,
        spot=spot,
        on_demand=od,
        reserved=None,
        spot_available_now=True,
        restart_hours=0.2,
        hours_left=None,
    )
    assert q is not None
    assert q.expected_cost == pytest.approx(1.0 * (10 + 0.2), rel=1e-3)
    assert q.hold_cost == pytest.approx(q.expected_cost) and q.p_meet_deadline == 1.0


def test_a_deadline_with_no_slack_is_quoted_on_demand() -> None:
    job = prospective(spec(10, 10.3), team="t", team_name="t", now=NOW)
    spot, od = options(0.5)
    q = quote_of(
        job,
        spot=spot,
        on_demand=od,
        reserved=None,
        spot_available_now=True,
        restart_hours=0.2,
        hours_left=10.3,
    )
    assert q is not None and q.spot_share == 0.0
    assert q.expected_cost == pytest.approx(3.0 * 10.2, rel=1e-3) and q.p_meet_deadline == 1.0


def test_the_quote_is_deterministic_and_its_hold_is_a_high_percentile() -> None:
    job = prospective(spec(20, 30), team="t", team_name="t", now=NOW)
    spot, od = options(0.3)

    def run() -> object:
        return quote_of(
            job,
            spot=spot,
            on_demand=od,
            reserved=None,
            spot_available_now=True,
            restart_hours=0.2,
            hours_left=30.0,
        )

    first, again = run(), run()
    assert first == again and isinstance(first, Quote)
    assert first.hold_cost >= first.expected_cost
    # the likely cost is likely() of the same runs (quote()'s seed and count)
    sit = Situation(
        job=job, now=NOW, hours_left=30.0, restart_hours=0.2, step_hours=None, spot=spot,
        pool=spot, on_demand=od,
    )  # fmt: skip
    rng, sim = random.Random(SEED), _Sim(sit)
    costs = sorted(sim.run(True, rng)[0] for _ in range(RUNS))
    assert first.typical_cost == likely(costs) < statistics.median(costs)
    assert 0 < first.spot_share < 1  # preemptions send part of it to on-demand
    assert first.p_meet_deadline == 1.0  # the slack rule's safety net


def test_a_gang_that_spot_cannot_finish_in_time_is_quoted_with_its_on_demand_fallback() -> None:
    """Measured: 8 x H100, 72 h in 96 h: $958.70 recorded (spot to the end, P(meet) 0); about
    $3.5k once the deadline forces on-demand. Budgets used the $958.70."""
    job = prospective(
        spec(72, 96, gpu_models=["H100"], gpus_per_node=8), team="t", team_name="t", now=NOW
    )
    world = Snapshot(now=NOW, jobs=[], offers=default_catalog().offers, priors=default_priors())
    out = estimate(world, job)
    chosen = out.plans[0].plan
    assert out.plans[0].chosen and chosen.p_meet_deadline < 0.01  # spot alone would miss it
    assert out.quote is not None and out.quote.p_meet_deadline > 0.95
    assert out.quote.expected_cost > 1.5 * chosen.expected_cost


def test_run_lengths_keep_the_pools_mean_and_burstiness() -> None:
    """The traces' run lengths vary 1.5-3 times more than a memoryless model's; the quote's
    runs reproduce the learned mean and coefficient of variation, and a run seen in progress
    lasts longer on average (a long run is the likelier one to be caught): m (1 + cv^2) / 2."""
    rng = random.Random(7)
    runs = Runs.fit(4.0, 2.5)
    fresh = [runs.fresh(rng) for _ in range(40_000)]
    mean = statistics.fmean(fresh)
    assert mean == pytest.approx(4.0, rel=0.05)
    assert statistics.pstdev(fresh) / mean == pytest.approx(2.5, rel=0.1)
    residual = statistics.fmean(runs.residual(rng) for _ in range(40_000))
    assert residual == pytest.approx(4.0 * (1 + 2.5**2) / 2, rel=0.05)
    memoryless = Runs.fit(4.0, 1.0)
    assert statistics.fmean(memoryless.residual(rng) for _ in range(20_000)) == pytest.approx(
        4.0, rel=0.05
    )


def test_a_bursty_pool_available_now_is_quoted_with_more_spot_than_a_memoryless_one() -> None:
    """Measured on the traces: with a memoryless pool a job needing 90% of its window was quoted
    55-57% spot where the replay ran 76-92% on spot (its preemptions come in bursts, and a pool
    available now is likely in one of its long runs)."""
    job = prospective(spec(43, 48), team="t", team_name="t", now=NOW)
    spot, od = options(0.2)

    def run(cv: float) -> Quote:
        bursty = replace(spot, up_cv=cv, down_cv=cv)
        q = quote_of(
            job,
            spot=bursty,
            on_demand=od,
            reserved=None,
            spot_available_now=True,
            restart_hours=0.2,
            hours_left=48.0,
        )
        assert q is not None
        return q

    memoryless, bursty = run(1.0), run(2.5)
    assert bursty.spot_share > memoryless.spot_share + 0.1
    assert bursty.p_meet_deadline == memoryless.p_meet_deadline == 1.0
    # Spread: some windows force on-demand, so the hold sits well above the expectation.
    assert bursty.expected_cost < bursty.hold_cost


def test_the_quote_decides_with_the_schedulers_reaction_time() -> None:
    """With 0.3 h of slack past one restart decide() (a step a minute) starts on spot; the quote
    used its own 0.2 h resolution on a 48 h window, so its safety net quoted on-demand."""
    prior = PreemptionPrior(alpha=1e-6, beta=48.0, mtta_hours=1.0, availability=1.0)
    world = Snapshot(
        now=NOW,
        jobs=[],
        offers=[OFFER],
        priors=Priors({}, {}, prior),
        restart_hours=0.2,
        step_hours=1 / 60,
    )
    job = prospective(spec(47.5, 48), team="t", team_name="t", now=NOW)
    out = estimate(world, job)
    assert out.decision == "place" and out.plans[0].plan.capacity_type == CapacityType.SPOT
    assert out.quote is not None and out.quote.spot_share == pytest.approx(1.0)
    assert out.quote.expected_cost == pytest.approx(1.0 * (47.5 + 0.2), rel=1e-3)


def test_the_spot_option_carries_the_pools_burstiness() -> None:
    prior = PreemptionPrior(17.0, 48.0, 2.0, 0.6, up_cv=2.9, down_cv=1.7)
    world = Snapshot(now=NOW, jobs=[], offers=[OFFER], priors=Priors({}, {}, prior))
    job = prospective(spec(10, None), team="t", team_name="t", now=NOW)
    spot = first(Market(world).spot(job))
    assert spot is not None and (spot.up_cv, spot.down_cv) == (2.9, 1.7)


def test_the_hold_is_the_90th_percentile_but_never_below_the_mean() -> None:
    """Measured in a terminal: $0.03 expected, $0.02 held. A rare costly tail (runs forced onto
    on-demand) puts the 90th percentile under the mean; holds must not undercount the spend
    a team's jobs are expected to make."""
    usual = sorted([1.0] * 95 + [100.0] * 5)
    assert hold_of(usual) == pytest.approx(5.95)  # the mean: p90 is 1.0
    spread = sorted(float(c) for c in range(1, 101))
    assert hold_of(spread) == 90.0  # the 90th percentile, above the mean (50.5)


def test_the_likely_cost_is_the_figure_nearest_the_bill_relative_to_it() -> None:
    """Runs split between riding spot ($40) and a fall to on-demand ($120): the plain median
    ($80) is near neither, and a bill of $40 is 100% off it. The likely cost minimises the
    expected |figure - bill| / bill over the runs, checked against every run's cost."""

    def error(figure: float, costs: list[float]) -> float:
        return statistics.fmean(abs(figure - c) / c for c in costs)

    split = sorted([40.0] * 45 + [80.0] * 10 + [120.0] * 45)
    assert statistics.median(split) == 80.0 and likely(split) == 40.0
    rng = random.Random(7)
    for _ in range(50):
        costs = sorted(rng.lognormvariate(4.0, rng.uniform(0.05, 1.0)) for _ in range(31))
        best = min(error(c, costs) for c in costs)
        assert error(likely(costs), costs) == pytest.approx(best, rel=1e-9)


def test_the_deadline_rule_leaves_room_for_on_demands_checkpoint_stalls() -> None:
    """examples/deadline.yaml with a process start for a restart (0.01 h): 6 h of work in 12 h,
    a checkpoint every 600 s stalling 30 s. On-demand from now ends by 6.3 h, yet the policy
    was quoted P(meet) 45%: it waited for spot until the slack left room for the work alone,
    then on on-demand the checkpoints' 5% made it late."""
    body = spec(6, 12).model_dump()
    body["trainer"]["checkpoint"] = {"every_seconds": 600}
    job = prospective(JobSpec.model_validate(body), team="t", team_name="t", now=NOW)
    spot, od = options(1 / 1.6)  # a pool preempted every 1.6 h, out for 1 h
    q = quote_of(
        job,
        spot=spot,
        on_demand=od,
        reserved=None,
        spot_available_now=True,
        restart_hours=0.01,
        hours_left=12.0,
        step_hours=1 / 1800,
    )
    assert q is not None and q.spot_share > 0
    # (a preemption in the last seconds of slack still loses the save on the notice)
    assert q.p_meet_deadline > 0.95


def test_a_standby_is_priced_where_decide_would_hold_one() -> None:
    """The quote does what decide() will: without a deadline, a standby only where it beats
    the move to spot (a pool likely to go during the changeover, api.placement.standby), billed
    beside on-demand until it takes over with no changeover left; elsewhere the move."""
    job = prospective(spec(10, None), team="t", team_name="t", now=NOW)

    def priced(rate: float, standby: bool) -> Quote:
        spot, od = options(rate)
        sit = Situation(
            job=job,
            now=NOW,
            hours_left=None,
            restart_hours=0.2,
            step_hours=1 / 60,
            spot=spot,
            pool=spot,
            on_demand=od,
            standby=standby,
        )
        q = quote(sit, reserved=None, spot_available_now=False)
        assert q is not None
        return q

    # A pool that lives 20 h: the move is cheaper, and the quote is the move's.
    assert priced(0.05, True) == priced(0.05, False)
    # One that lives 6 min, under the 12 min changeover: most moves would be lost on the way.
    plain, held = priced(10.0, False), priced(10.0, True)
    assert held.expected_cost < 0.9 * plain.expected_cost
    assert held.expected_hours < plain.expected_hours
    assert held.spot_share > 0  # the standbys' minutes are spot hours, billed


def test_the_quote_forecasts_the_whole_run_from_the_whole_window() -> None:
    """decide() judges now by recent sights (Snapshot.rates, weighed by age); the quote forecasts
    the job's whole run and reads the week alike (forecast_rates). Measured on the traces: the
    quote weighed by age overquoted (median error 0.21 against 0.12)."""
    pool = (OFFER.zone, OFFER.instance_type)
    job = prospective(spec(20, 40), team="t", team_name="t", now=NOW)
    base = Snapshot(now=NOW, jobs=[], offers=[OFFER], step_hours=1 / 60)
    split = estimate(replace(base, rates={pool: POOR}, forecast_rates={pool: GOOD}), job)
    on_good = estimate(replace(base, rates={pool: GOOD}), job)
    on_poor = estimate(replace(base, rates={pool: POOR}), job)
    assert on_good.plans != on_poor.plans  # decide() weighs the two pools differently
    assert split.quote == on_good.quote != on_poor.quote
    assert split.plans == on_poor.plans  # and reads the recent one


def test_the_quote_forecasts_the_pool_decide_picks_not_the_forecasts_favourite() -> None:
    """Two pools alike but for what they showed: lately A looked good and B poor, over the week
    the other way round. decide() picks A; the quote is A's, forecast from A's week."""
    other = replace(OFFER, zone="us-east-1b")
    a, b = (OFFER.zone, OFFER.instance_type), (other.zone, other.instance_type)
    job = prospective(spec(20, 40), team="t", team_name="t", now=NOW)
    both = Snapshot(now=NOW, jobs=[], offers=[OFFER, other], step_hours=1 / 60)
    split = estimate(
        replace(both, rates={a: GOOD, b: POOR}, forecast_rates={a: POOR, b: GOOD}), job
    )
    assert split.plans[0].chosen and split.plans[0].plan.offer.zone == OFFER.zone
    only_a = replace(both, offers=[OFFER], rates={a: POOR})
    only_b = replace(both, offers=[other], rates={b: GOOD})
    assert split.quote == estimate(only_a, job).quote != estimate(only_b, job).quote


POOR = PreemptionPrior(alpha=4.0, beta=2.0, mtta_hours=2.0, availability=0.5)
GOOD = PreemptionPrior(alpha=1.0, beta=40.0, mtta_hours=0.5, availability=0.99)
