"""GPU models train at different speeds: hours, prices and the deadline rule follow the model an
option runs on (api.pricing.gpu_speed)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from api.placement import (
    Current,
    Defer,
    JobState,
    Migrate,
    Place,
    Reservation,
    Snapshot,
    decide,
    estimate,
)
from api.placement.estimate import policy_quote
from api.placement.options import Market
from api.pricing.catalog import default_catalog
from api.pricing.gpu_speed import DEFAULT_SPEEDS, normalized
from api.pricing.offers import Offer
from api.pricing.preemption import default_priors
from gpujobs.spec import CapacityType, JobSpec

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SPEEDS = normalized({"A100": 1.0, "H100": 2.0, "L4": 0.25})


def offer(model: str, od: float | None, spot: float | None, zone: str = "us-east-1a") -> Offer:
    return Offer("aws", zone[:-1], zone, f"{model.lower()}.x", model, 1, 80.0, 8, 61, od, spot)


A100 = offer("A100", 3.0, None)
L4 = offer("L4", 0.5, None)  # $2.00 per A100-hour of work: cheaper per hour, slower
H100_SPOT = offer("H100", None, 1.5)


def job(
    models: list[str],
    *,
    hours: float,
    deadline: float | None = None,
    types: tuple[str, ...] = ("on_demand",),
) -> JobState:
    spec = JobSpec.model_validate(
        {
            "name": "j",
            "trainer": {"steps": 100},
            "resources": {"gpu_models": models},
            "capacity": {"types": list(types)},
            "estimated_hours": hours,
            "deadline_hours": deadline,
        }
    )
    return JobState("j", "t", spec, NOW, spec.deadline_at(NOW), hours)


def snap(jobs: list[JobState], offers: list[Offer], speeds: dict[str, float]) -> Snapshot:
    return Snapshot(now=NOW, jobs=jobs, offers=offers, priors=default_priors(), gpu_speeds=speeds)


def placed(world: Snapshot) -> Place:
    (d,) = decide(world)
    assert isinstance(d, Place), d
    return d


def test_offers_are_ranked_and_priced_per_hour_of_work() -> None:
    # 10 h on an A100 (the first model named): 40 h on an L4 at $0.50 = $20, 10 h at $3 = $30.
    j = job(["A100", "L4"], hours=10.0)
    d = placed(snap([j], [A100, L4], SPEEDS))
    assert d.plan.offer.gpu_model == "L4"
    assert d.plan.expected_cost == pytest.approx(0.5 * (40.0 + 0.2), rel=1e-3)
    assert (d.plan.expected_finish - NOW).total_seconds() / 3600 == pytest.approx(40.2, rel=1e-3)
    # Named L4 first, the same work is 10 L4-hours: 2.5 h on an A100.
    on_l4 = job(["L4", "A100"], hours=10.0)
    d = placed(snap([on_l4], [A100, L4], SPEEDS))
    assert d.plan.expected_cost == pytest.approx(0.5 * 10.2, rel=1e-3)
    # A slower GPU that is dearer per hour of work loses, however cheap its hour.
    dear_l4 = offer("L4", 0.9, None)
    d = placed(snap([j], [A100, dear_l4], SPEEDS))
    assert d.plan.offer.gpu_model == "A100"
    # Every model alike (the local launcher): the cheapest hour, priced as the spec says.
    d = placed(snap([j], [A100, L4], {}))
    assert d.plan.offer.gpu_model == "L4"
    assert d.plan.expected_cost == pytest.approx(0.5 * 10.2, rel=1e-3)


def test_a_deadline_the_cheap_slow_gpu_cannot_meet_takes_a_faster_one() -> None:
    # 4 A100-hours are 16 on an L4: past the 10-hour deadline, so the A100, dearer per work.
    j = job(["A100", "L4"], hours=4.0, deadline=10.0)
    d = placed(snap([j], [A100, L4], SPEEDS))
    assert d.plan.offer.gpu_model == "A100"
    assert d.plan.p_meet_deadline == 1.0
    quoted = policy_quote(Market(snap([j], [A100, L4], SPEEDS)), j)
    assert quoted is not None and quoted.p_meet_deadline == 1.0
    assert quoted.expected_cost == pytest.approx(3.0 * 4.2, rel=1e-3)
    # The estimate marks the same plan, and shows the L4 as the cheaper one it passed over.
    est = estimate(snap([], [A100, L4], SPEEDS), j)
    chosen = next(w for w in est.plans if w.chosen)
    assert chosen.plan.offer.gpu_model == "A100"
    l4 = next(w for w in est.plans if w.plan.offer.gpu_model == "L4")
    assert l4.plan.p_meet_deadline == 0.0


def test_spot_too_slow_for_the_deadline_gives_way_to_a_faster_spot_gpu() -> None:
    a100, l4 = offer("A100", 3.0, 1.2), offer("L4", 0.5, 0.2)  # L4: $0.80 per A100-hour
    j = job(["A100", "L4"], hours=4.0, deadline=10.0, types=("spot", "on_demand"))
    d = placed(snap([j], [a100, l4], SPEEDS))
    assert d.plan.capacity_type == CapacityType.SPOT and d.plan.offer.gpu_model == "A100"
    roomy = job(["A100", "L4"], hours=4.0, deadline=40.0, types=("spot", "on_demand"))
    d = placed(snap([roomy], [a100, l4], SPEEDS))
    assert d.plan.capacity_type == CapacityType.SPOT and d.plan.offer.gpu_model == "L4"


def test_work_measured_on_a_fast_spot_gpu_is_counted_on_the_slower_fallback() -> None:
    # Preempted off spot H100s with 4 H100-hours of work left, 8 on the A100 it would fall back
    # to, and 8.2 h to the deadline: spot is gone, and only on-demand now can still make it.
    j = job(["H100", "A100"], hours=4.0, deadline=8.2, types=("spot", "on_demand"))
    gone = frozenset({(H100_SPOT.zone, H100_SPOT.instance_type, CapacityType.SPOT)})

    def world(speeds: dict[str, float]) -> Snapshot:
        return Snapshot(
            now=NOW,
            jobs=[j],
            offers=[A100, H100_SPOT],
            priors=default_priors(),
            gpu_speeds=speeds,
            unavailable=gone,
        )

    d = placed(world(SPEEDS))
    assert d.plan.capacity_type == CapacityType.ON_DEMAND and d.plan.offer.gpu_model == "A100"
    # Counted in H100 hours, the same state looked like 4 h of slack: it waited for spot, and
    # the 8 hours of A100 work it then had left could no longer finish in time.
    (d,) = decide(world({}))
    assert isinstance(d, Defer)


def test_the_default_table_names_every_gpu_model_of_the_shipped_catalog() -> None:
    models = {o.gpu_model for o in default_catalog().offers}
    assert models and models <= set(DEFAULT_SPEEDS)
    assert all(speed > 0 for speed in DEFAULT_SPEEDS.values())


def test_a_running_job_keeps_its_slow_spot_gpu_until_the_net_moves_it() -> None:
    # On spot L4s with 2 A100-hours left (8 on the L4) and 8.5 h to the deadline: the L4 can
    # finish, and leaving it would spend a restart. Once the L4's pace (a quarter of the A100's
    # work a step) leaves too little, it moves to on-demand A100s.
    l4, a100 = offer("L4", None, 0.2), offer("A100", 3.0, 1.5)
    since = NOW - timedelta(hours=1)

    def world(hours_left: float) -> Snapshot:
        j = job(["A100", "L4"], hours=2.0, deadline=hours_left, types=("spot", "on_demand"))
        running = replace(
            j,
            state="running",
            current=Current(l4.key, CapacityType.SPOT, since),
            submitted_at=since,
            deadline_at=NOW + timedelta(hours=hours_left),
        )
        return snap([running], [l4, a100], SPEEDS)

    assert decide(world(8.5)) == []
    g = world(1.0).step_hours
    # The net: left - g < work - g / 4 + d, the work counted on the A100 fallback, and the
    # progress of a step on the L4 it holds (not on the spot A100 it could move to) a quarter.
    (moved,) = decide(world(2.0 + 0.2 + g / 2))
    assert isinstance(moved, Migrate) and moved.to.plan.offer.gpu_model == "A100"


def test_a_free_reservation_too_slow_for_the_deadline_gives_way_to_a_faster_gpu() -> None:
    slots = Reservation("r-l4", L4.instance_type, L4.zone, count=2, in_use=0, price_per_hour=0.4)
    j = job(["A100", "L4"], hours=4.0, deadline=10.0, types=("reserved", "on_demand"))
    d = placed(replace(snap([j], [A100, L4], SPEEDS), reservations=[slots]))
    assert d.plan.capacity_type == CapacityType.ON_DEMAND and d.plan.offer.gpu_model == "A100"
    # With room for the L4's 16 hours, the prepaid slot.
    roomy = job(["A100", "L4"], hours=4.0, deadline=20.0, types=("reserved", "on_demand"))
    d = placed(replace(snap([roomy], [A100, L4], SPEEDS), reservations=[slots]))
    assert d.plan.reservation_id == "r-l4"
    # When nothing can meet it anyway, prepaid beats paying for a miss.
    hopeless = job(["A100", "L4"], hours=4.0, deadline=3.0, types=("reserved", "on_demand"))
    d = placed(replace(snap([hopeless], [A100, L4], SPEEDS), reservations=[slots]))
    assert d.plan.reservation_id == "r-l4"


def test_the_estimate_says_a_cheaper_slow_plan_cannot_meet_the_deadline() -> None:
    j = job(["A100", "L4"], hours=4.0, deadline=10.0)
    est = estimate(snap([], [A100, L4], SPEEDS), j)
    l4 = next(w for w in est.plans if w.plan.offer.gpu_model == "L4")
    assert l4.plan.expected_cost < next(w for w in est.plans if w.chosen).plan.expected_cost
    assert "cannot finish by the deadline" in l4.why and "L4" in l4.why


def test_a_slow_reservation_is_kept_when_the_faster_gpu_is_over_budget() -> None:
    slots = Reservation("r-l4", L4.instance_type, L4.zone, count=2, in_use=0, price_per_hour=0.4)
    j = job(["A100", "L4"], hours=4.0, deadline=10.0, types=("reserved", "on_demand"))
    world = replace(snap([j], [A100, L4], SPEEDS), reservations=[slots], budgets={"t": 8.0})
    d = placed(world)  # the A100's $12.60 is over the $8 left: the prepaid slot, late
    assert d.plan.reservation_id == "r-l4"


def test_a_jobs_own_measured_speeds_rank_its_spot_offers() -> None:
    a100, l4 = offer("A100", 3.0, 1.2), offer("L4", 0.5, 0.2)  # by the table, L4 $0.80 per work
    j = job(["A100", "L4"], hours=4.0, types=("spot",))
    assert placed(snap([j], [a100, l4], SPEEDS)).plan.offer.gpu_model == "L4"
    slow_l4 = replace(j, gpu_speeds={"a100": 1.0, "h100": 2.0, "l4": 0.1})  # $2.00 per work
    assert placed(snap([slow_l4], [a100, l4], SPEEDS)).plan.offer.gpu_model == "A100"
