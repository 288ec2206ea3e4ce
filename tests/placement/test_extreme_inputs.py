"""The pure placement code fed the numbers a hostile trainer (or a row written before the bounds
held) could leave: extreme finite values, subnormals, NaN and infinity in the progress, the rate,
the stall and the estimate. It neither raises nor stalls; a job it cannot weigh is set aside
(`Unweighable`, naming the field) and every other job is decided as it would be alone.

Bounded: few examples, a deadline per example, and pytest-timeout's hard stop, so a loop that
would never end fails the run instead of hanging it."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from api.placement import Current, JobState, Place, Snapshot, Unweighable, decide, estimate
from api.placement.options import Market
from api.placement.quote import quote
from api.placement.situation import situation
from api.placement.snapshot import step_seconds
from api.placement.states import remaining_hours
from api.pricing.cost_model import Risk, checkpoint_seconds, evaluate, young_daly_interval
from api.pricing.offers import Offer
from api.pricing.preemption import default_priors
from api.progress import read
from gpujobs.spec import CapacityType, JobSpec

NOW = datetime(2026, 1, 1, tzinfo=UTC)
OFFERS = (
    Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", "V100", 1, 16.0, 8, 61, 3.06, 0.97),
    Offer("aws", "us-east-1", "us-east-1b", "p3.2xlarge", "V100", 1, 16.0, 8, 61, 3.06, 0.80),
    Offer("aws", "us-west-2", "us-west-2a", "g5.xlarge", "A10G", 1, 24.0, 4, 16, 1.01, 0.45),
)
EXTREMES = [
    0.0, -0.0, 5e-324, 2.2e-308, 1e-300, 1e-12, 1e12, 1e300, 1.7976931348623157e308,
    -1.0, -1e308, math.inf, -math.inf, math.nan,
]  # fmt: skip
# Any float at all, with the extremes drawn often.
number = st.one_of(st.sampled_from(EXTREMES), st.floats(allow_nan=True, allow_infinity=True))
# What a spec's float fields admit (> 0, at most a year): subnormals included.
spec_hours = st.one_of(st.sampled_from([5e-324, 1e-300, 1e-9, 24 * 366.0]), st.floats(0.01, 8784))
# No shrinking: a slow example found on a loaded machine was re-run without end while
# shrinking (pytest-timeout's stop is an exception hypothesis takes for a failure and shrinks).
BOUNDED = settings(
    max_examples=40,
    deadline=timedelta(seconds=20),
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    derandomize=True,
)


def spec(**fields: Any) -> JobSpec:
    body = {"name": "j", "trainer": {"steps": 1000}, "resources": {"gpu_models": ["V100"]}}
    return JobSpec.model_validate(body | fields)


def state(job_id: str, team: str, spec_: JobSpec, **fields: Any) -> JobState:
    fields.setdefault("remaining_hours", spec_.estimated_hours or 1.0)
    return JobState(job_id, team, spec_, NOW, spec_.deadline_at(NOW), **fields)


def snapshot(jobs: list[JobState]) -> Snapshot:
    return Snapshot(now=NOW, jobs=jobs, offers=OFFERS, priors=default_priors())


def finite_plan(decision: Any) -> None:
    plan = getattr(decision, "plan", None) or getattr(getattr(decision, "to", None), "plan", None)
    if plan is None:
        return
    assert math.isfinite(plan.expected_cost) and plan.expected_cost >= 0
    assert 0.0 <= plan.p_meet_deadline <= 1.0
    every = plan.checkpoint_every_seconds
    assert every is None or (math.isfinite(every) and every > 0)


BYSTANDER = state("bystander", "other-team", spec(estimated_hours=3.0, deadline_hours=12.0))
ALONE = decide(snapshot([BYSTANDER]))


@pytest.mark.timeout(240)
@BOUNDED
@given(
    remaining=number,
    stall=number,
    step=st.one_of(st.none(), number),
    quote_usd=st.one_of(st.none(), number),
    estimated=st.one_of(st.none(), spec_hours),
    deadline=st.one_of(st.none(), spec_hours),
    running=st.sampled_from([None, CapacityType.SPOT, CapacityType.ON_DEMAND]),
)
@example(1e300, 30.0, None, None, None, None, None)  # a vanishing rate's work, no deadline
@example(1e300, 30.0, 1e300, None, 2.0, 5.0, CapacityType.SPOT)
@example(5e-324, 5e-324, 5e-324, 5e-324, 5e-324, 5e-324, None)
@example(1.7976931348623157e308, 3600.0, None, 1e308, 8784.0, 8784.0, CapacityType.ON_DEMAND)
@example(math.nan, 30.0, None, None, 1.0, None, CapacityType.SPOT)
@example(1.0, 1e308, None, None, 1.0, 10.0, None)  # the stall of attack 2
def test_decide_sets_aside_only_the_job_it_cannot_weigh(
    remaining: float,
    stall: float,
    step: float | None,
    quote_usd: float | None,
    estimated: float | None,
    deadline: float | None,
    running: CapacityType | None,
) -> None:
    hostile = state(
        "hostile",
        "attacker",
        spec(estimated_hours=estimated, deadline_hours=deadline),
        remaining_hours=remaining,
        checkpoint_cost_seconds=stall,
        step_seconds=step,
        quote_usd=quote_usd,
    )
    if running is not None:
        offer = OFFERS[0]
        current = Current(offer.key, running, NOW - timedelta(hours=1), attempt_id="a1")
        hostile = replace(hostile, state="running", current=current)

    out = decide(snapshot([hostile, BYSTANDER]))

    assert [d for d in out if d.job_id == "bystander"] == ALONE
    for decision in out:
        finite_plan(decision)
    mine = [d for d in out if d.job_id == "hostile"]
    if running is None:
        assert len(mine) == 1  # a pending job always hears back
    bad = not all(
        math.isfinite(v) and v >= 0 for v in (remaining, stall, quote_usd or 0.0, step or 1.0)
    ) or (step is not None and step <= 0)
    if bad:
        assert len(mine) == 1 and isinstance(mine[0], Unweighable), mine


@pytest.mark.timeout(240)
@BOUNDED
@given(
    remaining=number,
    stall=number,
    step=st.one_of(st.none(), number),
    estimated=st.one_of(st.none(), spec_hours),
    deadline=st.one_of(st.none(), spec_hours),
)
@example(1e300, 30.0, None, None, None)
@example(1e300, 30.0, None, 8784.0, 1.0)
@example(1.7976931348623157e308, 5e-324, 5e-324, 5e-324, 5e-324)
@example(2.0, 3600.0, 1e-3, 2.0, 48.0)
def test_the_estimate_and_the_quote_of_any_job_state_return(
    remaining: float,
    stall: float,
    step: float | None,
    estimated: float | None,
    deadline: float | None,
) -> None:
    job = state(
        "estimate",
        "t",
        spec(estimated_hours=estimated, deadline_hours=deadline),
        remaining_hours=remaining,
        checkpoint_cost_seconds=stall,
        step_seconds=step,
    )
    # estimate() quotes 128 runs; flipping spot pools make one of a year's work take seconds
    # (a legitimate spec's longest), so the spot pool's simulation is fed below with fewer.
    on_demand = [replace(o, spot_price=None) for o in OFFERS]
    found = estimate(replace(snapshot([]), offers=on_demand), job)
    for weighed in found.plans:
        finite_plan(weighed)
    if found.quote is not None:
        assert not math.isnan(found.quote.expected_cost)
        assert not math.isnan(found.quote.hold_cost)
    market = Market(snapshot([job]))
    sit = situation(market, job, NOW)
    quoted = quote(sit, reserved=None, spot_available_now=True, runs=4)
    assert quoted is None or not math.isnan(quoted.expected_cost)


@pytest.mark.timeout(240)
@BOUNDED
@given(
    rate=number,
    total=st.one_of(st.none(), st.integers(-(2**63), 2**63), number),
    resume=st.one_of(st.none(), st.integers(-(2**63), 2**63)),
    estimated=st.one_of(st.none(), spec_hours),
    gpu=st.sampled_from([None, "V100", "H100", 7]),
)
@example(5e-324, 100, 0, 1.0, "V100")  # attack 1: the pass divided by zero here
@example(1e12, 2**63, -(2**63), None, None)
def test_the_work_left_from_any_progress_is_a_number(
    rate: float, total: Any, resume: int | None, estimated: float | None, gpu: Any
) -> None:
    """remaining_hours and step_seconds read a stored progress report: whatever it holds,
    they answer a non-negative number (inf where the work cannot be counted), never raise."""
    s = spec(estimated_hours=estimated)
    progress = read({"samples_per_s": rate, "total_steps": total, "gpu_model": gpu})
    speeds = {"v100": 1.0, "h100": 3.0}
    hours = remaining_hours(s, progress=progress, resume_from_step=resume, speeds=speeds)
    assert hours >= 0  # NaN fails this too
    seconds = step_seconds(s, progress, speeds)
    assert seconds is None or seconds >= 0  # NaN fails this too


@pytest.mark.timeout(240)
@BOUNDED
@given(
    work=number,
    stall_hours=number,
    deadline=st.one_of(st.none(), number),
    every=st.one_of(st.none(), number),
    price=st.sampled_from([0.0, 0.12, 3.06, 98.3]),
    rate=st.sampled_from([0.0, 0.01, 0.5, 3.0]),
    mtta=st.sampled_from([0.0, 0.25, 6.0]),
    on_notice=st.booleans(),
    capacity=st.sampled_from(list(CapacityType)),
)
def test_the_cost_model_returns_for_any_work_stall_interval_and_deadline(
    work: float,
    stall_hours: float,
    deadline: float | None,
    every: float | None,
    price: float,
    rate: float,
    mtta: float,
    on_notice: bool,
    capacity: CapacityType,
) -> None:
    """The job's figures (work left, the stall, the interval from its steps, the deadline) are
    the trainer's or the spec's; the pool's (price, rate, wait) are the catalog's and priors'."""
    risk = Risk(
        preemption_rate=rate,
        mtta_hours=mtta,
        checkpoint_cost_hours=stall_hours,
        checkpoint_on_notice=on_notice,
    )
    out = evaluate(
        work_hours=work,
        price_per_hour=price,
        capacity=capacity,
        risk=risk,
        hours_to_deadline=deadline,
        checkpoint_every_seconds=every,
    )
    assert 0.0 <= out.p_meet_deadline <= 1.0
    inputs = (work, stall_hours, deadline or 0.0, every or 1.0)
    if all(math.isfinite(v) and v >= 0 for v in inputs):
        assert not math.isnan(out.expected_cost) and not math.isnan(out.expected_hours)
    young_daly_interval(stall_hours * 3600.0, rate)
    checkpoint_seconds(
        every_seconds=every,
        every_steps=None,
        step_seconds=None,
        checkpoint_cost_seconds=stall_hours * 3600.0,
        preemption_rate_per_hour=rate,
    )


def test_a_job_that_raises_is_set_aside_and_the_others_are_placed() -> None:
    """Whatever the reason one job's weighing raises, decide() answers for every other."""
    broken = state("broken", "attacker", spec(estimated_hours=1.0), remaining_hours=math.nan)
    out = decide(snapshot([broken, BYSTANDER]))
    [set_aside] = [d for d in out if d.job_id == "broken"]
    assert isinstance(set_aside, Unweighable) and set_aside.field == "remaining_hours"
    assert [d for d in out if d.job_id == "bystander"] == ALONE
    assert isinstance(ALONE[0], Place)


def test_a_job_whose_weighing_raises_is_set_aside_and_the_others_decided_as_before() -> None:
    """A running job whose attempt's start cannot be compared with now (naive against aware):
    its weighing raises, and the others are decided as they would be without it."""
    naive = Current(OFFERS[0].key, CapacityType.SPOT, datetime(2025, 12, 31, 23), attempt_id="a")
    broken = replace(
        state("broken", "other-team", spec(estimated_hours=3.0, deadline_hours=12.0)),
        state="running",
        current=naive,
    )
    out = decide(snapshot([broken, BYSTANDER]))
    [set_aside] = [d for d in out if d.job_id == "broken"]
    assert isinstance(set_aside, Unweighable), set_aside
    assert "TypeError" in set_aside.reason
    assert [d for d in out if d.job_id == "bystander"] == ALONE
