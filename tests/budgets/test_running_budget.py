"""Budgets hold while jobs run: a job that understates `estimated_hours` is stopped (or paused)
before its team's spend passes the budget.

Measured before: a job submitted with `estimated_hours: 0.001` held $0.066 at submit, then ran
on until its team had spent $0.625 of a $0.60 budget (and $0.751 of $0.722): budgets were
checked only at submit. Here the real scheduler and reconciler run it on the recording launcher
(the reconciler tests' launcher) under a clock the test moves, one reconcile tick at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from api.budgets.enforcement import (
    RunningJob,
    Stop,
    TeamLedger,
    burn_for,
    decide,
    tick_us,
)
from api.budgets.service import budgets, outstanding_holds
from api.models import JobAttempt
from api.money import MICRO, month_start
from api.settings import Settings
from gpujobs.resources import JobStatus
from tests.budgets.support import ADMIN, team_id
from tests.conftest import make_team
from tests.worker.support import (
    Clock,
    RecordingLauncher,
    attempts,
    control_plane,
    events,
    handle_of,
    job,
)
from worker.control import ControlPlane, team_budgets
from worker.launchers.base import ObservedState
from worker.reconciler import reconcile_once
from worker.scheduler import schedule_once

S = JobStatus
TICK_S = 300.0  # the reconcile interval these tests run under
T4 = {"gpu_models": ["T4"], "regions": ["us-east-1"]}
UNDERSTATED = {"trainer": {"steps": 100}, "resources": T4, "estimated_hours": 0.001}


def a_clock() -> Clock:
    """Now, unless this month ends within a day: the hours a test runs must stay in one month."""
    now = datetime.now(UTC).replace(microsecond=0)
    next_month = month_start(month_start(now) + timedelta(days=32))
    return Clock(now if next_month - now > timedelta(days=1) else next_month + timedelta(hours=1))


@dataclass
class World:
    cp: ControlPlane
    launcher: RecordingLauncher
    clock: Clock
    client: TestClient
    factory: sessionmaker[Session]
    tokens: dict[str, dict[str, str]] = field(default_factory=dict)

    def team(self, name: str, budget_usd: float | None) -> dict[str, str]:
        auth = {"Authorization": f"Bearer {make_team(self.factory, name)}"}
        if budget_usd is not None:
            self.set_budget(name, budget_usd)
        self.tokens[name] = auth
        return auth

    def set_budget(self, team: str, usd: float) -> None:
        url = f"/v1/admin/teams/{team}/budget"
        assert self.client.put(url, json={"monthly_usd": usd}, headers=ADMIN).status_code == 200

    def submit(self, team: str, **spec: object) -> str:
        body = {"name": f"understated-{team}", **UNDERSTATED, **spec}
        response = self.client.post("/v1/jobs", json=body, headers=self.tokens[team])
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def start_all(self) -> dict[str, str]:
        """Schedule and start every pending job: job id -> its attempt id. Their trainers
        report their first step (one that never does is stopped: worker.first_report)."""
        placed = schedule_once(self.cp).placed
        reconcile_once(self.cp)
        for launch in [r for r in self.launcher.launches if r.attempt_id in placed]:
            token = {"Authorization": f"Bearer {launch.job_token}"}
            report = {"step": 1, "attempt_id": launch.attempt_id}
            url = f"/v1/jobs/{launch.job_id}/progress"
            assert self.client.post(url, json=report, headers=token).status_code == 200
        return {self.attempt(a).job_id: a for a in placed}

    def attempt(self, attempt_id: str) -> JobAttempt:
        with self.factory() as session:
            found = session.get(JobAttempt, attempt_id)
        assert found is not None and found.started_at is not None
        return found

    def spent(self, team: str) -> int:
        with self.factory() as session:
            (budget,) = budgets(session, team_id=team_id(self.factory, team), now=self.clock.now)
        return budget.spent_microusd

    def tick(self) -> None:
        self.clock.advance(TICK_S)
        reconcile_once(self.cp)

    def stopped(self, attempt_id: str) -> bool:
        return handle_of(attempt_id) in self.launcher.cancels


@pytest.fixture
def world(settings: Settings, session_factory: sessionmaker[Session], client: TestClient) -> World:
    launcher = RecordingLauncher()
    clock = a_clock()
    ticking = settings.model_copy(update={"reconcile_interval_s": TICK_S})
    cp = control_plane(ticking, session_factory, launcher, clock)
    cp.budgets = team_budgets
    return World(cp=cp, launcher=launcher, clock=clock, client=client, factory=session_factory)


def price_microusd(world: World, attempt_id: str) -> int:
    return round(world.attempt(attempt_id).price_per_hour * MICRO)


def run_until_stopped(world: World, *, team: str, attempt_id: str, budget: int) -> int:
    """Reconcile tick by tick for long enough to spend the budget twice over; the spend must
    never pass the budget, and the attempt must be asked to stop. Returns the ticks run."""
    ticks_for_twice = math.ceil(
        2 * budget / burn_for(price_microusd(world, attempt_id), tick_us(TICK_S))
    )
    for ticks in range(1, ticks_for_twice + 1):
        world.tick()
        assert world.spent(team) <= budget
        if world.stopped(attempt_id):
            return ticks
    raise AssertionError(f"still running after {ticks_for_twice} ticks: {world.spent(team)}")


def exit_after_checkpoint(world: World, attempt_id: str) -> None:
    """The trainer got the SIGTERM, checkpointed and exited; the next pass sees it gone."""
    world.launcher.script(attempt_id, ObservedState.CANCELLED, exit_code=75)
    world.tick()


def test_an_understated_job_is_stopped_before_its_team_passes_its_budget(world: World) -> None:
    world.team("team-a", budget_usd=0.60)
    world.team("team-b", budget_usd=100.0)  # a budget with room
    world.team("team-c", budget_usd=None)  # no budget
    jobs = {team: world.submit(team) for team in ("team-a", "team-b", "team-c")}
    held = job(world.factory, jobs["team-a"]).quote_hold_microusd
    assert held is not None and 0 < held < 600_000  # what admission let through
    started = world.start_all()
    attempt = started[jobs["team-a"]]
    assert job(world.factory, jobs["team-a"]).status == S.RUNNING.value

    ticks = run_until_stopped(world, team="team-a", attempt_id=attempt, budget=600_000)
    assert world.spent("team-a") > held  # it outran its quote and ran on until the budget
    running = job(world.factory, jobs["team-a"])
    assert running.status == S.RUNNING.value  # it checkpoints first
    assert running.status_reason is not None
    assert running.status_reason.startswith("budget exceeded: spent $")
    exit_after_checkpoint(world, attempt)

    stopped = job(world.factory, jobs["team-a"])
    assert stopped.status == S.FAILED.value and stopped.restarts == 0
    assert "of team 'team-a''s $0.600 this month" in (stopped.status_reason or "")
    assert "on_budget_exceeded: reject" in (stopped.status_reason or "")
    last = events(world.factory, jobs["team-a"])[-1]
    assert (last.from_status, last.to_status) == (S.RUNNING.value, S.FAILED.value)
    assert last.reason == stopped.status_reason
    assert last.data["end_reason"] == "budget_stopped"
    (closed,) = attempts(world.factory, jobs["team-a"])
    assert closed.end_reason == "budget_stopped" and closed.cost_microusd is not None
    assert closed.cost_microusd == world.spent("team-a") <= 600_000

    # The other teams' jobs ran as long and were not touched.
    for team in ("team-b", "team-c"):
        assert job(world.factory, jobs[team]).status == S.RUNNING.value
        assert not world.stopped(started[jobs[team]])
        burned = burn_for(price_microusd(world, started[jobs[team]]), (ticks + 1) * tick_us(TICK_S))
        assert world.spent(team) == burned


def test_an_understated_job_that_defers_is_paused_and_resumes_from_its_checkpoint(
    world: World,
) -> None:
    world.team("team-a", budget_usd=0.60)
    world.team("team-b", budget_usd=None)
    job_id = world.submit("team-a", capacity={"on_budget_exceeded": "defer"})
    other = world.submit("team-b", capacity={"on_budget_exceeded": "defer"})
    started = world.start_all()
    attempt = started[job_id]

    run_until_stopped(world, team="team-a", attempt_id=attempt, budget=600_000)
    # The SIGTERM made the trainer checkpoint: it reports the step with its job's token.
    (launch,) = [r for r in world.launcher.launches if r.attempt_id == attempt]
    report = {"step": 40, "checkpoint_step": 40, "attempt_id": attempt}
    token = {"Authorization": f"Bearer {launch.job_token}"}
    progress = world.client.post(f"/v1/jobs/{job_id}/progress", json=report, headers=token)
    assert progress.status_code == 200, progress.text
    exit_after_checkpoint(world, attempt)

    paused = job(world.factory, job_id)
    assert paused.status == S.PENDING.value
    assert (paused.restarts, paused.preemptions) == (0, 0)  # neither a failure nor a preemption
    assert not paused.holds_budget  # it waits for budget like a job deferred at submit
    *_, preempted, pending = events(world.factory, job_id)
    assert (preempted.to_status, pending.to_status) == (S.PREEMPTED.value, S.PENDING.value)
    assert pending.reason is not None and pending.reason.startswith("budget exceeded: spent $")
    assert "on_budget_exceeded: defer" in pending.reason
    assert pending.data["end_reason"] == "budget_paused"
    assert world.spent("team-a") <= 600_000
    assert job(world.factory, other).status == S.RUNNING.value  # another team: untouched

    # While the budget does not allow it, it waits.
    world.clock.advance(TICK_S)
    assert schedule_once(world.cp).deferred == 1 and len(attempts(world.factory, job_id)) == 1
    assert job(world.factory, job_id).status == S.PENDING.value
    # A raised budget lets it resume from its checkpoint, holding its quote again.
    world.set_budget("team-a", 5.0)
    assert len(schedule_once(world.cp).placed) == 1
    first, second = attempts(world.factory, job_id)
    assert first.end_reason == "budget_paused" and second.resume_from_step == 40
    assert job(world.factory, job_id).holds_budget


def test_a_running_job_holds_at_least_its_burn_until_the_next_checks(world: World) -> None:
    """The hold follows the burn: past its quote (or without one) a running job still holds
    what it will burn until the next check and the stop after it, so admission and the
    scheduler count it."""
    world.team("team-a", budget_usd=100.0)
    quoted = world.submit("team-a")
    unquoted = world.submit("team-a", name="no-estimate", estimated_hours=None)
    started = world.start_all()
    for _ in range(12):  # an hour: long past the quote of 0.001 h
        world.tick()
    horizon = 2 * tick_us(TICK_S)
    with world.factory() as session:
        held = outstanding_holds(
            session, team_id=team_id(world.factory), now=world.clock.now, horizon_us=horizon
        )
    assert held == {
        quoted: burn_for(price_microusd(world, started[quoted]), horizon),
        unquoted: burn_for(price_microusd(world, started[unquoted]), horizon),
    }


# decide() itself, without a database ---------------------------------------------------------

NOW = datetime(2030, 5, 20, 12, tzinfo=UTC)
TICK = tick_us(60)


def running(job_id: str, **kwargs: object) -> RunningJob:
    fields: dict[str, object] = {
        "job_id": job_id,
        "priority": 50,
        "started_at": NOW - timedelta(hours=1),
        "burn_microusd_per_hour": 600_000,  # $0.01 a tick
        "spent_microusd": 0,
        "hold_microusd": None,
        "on_budget_exceeded": "reject",
    }
    fields.update(kwargs)
    return RunningJob(**fields)  # type: ignore[arg-type]


def ledger(*jobs: RunningJob, spent: int, budget: int = 1_000_000, waiting: int = 0) -> TeamLedger:
    return TeamLedger(
        team_id="t",
        team_name="team-a",
        budget_microusd=budget,
        spent_microusd=spent,
        waiting_held_microusd=waiting,
        running=jobs,
    )


def test_decide_stops_only_what_would_pass_the_budget_before_the_next_checks() -> None:
    job = running("j", spent_microusd=970_000)
    # $0.97 spent + two ticks' burn ($0.02) fit $1.00; one more tick's spend would not.
    assert decide([ledger(job, spent=970_000)], tick_us=TICK) == []
    (stop,) = decide([ledger(job, spent=985_000)], tick_us=TICK)
    assert (stop.job_id, stop.action) == ("j", "reject")
    assert stop.reason.startswith("budget exceeded: spent $0.985 of team 'team-a''s $1.000")
    deferring = running("j", on_budget_exceeded="defer")
    assert [s.action for s in decide([ledger(deferring, spent=985_000)], tick_us=TICK)] == ["defer"]
    # What the team's waiting jobs hold counts too.
    assert decide([ledger(job, spent=970_000, waiting=20_000)], tick_us=TICK) != []


def test_decide_stops_the_job_that_outran_its_quote_and_keeps_the_honest_one() -> None:
    honest = running("honest", hold_microusd=500_000, spent_microusd=100_000, priority=10)
    outran = running("outran", hold_microusd=50_000, spent_microusd=400_000, priority=90)
    # spent $0.50 + honest's $0.40 left + outran's two ticks ($0.02) + $0.09 waiting: $1.01.
    stops = decide([ledger(honest, outran, spent=500_000, waiting=90_000)], tick_us=TICK)
    assert stops == [Stop("outran", "reject", stops[0].reason)]


def test_decide_does_not_stop_a_job_twice_and_counts_its_last_tick() -> None:
    stopping = running("stopping", stopping=True)
    other = running("other")
    # $0.97 + $0.01 (until the stop is seen) + $0.02: fits, nothing more to stop.
    assert decide([ledger(stopping, other, spent=970_000)], tick_us=TICK) == []
    assert [s.job_id for s in decide([ledger(stopping, other, spent=985_000)], tick_us=TICK)] == [
        "other"
    ]
    assert decide([ledger(stopping, spent=999_000)], tick_us=TICK) == []
