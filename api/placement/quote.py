"""quote(): what a job will cost, and when it will finish, under the policy as it will run.

A single option's expected cost (cost_model.evaluate) assumes the job stays on it to the end.
The policy does not: it rides spot while the deadline's slack lasts, waits when spot is gone and
slack allows, falls back to on-demand when the slack is down to its reserve, and returns to
spot when that pays. This simulates exactly that rule (slack.choose, as decide() calls it) over a
two-state availability model of the spot pool (available runs end at the pool's learned
preemption rate for the whole gang; outages last its mean time to availability), many times with
a fixed seed, so one snapshot always gives one quote. Preemptions lose the work since the last
checkpoint (just the checkpoint when the trainer saves on the notice); every new attempt spends
the restart time, billed.

HOLD_PERCENTILE is what admission holds of a team's budget: a job costs more than its hold in
about one run in ten, and the hold is released as the job spends it or ends.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from api.placement.options import Option, interval
from api.placement.slack import Choice, SlackView, choose
from api.placement.snapshot import JobState

RUNS = 128
SEED = 20240
HOLD_PERCENTILE = 0.9
# Steps per simulated window: the quote's time resolution (coarser than decide()'s own tick on
# long windows, which changes the quote by much less than its spread).
STEPS = 240


@dataclass(frozen=True, slots=True)
class Quote:
    expected_cost: float  # USD, mean over the simulated runs
    hold_cost: float  # USD, the HOLD_PERCENTILE quantile: what budgets hold
    expected_hours: float  # wall-clock hours to finish, mean
    p_meet_deadline: float  # share of runs that finish by the deadline (1 without one)
    spot_share: float  # share of billed hours on spot


def quote(
    job: JobState,
    *,
    spot: Option | None,
    on_demand: Option | None,
    reserved: Option | None,
    spot_available_now: bool,
    restart_hours: float,
    hours_left: float | None,
    runs: int = RUNS,
    seed: int = SEED,
) -> Quote | None:
    """The policy's quote for the job's remaining work; None when nothing could run it."""
    work = job.remaining_hours
    if reserved is not None:
        hours = work + restart_hours
        meet = 1.0 if hours_left is None or hours <= hours_left else 0.0
        return Quote(0.0, 0.0, hours, meet, 0.0)
    if spot is None and on_demand is None:
        return None
    rng = random.Random(seed)
    sims = [
        _run(job, spot, on_demand, spot_available_now, restart_hours, hours_left, rng)
        for _ in range(runs)
    ]
    costs = sorted(s[0] for s in sims)
    if any(math.isinf(c) for c in costs):
        return Quote(math.inf, math.inf, math.inf, 0.0, 1.0)
    spot_hours = sum(s[3] for s in sims)
    billed = sum(s[4] for s in sims)
    return Quote(
        expected_cost=sum(costs) / runs,
        hold_cost=costs[min(runs - 1, math.ceil(HOLD_PERCENTILE * runs) - 1)],
        expected_hours=sum(s[1] for s in sims) / runs,
        p_meet_deadline=sum(s[2] for s in sims) / runs,
        spot_share=spot_hours / billed if billed > 0 else 0.0,
    )


def _run(
    job: JobState,
    spot: Option | None,
    od: Option | None,
    available: bool,
    restart: float,
    hours_left: float | None,
    rng: random.Random,
) -> tuple[float, float, bool, float, float]:
    """One simulated run: (cost, hours to finish, met the deadline, spot hours, billed hours)."""
    spot_tau = interval(job, spot) / 3600.0 if spot is not None else math.inf
    od_tau = interval(job, od) / 3600.0 if od is not None else math.inf
    ckpt = job.checkpoint_cost_seconds / 3600.0
    notice = job.spec.trainer.checkpoint.on_preemption
    rate = spot.risk.preemption_rate if spot is not None else 0.0
    mtta = max(spot.risk.mtta_hours, 1e-6) if spot is not None else 1.0
    total_work = job.remaining_hours
    window = hours_left if hours_left is not None else None
    horizon = window if window is not None else max(24.0 * 30, 20.0 * total_work)
    g = max(horizon / STEPS, 1.0 / 60.0)
    initial_slack = (window - total_work - restart) if window is not None else 0.0
    ratio = (
        (od.price_per_hour / spot.price_per_hour) if spot and od and spot.price_per_hour else 1.0
    )

    t = cost = spot_hours = billed = 0.0
    work = total_work
    on = Choice.WAIT
    changeover = 0.0  # restart hours the current attempt still has to go through
    since_ckpt = 0.0
    # Time to the pool's next state change, drawn fresh per state (memoryless).
    until_flip = rng.expovariate(rate) if available and rate > 0 else math.inf
    if not available:
        until_flip = rng.expovariate(1.0 / mtta)
    limit = horizon * 4 if window is not None else horizon
    while work > 1e-9:
        if t >= limit:
            # Never finishing within four windows (or a month without a deadline): finish the
            # rest on the cheapest option's expected terms so the quote stays finite and honest.
            fallback = od or spot
            cost += work * (fallback.price_per_hour if fallback is not None else 0.0)
            t += work
            break
        choice = _choose(
            job,
            spot,
            od,
            on,
            available,
            changeover,
            work,
            t,
            window,
            restart,
            g,
            initial_slack,
            ratio,
        )
        if choice is not on:
            if choice is not Choice.WAIT:
                changeover = restart
            on = choice
            since_ckpt = 0.0
        if on is Choice.SPOT and not available:
            on = Choice.WAIT
        # Nothing the rule looks at changes while spot runs or while on-demand runs without spot
        # to return to: jump to the pool's next change (the finish is caught below).
        steady = (on is Choice.SPOT and available) or (on is Choice.ON_DEMAND and not available)
        step = until_flip if steady and math.isfinite(until_flip) else min(g, until_flip)
        if on is not Choice.WAIT:
            option = spot if on is Choice.SPOT else od
            price = option.price_per_hour if option is not None else 0.0
            tau = spot_tau if on is Choice.SPOT else od_tau
            run = step
            cost += run * price
            billed += run
            if on is Choice.SPOT:
                spot_hours += run
            setup = min(changeover, run)
            changeover -= setup
            useful = (run - setup) / (1.0 + ckpt / tau) if math.isfinite(tau) else run - setup
            if useful >= work:
                finish_run = setup + work * (1.0 + (ckpt / tau if math.isfinite(tau) else 0.0))
                cost -= (run - finish_run) * price
                billed -= run - finish_run
                if on is Choice.SPOT:
                    spot_hours -= run - finish_run
                t += finish_run
                work = 0.0
                break
            work -= useful
            since_ckpt = (since_ckpt + useful) % tau if math.isfinite(tau) else since_ckpt + useful
        t += step
        until_flip -= step
        if until_flip <= 1e-12:
            available = not available
            if available:
                until_flip = rng.expovariate(rate) if rate > 0 else math.inf
            else:
                until_flip = rng.expovariate(1.0 / mtta)
                if on is Choice.SPOT:
                    # Preempted: the work since the last checkpoint is lost (only the save itself
                    # when the trainer checkpoints on the notice).
                    lost = ckpt if notice else since_ckpt
                    work = min(total_work, work + lost)
                    since_ckpt = 0.0
                    on = Choice.WAIT
    met = window is None or t <= window + 1e-9
    return cost, t, met, spot_hours, billed


def _choose(
    job: JobState,
    spot: Option | None,
    od: Option | None,
    on: Choice,
    available: bool,
    changeover: float,
    work: float,
    t: float,
    window: float | None,
    restart: float,
    g: float,
    initial_slack: float,
    ratio: float,
) -> Choice:
    """decide()'s choice (policy._choice) in the simulated state."""
    spot_ok = spot is not None and available
    if od is None:
        return Choice.SPOT if spot_ok else Choice.WAIT
    if not spot_ok and (on is not Choice.WAIT or spot is None):
        return Choice.ON_DEMAND
    if window is None:
        return Choice.SPOT if spot_ok else Choice.ON_DEMAND
    rate = spot.risk.preemption_rate if spot is not None else 0.0
    lifetime = 1.0 / rate if rate > 0 else math.inf
    view = SlackView(
        hours_left=window - t,
        work_left=work,
        on=on,
        changeover_left=changeover,
        spot_available=spot_ok,
        restart_hours=restart,
        step_hours=g,
        initial_slack=initial_slack,
        window_hours=window,
        spot_lifetime_hours=lifetime,
        price_ratio=ratio,
    )
    return choose(view)
