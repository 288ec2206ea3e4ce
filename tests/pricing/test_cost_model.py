import math

import pytest

from api.pricing.cost_model import Risk, checkpoint_seconds, evaluate, young_daly_interval
from api.pricing.preemption import PreemptionPrior, default_priors, posterior_rate
from gpujobs.spec import CapacityType


def spot(rate: float, deadline: float | None = 30.0, **kw: float) -> float:
    out = evaluate(
        work_hours=20.0,
        price_per_hour=1.0,
        capacity=CapacityType.SPOT,
        risk=Risk(preemption_rate=rate, mtta_hours=1.0, **kw),
        hours_to_deadline=deadline,
    )
    return out.expected_cost, out.expected_hours, out.p_meet_deadline


def test_cost_finish_and_risk_grow_with_the_preemption_rate() -> None:
    rates = [0.0, 0.05, 0.2, 0.5, 1.0]
    results = [spot(r) for r in rates]
    for (c1, h1, p1), (c2, h2, p2) in zip(results, results[1:], strict=False):
        assert c2 >= c1 and h2 >= h1 and p2 <= p1 + 1e-12


def test_losing_half_an_interval_costs_more_than_checkpointing_on_notice() -> None:
    with_notice = spot(0.3, checkpoint_on_notice=True)[0]
    without = spot(0.3, checkpoint_on_notice=False)[0]
    assert without > with_notice


def test_young_daly_formula() -> None:
    # C = 60 s, rate 1/h -> MTBF 3600 s -> sqrt(2 * 60 * 3600) = 657.27 s
    assert young_daly_interval(60, 1.0) == pytest.approx(math.sqrt(2 * 60 * 3600))
    assert young_daly_interval(60, 4.0) < young_daly_interval(60, 1.0)
    assert young_daly_interval(60, 0.0) == 24 * 3600
    assert young_daly_interval(1e-6, 100.0) == 60  # clamped


def test_reserved_is_free_at_the_margin_and_on_demand_is_certain() -> None:
    common = dict(work_hours=10.0, price_per_hour=5.0, risk=Risk(), hours_to_deadline=11.0)
    reserved = evaluate(capacity=CapacityType.RESERVED, **common)
    od = evaluate(capacity=CapacityType.ON_DEMAND, **common)
    assert reserved.expected_cost == 0.0
    assert od.expected_cost > 50.0 and od.p_meet_deadline == 1.0
    late = evaluate(capacity=CapacityType.ON_DEMAND, **{**common, "hours_to_deadline": 9.0})
    assert late.p_meet_deadline == 0.0


def test_p_meet_deadline_is_a_probability_increasing_with_time() -> None:
    ps = [spot(0.3, deadline=d)[2] for d in (19.0, 21.0, 23.0, 26.0, 40.0, 200.0)]
    assert all(0.0 <= p <= 1.0 for p in ps)
    assert ps == sorted(ps) and ps[0] == 0.0 and ps[-1] == pytest.approx(1.0)
    assert spot(0.3, deadline=None)[2] == 1.0


def test_posterior_learns_from_observations() -> None:
    prior = PreemptionPrior(alpha=2.0, beta=10.0, mtta_hours=1.0, availability=0.5)
    assert posterior_rate(prior, 0, 0.0) == prior
    calm = posterior_rate(prior, 0, 100.0)
    stormy = posterior_rate(prior, 30, 10.0)
    assert calm.rate < prior.rate < stormy.rate
    assert posterior_rate(prior, 100, 1000.0).rate == pytest.approx(102 / 1010)
    with pytest.raises(ValueError):
        posterior_rate(prior, -1, 1.0)


def test_shipped_priors_have_a_default_and_fall_back_by_region() -> None:
    priors = default_priors()
    assert 0 < priors.default.rate < 5 and priors.default.mtta_hours > 0
    region = priors.lookup(zone="use2-az1", region="us-east-2", instance_type="p3.2xlarge")
    assert region is not priors.default
    unknown = priors.lookup(zone="x", region="mars-1", instance_type="p5.48xlarge")
    assert unknown is priors.default


def test_the_checkpoint_interval_is_what_the_trainer_will_use() -> None:
    yd = young_daly_interval(30.0, 0.5)
    common = {"checkpoint_cost_seconds": 30.0, "preemption_rate_per_hour": 0.5}
    assert (
        checkpoint_seconds(every_seconds=120.0, every_steps=None, step_seconds=2.0, **common) == 120
    )
    # every_steps is seconds by the step time once it is known, Young/Daly until then
    assert (
        checkpoint_seconds(every_seconds=None, every_steps=500, step_seconds=2.0, **common) == 1000
    )
    assert (
        checkpoint_seconds(every_seconds=None, every_steps=500, step_seconds=None, **common) == yd
    )
    assert (
        checkpoint_seconds(every_seconds=None, every_steps=None, step_seconds=2.0, **common) == yd
    )
