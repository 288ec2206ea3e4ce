"""GPU models train at different speeds: hours, prices and the deadline rule follow the model an
option runs on (api.pricing.gpu_speed)."""

from __future__ import annotations

import csv
from datetime import UTC, datetime
from pathlib import Path

import pytest

from api.placement import Defer, JobState, Place, Snapshot, decide, estimate
from api.placement.estimate import policy_quote
from api.placement.options import Market
from api.pricing.gpu_speed import DEFAULT_SPEEDS, normalized
from api.pricing.offers import Offer
from api.pricing.preemption import default_priors
from gpujobs.spec import CapacityType, JobSpec

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SPEEDS = normalized({"A100": 1.0, "H100": 2.0, "L4": 0.25})
DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "gpu-prices"


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
    market = Market(snap([j], [A100, L4], SPEEDS))
    quoted = policy_quote(market, j, market.snapshot)
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


def test_the_default_table_names_every_gpu_model_of_the_shipped_catalogs() -> None:
    models = set()
    for name, column in (
        ("aws_gpu_vms.csv", "AcceleratorName"),
        ("gcp_gpu_vms.csv", "AcceleratorName"),
    ):
        path = DATA / name
        if not path.exists():
            pytest.skip(f"{path} is not here")
        with path.open() as f:
            models |= {row[column] for row in csv.DictReader(f) if row[column]}
    assert models and models <= set(DEFAULT_SPEEDS)
    assert all(speed > 0 for speed in DEFAULT_SPEEDS.values())
