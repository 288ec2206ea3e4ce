"""One scheduling pass against a real database (SQLite and PostgreSQL), with a recording launcher.

The scheduler is the unit under test: the launcher only records what it was asked to start.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from api.auth import Principal
from api.database import read_session, transaction
from api.estimates import planning
from api.models import ApiToken, Job, JobAttempt, new_id
from api.money import MICRO
from api.placement.decisions import Defer, Place, Reject
from api.placement.plan import Plan
from api.settings import Settings
from api.usage.repository import ledger_rows
from gpujobs.resources import JobStatus
from gpujobs.spec import CapacityType, JobSpec
from tests.worker.support import (
    Clock,
    RecordingLauncher,
    attempts,
    control_plane,
    count,
    events,
    handle_of,
    job,
    principal,
    submit,
)
from worker import repository as repo
from worker.launchers.base import Observation, ObservedState
from worker.launching import launch_attempt
from worker.reconciler import reconcile_once
from worker.scheduler import ScheduleResult, _apply, schedule_once


def test_a_pending_job_is_placed_and_launched(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    launcher = RecordingLauncher()
    clock = Clock()
    cp = control_plane(settings, session_factory, launcher, clock)
    job_id = submit(session_factory, principal(session_factory))

    result = schedule_once(cp)

    assert result.claimed == 1
    assert len(result.placed) == 1
    [attempt] = attempts(session_factory, job_id)
    assert attempt.id == result.placed[0]
    assert attempt.number == 1
    assert attempt.capacity_type == CapacityType.SPOT.value  # no deadline: spot while it is there
    assert attempt.price_per_hour > 0
    assert attempt.on_demand_price_per_hour >= attempt.price_per_hour
    assert attempt.instance_type and attempt.zone and attempt.gpu_model and attempt.gpu_count >= 1
    assert attempt.nodes == 1
    assert attempt.launch_handle == handle_of(attempt.id)
    assert attempt.launched_at == clock.now
    assert attempt.ended_at is None and attempt.started_at is None
    placed = job(session_factory, job_id)
    assert placed.status == JobStatus.SCHEDULED.value
    assert placed.attempts_count == 1
    assert placed.lock_token is None and placed.lock_expires_at is None
    scheduled = [e for e in events(session_factory, job_id) if e.to_status == "SCHEDULED"]
    assert len(scheduled) == 1
    data = scheduled[0].data
    assert data["attempt_id"] == attempt.id
    assert data["attempt"] == 1
    assert data["capacity_type"] == "spot"
    assert data["price_per_hour"] == attempt.price_per_hour
    assert data["offer"].split(":")[2] == attempt.instance_type
    assert {"expected_cost", "expected_finish", "p_meet_deadline"} <= data.keys()
    assert scheduled[0].from_status == "PENDING"
    [launched] = launcher.launches
    assert launched.attempt_id == attempt.id
    assert launched.job_id == job_id
    assert launched.placement == attempt.placement  # the attempt's placement, unchanged
    assert launched.team == "team-a"
    assert launched.run_config.job_id == job_id
    assert launched.run_config.attempt_id == attempt.id
    assert launched.run_config.checkpoint_uri.endswith("/" + job_id)
    assert launched.run_config.trainer.steps == 100
    # The launch carries a fresh job-scoped token, stored only as its hash.
    with session_factory() as session:
        tokens = session.query(ApiToken).filter(ApiToken.job_id == job_id).all()
    assert len(tokens) == 1 and tokens[0].revoked_at is None
    assert launched.job_token.startswith("gpj_") and launched.job_token not in tokens[0].token_hash


def test_without_estimated_hours_the_placement_gives_no_odds_of_the_deadline(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    """Its work is the worker's default, not the job's: a P(meet deadline) from it (0 for a job
    with an hour's deadline) would read as a measure of the job."""
    cp = control_plane(settings, session_factory, RecordingLauncher())
    who = principal(session_factory)
    guessed = submit(session_factory, who, estimated_hours=None, deadline_hours=1.0)
    known = submit(session_factory, who, deadline_hours=2.0)

    schedule_once(cp)

    def placed(job_id: str) -> dict[str, object]:
        [event] = [e for e in events(session_factory, job_id) if e.to_status == "SCHEDULED"]
        return dict(event.data)

    assert "no estimated_hours" in str(
        [e.reason for e in events(session_factory, guessed) if e.to_status == "SCHEDULED"]
    )
    assert "p_meet_deadline" not in placed(guessed)
    assert "p_meet_deadline" in placed(known)


def test_a_job_allowed_only_on_demand_gets_on_demand(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    launcher = RecordingLauncher()
    cp = control_plane(settings, session_factory, launcher)
    job_id = submit(session_factory, principal(session_factory), capacity={"types": ["on_demand"]})

    schedule_once(cp)

    [attempt] = attempts(session_factory, job_id)
    assert attempt.capacity_type == CapacityType.ON_DEMAND.value
    assert attempt.price_per_hour == attempt.on_demand_price_per_hour
    assert launcher.launches[0].placement.capacity_type == CapacityType.ON_DEMAND


def test_resources_no_offer_matches_fail_the_job_with_the_reason(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    launcher = RecordingLauncher()
    cp = control_plane(settings, session_factory, launcher)
    job_id = submit(
        session_factory, principal(session_factory), resources={"gpu_models": ["NO-SUCH-GPU"]}
    )

    result = schedule_once(cp)

    assert result.rejected == 1 and not result.placed
    failed = job(session_factory, job_id)
    assert failed.status == JobStatus.FAILED.value
    assert "no offer" in (failed.status_reason or "")
    last = events(session_factory, job_id)[-1]
    assert (last.from_status, last.to_status) == ("PENDING", "FAILED")
    assert "no offer in the catalog matches" in (last.reason or "")
    assert attempts(session_factory, job_id) == []
    assert launcher.launches == []


def test_a_claim_taken_over_by_another_pass_is_not_applied(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    cp = control_plane(settings, session_factory)
    job_id = submit(session_factory, principal(session_factory))
    ours = new_id()
    with transaction(session_factory) as session:
        claimed = repo.claim_pending(
            session, token=ours, now=cp.clock(), ttl=timedelta(seconds=60), limit=10
        )
    assert claimed == [job_id]
    with transaction(session_factory) as session:  # our claim lapsed; another pass took the job
        session.execute(update(Job).where(Job.id == job_id).values(lock_token=new_id()))
    before = len(events(session_factory, job_id))
    offer = cp.catalog.offers[0]
    plan = Plan(
        offer=offer,
        capacity_type=CapacityType.ON_DEMAND,
        nodes=1,
        price_per_hour=offer.on_demand_price or 1.0,
        reservation_id=None,
        checkpoint_every_seconds=None,
        expected_cost=1.0,
        expected_finish=cp.clock() + timedelta(hours=1),
        p_meet_deadline=1.0,
    )
    place = Place(job_id=job_id, plan=plan, reason="test")
    result = ScheduleResult()

    for decision in (place, Reject(job_id, "late reject"), Defer(job_id, "late defer")):
        _apply(cp, decision, token=ours, result=result)

    assert result == ScheduleResult()
    unchanged = job(session_factory, job_id)
    assert unchanged.status == JobStatus.PENDING.value
    assert unchanged.status_reason is None
    assert unchanged.lock_token not in (None, ours)
    assert unchanged.attempts_count == 0
    assert attempts(session_factory, job_id) == []
    assert len(events(session_factory, job_id)) == before


def test_a_places_placement_is_what_the_attempt_the_launch_and_the_ledger_carry(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    """One value from decision to bill: the Placement of the Place that decide() returned is,
    field for field, the attempt row's, the LaunchRequest's and the usage ledger row's."""
    launcher = RecordingLauncher()
    clock = Clock()
    cp = control_plane(settings, session_factory, launcher, clock)
    job_id = submit(session_factory, principal(session_factory))
    ours = new_id()
    with transaction(session_factory) as session:
        repo.claim_pending(session, token=ours, now=clock.now, ttl=timedelta(minutes=1), limit=1)
    offer = next(o for o in cp.catalog.offers if o.on_demand_price and o.region)
    plan = Plan(
        offer=offer,
        capacity_type=CapacityType.ON_DEMAND,
        nodes=2,
        price_per_hour=2 * (offer.on_demand_price or 0.0),
        reservation_id=None,
        checkpoint_every_seconds=600.0,
        expected_cost=1.0,
        expected_finish=clock.now + timedelta(hours=1),
        p_meet_deadline=1.0,
    )
    placed = plan.placement
    assert placed.offer_key == offer.key
    result = ScheduleResult()

    _apply(cp, Place(job_id=job_id, plan=plan, reason="test"), token=ours, result=result)
    [attempt_id] = result.placed
    launch_attempt(cp, attempt_id=attempt_id)
    reconcile_once(cp)  # the launcher says it runs: the attempt starts
    clock.advance(3600)
    launcher.observations[handle_of(attempt_id)] = Observation(ObservedState.SUCCEEDED, 0)
    reconcile_once(cp)  # it ended: closed and priced

    [attempt] = attempts(session_factory, job_id)
    assert attempt.placement == placed
    [launched] = launcher.launches
    assert launched.placement == placed
    with read_session(session_factory) as session:
        [row] = ledger_rows(
            session, team_id=None, start=clock.now - timedelta(days=1), end=clock.now
        )
    assert row.placement == placed
    assert attempt.cost_microusd == round(placed.price_per_hour * MICRO)  # one hour of it


def test_a_live_claim_keeps_other_passes_off_the_job(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    cp = control_plane(settings, session_factory)
    submit(session_factory, principal(session_factory))
    with transaction(session_factory) as session:
        first = repo.claim_pending(
            session, token=new_id(), now=cp.clock(), ttl=timedelta(seconds=60), limit=10
        )
    assert len(first) == 1

    assert schedule_once(cp).claimed == 0  # claimed by a pass still in progress
    cp.clock.advance(61)  # type: ignore[attr-defined]
    assert schedule_once(cp).claimed == 1  # the claim lapsed: a crashed pass holds nothing


def test_scheduling_twice_makes_one_attempt(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    launcher = RecordingLauncher()
    cp = control_plane(settings, session_factory, launcher)
    job_id = submit(session_factory, principal(session_factory))

    first = schedule_once(cp)
    second = schedule_once(cp)

    assert len(first.placed) == 1
    assert second.claimed == 0 and second.placed == []
    assert len(attempts(session_factory, job_id)) == 1
    assert count(session_factory, JobAttempt) == 1
    assert len(launcher.launches) == 1
    assert [e.to_status for e in events(session_factory, job_id)] == ["PENDING", "SCHEDULED"]


def test_no_spot_and_a_long_deadline_defers(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    launcher = RecordingLauncher(spot=False)
    cp = control_plane(settings, session_factory, launcher)
    job_id = submit(session_factory, principal(session_factory), deadline_hours=200.0)

    result = schedule_once(cp)

    assert result.deferred == 1 and not result.placed
    waiting = job(session_factory, job_id)
    assert waiting.status == JobStatus.PENDING.value
    assert "spot" in (waiting.status_reason or "")
    assert waiting.lock_token is None  # the next pass may look again
    assert attempts(session_factory, job_id) == []
    assert [e.to_status for e in events(session_factory, job_id)] == ["PENDING"]  # no event
    assert launcher.launches == []
    # Spot comes back: the next pass places the job on it.
    launcher.spot = True
    assert len(schedule_once(cp).placed) == 1
    assert attempts(session_factory, job_id)[0].capacity_type == CapacityType.SPOT.value


def test_no_spot_without_a_deadline_runs_on_demand(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    cp = control_plane(settings, session_factory, RecordingLauncher(spot=False))
    job_id = submit(session_factory, principal(session_factory))

    schedule_once(cp)

    assert attempts(session_factory, job_id)[0].capacity_type == CapacityType.ON_DEMAND.value


def test_over_budget_rejects_by_default(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    launcher = RecordingLauncher()
    cp = control_plane(settings, session_factory, launcher)
    cp.budgets = lambda session, teams, now: dict.fromkeys(teams, 0.01)
    job_id = submit(session_factory, principal(session_factory))

    result = schedule_once(cp)

    assert result.rejected == 1
    rejected = job(session_factory, job_id)
    assert rejected.status == JobStatus.FAILED.value
    assert "budget" in (rejected.status_reason or "")
    assert events(session_factory, job_id)[-1].to_status == "FAILED"
    assert attempts(session_factory, job_id) == [] and launcher.launches == []


def test_over_budget_defers_when_the_spec_says_so(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    launcher = RecordingLauncher()
    cp = control_plane(settings, session_factory, launcher)
    budgets: dict[str, float | None] = {}
    cp.budgets = lambda session, teams, now: {t: budgets.get(t, 0.01) for t in teams}
    job_id = submit(
        session_factory, principal(session_factory), capacity={"on_budget_exceeded": "defer"}
    )

    result = schedule_once(cp)

    assert result.deferred == 1
    waiting = job(session_factory, job_id)
    assert waiting.status == JobStatus.PENDING.value
    assert "budget" in (waiting.status_reason or "")
    assert attempts(session_factory, job_id) == [] and launcher.launches == []
    # The budget is raised: the next pass places it.
    budgets[waiting.team_id] = 10_000.0
    assert len(schedule_once(cp).placed) == 1


def test_a_team_budget_covers_only_what_it_can_pay(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    """Budgets are spent within one pass: the second job does not get the first one's money."""
    cp = control_plane(settings, session_factory, RecordingLauncher())
    who = principal(session_factory)
    first = submit(session_factory, who, priority=90, capacity={"types": ["on_demand"]})
    second = submit(session_factory, who, priority=10, capacity={"types": ["on_demand"]})
    schedule_once(control_plane(settings, session_factory, RecordingLauncher()))
    one_job = attempts(session_factory, first)[0].price_per_hour  # 1 estimated hour on-demand
    with transaction(session_factory) as session:  # start over with both pending again
        session.query(JobAttempt).delete()
        session.query(ApiToken).filter(ApiToken.job_id.is_not(None)).delete()
        for job_id in (first, second):
            session.execute(
                update(Job)
                .where(Job.id == job_id)
                .values(status="PENDING", attempts_count=0, lock_token=None)
            )
    cp.budgets = lambda session, teams, now: dict.fromkeys(teams, one_job * 1.5)

    schedule_once(cp)

    assert job(session_factory, first).status == JobStatus.SCHEDULED.value
    assert job(session_factory, second).status == JobStatus.FAILED.value


def _estimate_then_schedule(
    settings: Settings,
    session_factory: sessionmaker[Session],
    spec: dict[str, object],
    who: Principal,
) -> tuple[Plan, JobAttempt]:
    """The estimate's chosen plan, then what the scheduler places for the same spec."""
    cp = control_plane(settings, session_factory)
    with session_factory() as session:
        weighed = planning.weigh(
            session,
            spec=JobSpec.model_validate({"name": "x", "trainer": {"steps": 1000}, **spec}),
            team_id=who.team_id,
            team_name=who.team_name,
            now=cp.clock(),
            catalog=cp.catalog,
            priors=cp.priors,
            settings=settings,
            remaining_budget=None,
        )
    assert weighed.decision == "place" and weighed.plans[0].chosen
    job_id = submit(session_factory, who, trainer={"steps": 1000}, **spec)
    schedule_once(cp)
    [attempt] = attempts(session_factory, job_id)
    return weighed.plans[0].plan, attempt


def _same(plan: Plan, attempt: JobAttempt) -> None:
    assert (attempt.zone, attempt.instance_type, attempt.capacity_type) == (
        plan.offer.zone,
        plan.offer.instance_type,
        plan.capacity_type.value,
    )
    assert attempt.price_per_hour == plan.price_per_hour


def _preempted_attempts(
    session_factory: sessionmaker[Session], like: JobAttempt, *, count: int, seconds: float
) -> None:
    """`count` spot attempts in `like`'s pool that each ran `seconds` and were preempted."""
    columns = {c.key: getattr(like, c.key) for c in JobAttempt.__table__.columns}
    with transaction(session_factory) as session:
        for n in range(count):
            start = like.created_at - timedelta(seconds=(n + 1) * seconds)
            session.add(
                JobAttempt(
                    **columns
                    | {
                        "id": new_id(),
                        "number": 1000 + n,
                        "capacity_type": CapacityType.SPOT.value,
                        "started_at": start,
                        "ended_at": start + timedelta(seconds=seconds),
                        "end_reason": "preempted",
                    }
                )
            )


def test_the_estimates_chosen_plan_is_what_the_scheduler_places(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    """Measured: 1 x A100, 10 h in 24 h: the estimate ranked on-demand first ($24.01) while the
    scheduler placed spot ($14.45)."""
    spec = {"resources": {"gpu_models": ["A100"]}, "estimated_hours": 10, "deadline_hours": 24}
    who = principal(session_factory)
    plan, attempt = _estimate_then_schedule(settings, session_factory, spec, who)
    _same(plan, attempt)
    # What the service learned moves both: the chosen pool preempting a lot sends both elsewhere.
    _preempted_attempts(session_factory, attempt, count=40, seconds=90)
    again, attempt = _estimate_then_schedule(settings, session_factory, spec, who)
    assert again.offer.zone != plan.offer.zone or again.capacity_type != plan.capacity_type
    _same(again, attempt)


def test_a_gang_with_a_deadline_is_placed_as_estimated(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    """Measured: 8 x H100, 72 h in 96 h: none of the 20 plans shown was the scheduler's."""
    spec = {
        "resources": {"gpu_models": ["H100"], "gpus_per_node": 8},
        "estimated_hours": 72,
        "deadline_hours": 96,
    }
    plan, attempt = _estimate_then_schedule(
        settings, session_factory, spec, principal(session_factory)
    )
    _same(plan, attempt)


def _preempt(session_factory: sessionmaker[Session], job_id: str, clock: Clock) -> JobAttempt:
    """The open attempt ends preempted before any checkpoint; the job is pending again."""
    with transaction(session_factory) as session:
        attempt = repo.open_attempt(session, job_id=job_id, for_update=True)
        assert attempt is not None
        attempt.started_at = clock.now
        attempt.ended_at = clock.advance(2)
        attempt.end_reason = "preempted"
        session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(status=JobStatus.PENDING.value, preemptions=Job.preemptions + 1)
        )
        return attempt


def test_a_pool_that_preempts_a_job_before_its_first_checkpoint_is_backed_off_for_it(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    """Measured: with spot preempted every ~2 s, a 60-step job made 75 spot attempts in 3 min
    with 1 step of progress, each one 'spot: cheapest expected cost while slack remains'."""
    clock = Clock()
    cp = control_plane(settings, session_factory, clock=clock)
    job_id = submit(session_factory, principal(session_factory))  # no deadline: spot first
    schedule_once(cp)
    pools = []
    for _ in range(3):
        [*_, attempt] = attempts(session_factory, job_id)
        assert attempt.capacity_type == CapacityType.SPOT.value
        pools.append((attempt.zone, attempt.instance_type))
        _preempt(session_factory, job_id, clock)
        schedule_once(cp)
    assert len(set(pools)) == 3  # each pool that preempted it is avoided for it
    [*_, attempt] = attempts(session_factory, job_id)
    assert attempt.capacity_type == CapacityType.ON_DEMAND.value  # three strikes: spot stops
    # a checkpoint is progress: spot is tried again (the job was placed, so pend it again)
    _preempt(session_factory, job_id, clock)
    with transaction(session_factory) as session:
        session.execute(update(Job).where(Job.id == job_id).values(resume_from_step=10))
    schedule_once(cp)
    [*_, attempt] = attempts(session_factory, job_id)
    assert attempt.capacity_type == CapacityType.SPOT.value


def test_the_trainer_is_told_the_interval_the_cost_model_priced(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    """Every spec but one with every_steps gets its interval in the attempt (and so in the
    trainer's run config): auto is Young/Daly, every_seconds is itself; never the trainer's own
    default, which the cost model cannot see."""
    cp = control_plane(settings, session_factory)
    who = principal(session_factory)
    auto = submit(session_factory, who)
    timed = submit(
        session_factory, who, trainer={"steps": 100, "checkpoint": {"every_seconds": 90}}
    )
    stepped = submit(session_factory, who, trainer={"steps": 100, "checkpoint": {"every_steps": 7}})
    schedule_once(cp)
    [a] = attempts(session_factory, auto)
    assert a.checkpoint_every_seconds is not None and a.checkpoint_every_seconds > 0
    assert attempts(session_factory, timed)[0].checkpoint_every_seconds == 90
    assert attempts(session_factory, stepped)[0].checkpoint_every_seconds is None


def test_a_teams_earlier_run_of_the_trainer_prices_the_next_ones_checkpoints(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    """Young/Daly's interval rests on the checkpoint's stall: a job whose trainer has not
    measured one yet takes what the team's earlier job of the same trainer measured; another
    model, or another team's job, does not."""
    cp = control_plane(settings, session_factory)
    who = principal(session_factory)
    first = submit(session_factory, who)
    schedule_once(cp)
    [a] = attempts(session_factory, first)
    priced_by_default = a.checkpoint_every_seconds
    assert priced_by_default is not None and priced_by_default > 60
    with transaction(session_factory) as session:  # as the progress endpoint records it
        progress = {"step": 40, "total_steps": 100, "checkpoint_step": 40, "checkpoint_stall_s": 3}
        values = {"progress": progress, "checkpoint_stall_s": 3.0}
        session.execute(update(Job).where(Job.id == first).values(**values))

    again = submit(session_factory, who)
    other_model = submit(session_factory, who, trainer={"steps": 100, "args": {"n_layer": 4}})
    other_team = submit(session_factory, principal(session_factory, "team-b"))
    schedule_once(cp)
    learned = attempts(session_factory, again)[0].checkpoint_every_seconds
    assert learned is not None
    # sqrt(2 C MTBF) with C = 3 s instead of the default 30 s, on the same pool
    assert learned == pytest.approx(max(60.0, priced_by_default * (3 / 30) ** 0.5), rel=1e-6)
    assert attempts(session_factory, other_model)[0].checkpoint_every_seconds == priced_by_default
    assert attempts(session_factory, other_team)[0].checkpoint_every_seconds == priced_by_default


def test_the_speeds_a_teams_trainer_measured_choose_between_gpu_models(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    """By the table an L4 is a quarter of an A100, so its $0.75 beats the A100's $3.67 per hour
    of work. This trainer measured 15 samples/s on an L4 and 100 on an A100: the team's next
    job of it goes to the A100; another team's still goes by the table."""
    tabled = settings.model_copy(update={"gpu_speeds": {"A100": 1.0, "L4": 0.25}})
    cp = control_plane(tabled, session_factory)
    spec = {
        "resources": {"gpu_models": ["A100", "L4"], "regions": ["us-central1"]},
        "capacity": {"types": ["on_demand"]},
    }
    who = principal(session_factory)
    first = submit(session_factory, who, **spec)
    schedule_once(cp)
    [on_l4] = attempts(session_factory, first)
    assert on_l4.gpu_model == "L4"
    with transaction(session_factory) as session:  # as the progress endpoint records them
        ended = {"samples_per_s": 15.0, "ended_at": on_l4.created_at, "end_reason": "migrated"}
        session.execute(update(JobAttempt).where(JobAttempt.id == on_l4.id).values(**ended))
        a100 = {
            c: getattr(on_l4, c)
            for c in ("job_id", "team_id", "cloud", "region", "zone", "gpu_count", "nodes")
        }
        session.add(
            JobAttempt(
                **a100, number=2, instance_type="a2-highgpu-1g", gpu_model="A100",
                capacity_type="on_demand", price_per_hour=3.67, on_demand_price_per_hour=3.67,
                samples_per_s=100.0, ended_at=on_l4.created_at, end_reason="succeeded",
            )
        )  # fmt: skip

    again = submit(session_factory, who, **spec)
    other_team = submit(session_factory, principal(session_factory, "team-b"), **spec)
    schedule_once(cp)
    assert attempts(session_factory, again)[0].gpu_model == "A100"
    assert attempts(session_factory, other_team)[0].gpu_model == "L4"
