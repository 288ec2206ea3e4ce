import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.placement import (
    Current,
    Defer,
    JobState,
    Migrate,
    Place,
    Reject,
    Reservation,
    Snapshot,
    decide,
    estimate,
)
from api.pricing.catalog import default_catalog
from api.pricing.offers import Offer
from api.pricing.preemption import Priors, default_priors
from gpujobs.spec import CapacityType, JobSpec

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def offer(zone: str, od: float | None, spot: float | None, it: str = "p3.2xlarge") -> Offer:
    return Offer("aws", zone[:-1], zone, it, "V100", 1, 16.0, 8, 61, od, spot)


OFFERS = (
    offer("us-east-1a", 3.06, 0.97),
    offer("us-east-1b", 3.06, 0.80),
    offer("us-west-2a", 3.50, 1.10),
    offer("us-west-2b", 2.90, None),
)


def job(
    i: int,
    *,
    hours: float = 10.0,
    deadline: float | None = 30.0,
    types: list[str] | None = None,
    priority: int = 50,
    max_price: float | None = None,
    regions: list[str] | None = None,
    team: str = "t",
    on_budget: str = "reject",
    nodes: int = 1,
) -> JobState:
    spec = JobSpec.model_validate(
        {
            "name": f"j{i}",
            "trainer": {"steps": 10},
            "resources": {"gpu_models": ["V100"], "regions": regions, "nodes": nodes},
            "capacity": {
                "types": types or ["reserved", "spot", "on_demand"],
                "max_price_per_hour": max_price,
                "on_budget_exceeded": on_budget,
            },
            "estimated_hours": hours,
            "deadline_hours": deadline,
            "priority": priority,
        }
    )
    return JobState(f"j{i}", team, spec, NOW, spec.deadline_at(NOW), hours)


def snap(jobs: list[JobState], **kw: object) -> Snapshot:
    return Snapshot(now=NOW, jobs=jobs, offers=OFFERS, priors=default_priors(), **kw)  # type: ignore[arg-type]


def test_reserved_first_and_never_double_booked() -> None:
    pool = Reservation("r1", "p3.2xlarge", "us-east-1a", count=3, in_use=1, price_per_hour=2.0)
    out = decide(snap([job(i) for i in range(5)], reservations=[pool]))
    reserved = [d for d in out if isinstance(d, Place) and d.plan.reservation_id == "r1"]
    assert len(reserved) == 2  # two free slots, five jobs
    assert all(d.plan.expected_cost == 0.0 and d.plan.capacity_type == "reserved" for d in reserved)


def test_priorities_win_scarce_reservations() -> None:
    pool = Reservation("r1", "p3.2xlarge", "us-east-1a", count=1, in_use=0, price_per_hour=2.0)
    jobs = [job(1, priority=10), job(2, priority=90), job(3, priority=50)]
    out = {d.job_id: d for d in decide(snap(jobs, reservations=[pool]))}
    assert isinstance(out["j2"], Place) and out["j2"].plan.reservation_id == "r1"
    assert all(
        not (isinstance(d, Place) and d.plan.reservation_id) for k, d in out.items() if k != "j2"
    )


def test_zone_is_chosen_by_expected_cost_and_ample_slack_rides_spot() -> None:
    (d,) = decide(snap([job(1, hours=10, deadline=40)]))
    assert (
        isinstance(d, Place)
        and d.plan.capacity_type == "spot"
        and d.plan.offer.zone == "us-east-1b"
    )
    assert d.plan.checkpoint_every_seconds is not None and d.plan.checkpoint_every_seconds > 0


def test_no_slack_goes_on_demand_even_when_spot_is_cheaper() -> None:
    (d,) = decide(snap([job(1, hours=10, deadline=10.3)]))
    assert isinstance(d, Place) and d.plan.capacity_type == "on_demand"
    assert d.plan.offer.zone == "us-west-2b"  # cheapest on-demand


def test_spot_unavailable_with_slack_waits() -> None:
    unavailable = frozenset((o.zone, o.instance_type, CapacityType.SPOT) for o in OFFERS)
    (d,) = decide(snap([job(1, hours=10, deadline=40)], unavailable=unavailable))
    assert isinstance(d, Defer)


def test_running_on_demand_moves_back_to_spot_when_slack_returns() -> None:
    base = job(1, hours=10, deadline=40)
    od = next(o for o in OFFERS if o.zone == "us-west-2b")
    running = JobState(
        base.id,
        base.team,
        base.spec,
        NOW,
        base.deadline_at,
        5.0,
        state="running",
        current=Current(od.key, CapacityType.ON_DEMAND, NOW - timedelta(hours=1)),
    )
    (d,) = decide(snap([running]))
    assert isinstance(d, Migrate) and d.to.plan.capacity_type == "spot"


def test_a_running_spot_job_keeps_its_instance_when_spot_disappears() -> None:
    """No new spot anywhere is no reason to leave a spot instance that still runs: the
    preemption, when it comes, is handled (and counted) as one."""
    base = job(1, hours=10, deadline=40)
    spot = next(o for o in OFFERS if o.zone == "us-east-1b")
    running = JobState(
        base.id,
        base.team,
        base.spec,
        NOW,
        base.deadline_at,
        9.0,
        state="running",
        current=Current(spot.key, CapacityType.SPOT, NOW - timedelta(hours=1)),
    )
    gone = frozenset((o.zone, o.instance_type, CapacityType.SPOT) for o in OFFERS)
    assert decide(snap([running], unavailable=gone)) == []


def test_a_spot_job_past_the_reach_of_on_demand_stays_on_spot() -> None:
    """Where the work left no longer fits before the deadline even on on-demand (a rate measured
    slow, say, while a standby started beside the trainer), moving there only adds a restart to
    a deadline already lost: the job keeps its spot instance. One just launched on spot, its
    changeover still ahead, finishes no sooner there and may be preempted on the way: it moves."""
    base = job(1, hours=10, deadline=40)
    spot = next(o for o in OFFERS if o.zone == "us-east-1b")

    def running(left: float, ran: float = 1.0, on: Offer = spot) -> JobState:
        return JobState(
            base.id, base.team, base.spec, NOW - timedelta(hours=35), NOW + timedelta(hours=5),
            left, state="running",
            current=Current(on.key, CapacityType.SPOT, NOW - timedelta(hours=ran)),
        )  # fmt: skip

    assert decide(snap([running(4.0)])) == []  # 5 h left, 4 h of work: on time on spot
    assert decide(snap([running(5.5)])) == []  # 5.5 h of work: late whatever it runs on
    # just launched: as long a restart ahead as on-demand's, and the pool's risk on top
    (d,) = decide(snap([running(5.5, ran=0.0)]))
    assert isinstance(d, Migrate) and d.to.plan.capacity_type == "on_demand"
    # its pool gone from the catalog: the rule would judge another pool's risk, not its own
    (d,) = decide(snap([running(5.5, on=offer("us-east-1c", 3.06, 0.5))]))
    assert isinstance(d, Migrate) and d.to.plan.capacity_type == "on_demand"


def test_budget_rejects_or_defers() -> None:
    jobs = [job(1, types=["on_demand"]), job(2, types=["on_demand"], on_budget="defer")]
    out = {d.job_id: d for d in decide(snap(jobs, budgets={"t": 5.0}))}
    assert isinstance(out["j1"], Reject) and "budget" in out["j1"].reason
    assert isinstance(out["j2"], Defer)


def test_price_cap_below_every_offer_is_rejected() -> None:
    (d,) = decide(snap([job(1, max_price=0.5)]))
    assert isinstance(d, Reject) and "max_price_per_hour" in d.reason


def test_no_matching_offer_is_rejected() -> None:
    spec = job(1).spec.model_copy(deep=True)
    spec.resources.gpu_models = ["H100"]
    j = JobState("x", "t", spec, NOW, None, 1.0)
    (d,) = decide(snap([j]))
    assert isinstance(d, Reject)


job_params = st.fixed_dictionaries(
    {
        "hours": st.floats(0.5, 30),
        "slack": st.floats(0.0, 2.0),
        "types": st.sampled_from(
            [["spot"], ["on_demand"], ["spot", "on_demand"], ["reserved", "spot", "on_demand"]]
        ),
        "priority": st.integers(0, 100),
        "max_price": st.sampled_from([None, 1.0, 3.0, 7.0]),
        "regions": st.sampled_from([None, ["us-east-1"], ["us-west-2"]]),
        "team": st.sampled_from(["a", "b", "c"]),
        "nodes": st.sampled_from([1, 1, 2]),
    }
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    params=st.lists(job_params, min_size=1, max_size=12),
    free=st.integers(0, 3),
    budget=st.sampled_from([None, 10.0, 100.0]),
    spot_down=st.booleans(),
)
def test_invariants_over_random_snapshots(
    params: list[dict], free: int, budget: float | None, spot_down: bool
) -> None:
    jobs = []
    for i, raw in enumerate(params):
        p = dict(raw)
        h = p.pop("hours")
        jobs.append(job(i, hours=h, deadline=h * (1 + p.pop("slack")) + 0.25, **p))
    pool = Reservation("r", "p3.2xlarge", "us-east-1a", count=3, in_use=3 - free, price_per_hour=1)
    unavailable = (
        frozenset((o.zone, o.instance_type, CapacityType.SPOT) for o in OFFERS)
        if spot_down
        else frozenset()
    )
    budgets = {"a": budget, "b": budget, "c": budget}
    out = decide(snap(jobs, reservations=[pool], budgets=budgets, unavailable=unavailable))
    by_id = {j.id: j for j in jobs}
    assert len({d.job_id for d in out}) == len(out)
    assert {d.job_id for d in out} == set(by_id)  # every pending job hears back
    spent: dict[str, float] = {}
    slots = 0
    for d in out:
        if not isinstance(d, Place):
            continue
        spec = by_id[d.job_id].spec
        assert d.plan.capacity_type in spec.capacity.types
        assert spec.resources.regions is None or d.plan.offer.region in spec.resources.regions
        if d.plan.capacity_type != "reserved":
            cap = spec.capacity.max_price_per_hour
            assert cap is None or d.plan.price_per_hour <= cap + 1e-9
            assert (
                d.plan.offer.zone,
                d.plan.offer.instance_type,
                d.plan.capacity_type,
            ) not in unavailable
        else:
            slots += spec.resources.nodes
        spent[by_id[d.job_id].team] = spent.get(by_id[d.job_id].team, 0.0) + d.plan.expected_cost
        # meetable on on-demand -> placed so that it is still met
        j = by_id[d.job_id]
        hours_left = (j.deadline_at - NOW).total_seconds() / 3600
        if hours_left >= j.remaining_hours + 0.2 and d.plan.capacity_type == "on_demand":
            assert d.plan.p_meet_deadline == 1.0
    assert slots <= free
    if budget is not None:
        assert all(v <= budget + 1e-6 for v in spent.values())
    # reserved is free at the margin: a free slot is used whenever an eligible job wants one
    eligible = [
        j
        for j in jobs
        if "reserved" in j.spec.capacity.types
        and j.spec.resources.regions in (None, ["us-east-1"])
        and j.spec.resources.nodes <= free
    ]
    if eligible:
        assert slots > 0


def test_estimate_marks_what_decide_places_and_says_why_the_rest_lose() -> None:
    j = job(1, hours=10, deadline=40)
    catalog = default_catalog()
    world = Snapshot(now=NOW, jobs=[], offers=catalog.offers, priors=default_priors())
    out = estimate(world, j, limit=500)
    assert out.decision == "place"
    (placed,) = decide(Snapshot(now=NOW, jobs=[j], offers=catalog.offers, priors=default_priors()))
    assert isinstance(placed, Place)
    assert out.plans[0].chosen and out.plans[0].plan == placed.plan
    assert sum(w.chosen for w in out.plans) == 1
    rest = out.plans[1:]
    assert rest and all(w.why for w in rest)
    assert all(w.plan.offer.gpu_model == "V100" for w in out.plans)
    costs = [w.plan.expected_cost for w in rest[2:]]  # after the best other spot and on-demand
    assert costs == sorted(costs)
    spot = placed.plan
    pool = Reservation("r", spot.offer.instance_type, spot.offer.zone, 2, 0, 3.0)
    with_pool = estimate(replace(world, reservations=[pool]), j)
    assert with_pool.plans[0].chosen and with_pool.plans[0].plan.capacity_type == "reserved"
    assert with_pool.plans[0].plan.expected_cost == 0.0
    assert any("prepaid" in w.why for w in with_pool.plans[1:])


def gang(types: list[str]) -> JobState:
    spec = JobSpec.model_validate(
        {
            "name": "gang",
            "trainer": {"steps": 1000},
            "resources": {"gpu_models": ["A100"], "gpus_per_node": 8, "nodes": 16},
            "capacity": {"types": types},
            "estimated_hours": 10,
        }
    )
    return JobState("g", "t", spec, NOW, None, 10.0)


def test_a_big_spot_gang_is_never_placed_where_its_expected_cost_is_infinite() -> None:
    """Measured: a 16-node x 8 x A100 spot gang with no deadline was placed with an expected
    finish in 2034, and not even on the cheapest zone. Under the model of that time (one pooled
    rate, nodes preempted independently: a 16-node gang 16 times as often as one node)."""
    offers = default_catalog().offers
    independent = Priors({}, {}, default_priors().default, gang_exponent=1.0)
    (d,) = decide(Snapshot(now=NOW, jobs=[gang(["spot"])], offers=offers, priors=independent))
    assert isinstance(d, Reject) and "never finish" in d.reason
    (d,) = decide(
        Snapshot(now=NOW, jobs=[gang(["spot", "on_demand"])], offers=offers, priors=independent)
    )
    assert isinstance(d, Place) and d.plan.capacity_type == "on_demand"
    assert d.plan.expected_cost < float("inf") and d.plan.expected_finish < NOW + timedelta(days=2)
    cheapest = min(
        o.on_demand_price or float("inf")
        for o in offers
        if o.gpu_model == "A100" and o.gpu_count == 8
    )
    assert d.plan.price_per_hour == cheapest * 16


def test_the_candidate_index_is_the_one_offer_filter() -> None:
    """Placement's index, feasibility and the catalog endpoint match offers by the same rules."""
    from api.placement.candidates import CandidateIndex
    from api.pricing.catalog import find_offers
    from api.pricing.requirements import matches, requirement
    from gpujobs.spec import ResourcesSpec

    offers = default_catalog().offers
    index = CandidateIndex(offers, priors=default_priors(), rates={}, restart_hours=0.2)
    cases = [
        {"gpu_models": ["a100", "H100"], "gpus_per_node": 8},
        {"gpu_models": ["T4"], "regions": ["US-EAST-1", "us-central1"]},
        {"min_gpu_memory_gb": 40, "clouds": ["gcp"], "gpus_per_node": 1},
        {"gpu_models": ["L4"], "min_gpu_memory_gb": 23, "gpus_per_node": 4, "nodes": 2},
    ]
    for case in cases:
        resources = ResourcesSpec.model_validate(case)
        need = requirement(resources)
        expected = {o.key for o in offers if matches(o, need)}
        cands = index.candidates(resources)
        found = {o.key for o in cands.on_demand} | {c.offer.key for c in cands.spot}
        assert found == expected, case
        listed = find_offers(
            default_catalog(),
            gpu_model=resources.gpu_models,
            min_gpu_memory_gb=resources.min_gpu_memory_gb,
            gpu_count=resources.gpus_per_node,
            region=resources.regions,
            cloud=resources.clouds,
        )
        assert {o.key for o in listed} == expected, case


def _by(reason: str, now: datetime = NOW) -> datetime:
    """The time a waiting job's reason, given at `now`, says it moves to on-demand."""
    match = re.search(r"moves to on-demand by (.+) UTC unless spot returns", reason)
    assert match is not None, reason
    shown = match.group(1)
    if len(shown) == 5:  # HH:MM, today
        return datetime.strptime(f"{now:%Y-%m-%d} {shown}", "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
    return datetime.strptime(f"{now:%Y} {shown}", "%Y %b %d %H:%M").replace(tzinfo=UTC)


def test_a_job_waiting_for_spot_is_told_when_it_moves_to_on_demand() -> None:
    """The reason names the minute the rule gives up on spot, and decide() keeps to it: still
    waiting a minute before, on on-demand at that minute, spot still out."""
    gone = frozenset((o.zone, o.instance_type, CapacityType.SPOT) for o in OFFERS)
    waiting = job(1, hours=10, deadline=40)
    (d,) = decide(snap([waiting], unavailable=gone))
    assert isinstance(d, Defer)
    assert d.reason.startswith("waiting for spot capacity: the deadline's slack allows it; ")
    by = _by(d.reason)
    assert NOW < by < waiting.deadline_at  # type: ignore[operator]

    def at(now: datetime) -> Snapshot:
        return replace(snap([waiting], unavailable=gone), now=now)

    (before,) = decide(at(by - timedelta(minutes=1)))
    assert isinstance(before, Defer) and _by(before.reason, by) == by  # the same minute each pass
    (then,) = decide(at(by))
    assert isinstance(then, Place) and then.plan.capacity_type == "on_demand"
    assert then.reason.startswith("on-demand: spot has no capacity and the deadline's slack")


def test_an_on_demand_placement_says_which_reason() -> None:
    (tight,) = decide(snap([job(1, hours=10, deadline=10.3)]))
    assert isinstance(tight, Place) and tight.plan.capacity_type == "on_demand"
    assert tight.reason.startswith("on-demand: the deadline needs it: ")
    (no_spot,) = decide(snap([job(2, types=["on_demand"])]))
    assert isinstance(no_spot, Place)
    assert no_spot.reason == "on-demand: the spec's capacity.types do not allow spot"


def test_a_job_without_estimated_hours_is_told_what_was_assumed() -> None:
    """The README's curl job: no estimated_hours (the worker assumes 1 h) and a 1 h deadline."""
    spec = JobSpec.model_validate(
        {"name": "tiny", "trainer": {"steps": 40}, "resources": {"gpu_models": ["V100"]},
         "deadline_hours": 1}
    )  # fmt: skip
    tiny = JobState("tiny", "t", spec, NOW, spec.deadline_at(NOW), 1.0)
    (d,) = decide(snap([tiny]))
    assert isinstance(d, Place) and d.plan.capacity_type == "on_demand"
    assert d.reason.startswith("on-demand: the deadline needs it: ")
    assert d.reason.endswith("; no estimated_hours: assumed 1 h")
    (measured,) = decide(snap([replace(tiny, step_seconds=90.0)]))  # a rate: nothing assumed
    assert "assumed" not in measured.reason


def test_a_waiting_job_moves_to_on_demand_in_time_for_its_checkpoint_stalls() -> None:
    """10 h of work checkpointed every 600 s (a 30 s stall each: 10.5 h of running) in 10.8 h,
    spot out. The rule counted the 10 h alone: it waited until on-demand could no longer
    finish. Where it says it moves, on-demand from then (a restart, then 10.5 h) is in time."""
    body = job(1, hours=10, deadline=10.8).spec.model_dump()
    body["trainer"]["checkpoint"] = {"every_seconds": 600}
    spec = JobSpec.model_validate(body)
    tight = JobState("j1", "t", spec, NOW, spec.deadline_at(NOW), 10.0)
    gone = frozenset((o.zone, o.instance_type, CapacityType.SPOT) for o in OFFERS)
    world = snap([tight], unavailable=gone, restart_hours=0.01)
    (d,) = decide(world)
    assert isinstance(d, Defer)
    by = _by(d.reason)
    (then,) = decide(replace(world, now=by))
    assert isinstance(then, Place) and then.plan.capacity_type == "on_demand"
    assert by + timedelta(hours=0.01 + 10.5) <= spec.deadline_at(NOW)  # type: ignore[operator]
