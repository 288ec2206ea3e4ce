"""quote(): what a job will cost, and when it will finish, under the policy as it will run.

A single option's expected cost (cost_model.evaluate) assumes the job stays on it to the end.
The policy does not: it rides spot while the deadline's slack lasts, waits when spot is gone and
slack allows, falls back to on-demand when the slack is down to its reserve, and returns to
spot when that pays, holding a standby beside on-demand where the launcher can. This simulates
exactly that rule over the spot pool's availability: at each simulated moment it asks the verdict
decide() asks (api.placement.verdict), with decide()'s reaction time, restart time and reserve,
many times with a fixed seed, so one snapshot always gives one quote. Where the quote departs
from decide() on purpose, run() says so.

The pool alternates available and unavailable runs. Their means are the pool's learned
preemption rate (for the whole gang) and its mean time to availability; their shapes are the
pool's burstiness: in the traces a pool's run lengths vary two to three times more than a
memoryless model's, most spot time coming in a few long runs between bursts of short ones. A
memoryless model with the right means spreads preemptions evenly over every window, so it sends
tight jobs to on-demand far more often than the pool does (measured on the traces: +30% on jobs
that need 90% of their window). Runs are therefore drawn from a two-phase hyperexponential with
the learned mean and coefficient of variation (balanced means; exponential at cv <= 1), and the
run in progress at submit from its residual life, which is what "available now" tells.
Preemptions lose the work since the last checkpoint (just the checkpoint when the trainer saves
on the notice); every new attempt spends the restart time, billed.

HOLD_PERCENTILE is what admission holds of a team's budget: a job costs more than its hold in
about one run in ten, and the hold is released as the job spends it or ends. Never less than the
expected cost, though: with a rare, costly tail (a few runs forced onto on-demand) the 90th
percentile can sit below the mean, and holds summed over a team's jobs would then fall short of
what those jobs are expected to spend.
"""

from __future__ import annotations

import math
import random
import statistics
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import accumulate

from api.placement.options import Option, interval, work_hours
from api.placement.situation import Situation
from api.placement.slack import Choice, reserve
from api.placement.verdict import Moment, ruling, slack_view
from gpujobs.spec import MAX_PLANNED_HOURS

RUNS = 128
SEED = 20240
HOLD_PERCENTILE = 0.9
# Steps per simulated window: the quote's time resolution where nothing forces a finer one
# (waiting runs up to the reserve exactly; a coarser step only delays a return to spot).
STEPS = 240
# The work one run simulates (hours on the job's reference GPU, as JobState counts them): at
# most the longest a spec may estimate. The rest (work counted
# from a rate past any bound, in a row written before gpujobs.progress held) is priced on the
# fallback's terms at once, as a run that outlasts its window is: simulated pool flip by pool
# flip, 1e300 hours of it kept the quote, and the estimate waiting on it, running for good.
SIMULATED_WORK_HOURS = float(MAX_PLANNED_HOURS)


@dataclass(frozen=True, slots=True)
class Quote:
    expected_cost: float  # USD, mean over the simulated runs
    hold_cost: float  # USD, the HOLD_PERCENTILE quantile: what budgets hold
    expected_hours: float  # wall-clock hours to finish, mean
    p_meet_deadline: float  # share of runs that finish by the deadline (1 without one)
    spot_share: float  # share of billed hours on spot
    # USD, the likely cost: the run costs' median weighed by 1 / cost (likely()), the figure
    # with the least relative error to the bill over the runs. Spot costs are right-skewed (a
    # few windows force on-demand), so most jobs land nearer this than the expected cost.
    typical_cost: float


@dataclass(frozen=True, slots=True)
class Runs:
    """Run lengths (hours) of one state of a spot pool: with probability `p` an exponential of
    rate `fast`, else one of rate `slow`. The balanced-means fit of a mean and a coefficient of
    variation; cv <= 1 is the exponential; an infinite mean is a run that never ends."""

    p: float
    fast: float
    slow: float

    @classmethod
    def fit(cls, mean: float, cv: float) -> Runs:
        if not math.isfinite(mean):
            return cls(1.0, 0.0, 0.0)
        mean = max(mean, 1e-6)
        if cv <= 1.0:
            return cls(1.0, 1.0 / mean, 1.0 / mean)
        square = cv * cv
        p = 0.5 * (1.0 + math.sqrt((square - 1.0) / (square + 1.0)))
        return cls(p, 2.0 * p / mean, 2.0 * (1.0 - p) / mean)

    def fresh(self, rng: random.Random) -> float:
        """A run that starts now."""
        rate = self.fast if rng.random() < self.p else self.slow
        return rng.expovariate(rate) if rate > 0 else math.inf

    def residual(self, rng: random.Random) -> float:
        """The rest of the run in progress at a random instant: its phase is drawn by the time
        each phase occupies (long runs are the likelier to be in progress), then memoryless."""
        if self.fast <= 0:
            return math.inf
        fast_time = self.p / self.fast
        slow_time = (1.0 - self.p) / self.slow if self.slow > 0 else math.inf
        share = fast_time / (fast_time + slow_time) if math.isfinite(slow_time) else 0.0
        rate = self.fast if rng.random() < share else self.slow
        return rng.expovariate(rate) if rate > 0 else math.inf


def hold_of(costs: Sequence[float]) -> float:
    """What budgets hold of sorted run costs: the HOLD_PERCENTILE quantile, at least the mean."""
    percentile = costs[min(len(costs) - 1, math.ceil(HOLD_PERCENTILE * len(costs)) - 1)]
    return max(percentile, sum(costs) / len(costs))


def likely(costs: Sequence[float]) -> float:
    """The point figure for a bill judged by its relative error: the median of sorted run costs
    weighed by 1 / cost, which minimises the mean |figure - cost| / cost over the runs. Where
    runs split between riding spot and a fall to on-demand, the plain median can sit between the
    two and near neither. It sits at or below the plain median: overquoting a bill twice over is
    an error of 1, underquoting it by half one of 0.5."""
    if costs[0] <= 0.0:
        return statistics.median(costs)
    seen = list(accumulate(1.0 / c for c in costs))
    return costs[bisect_left(seen, seen[-1] / 2.0)]


def quote(
    sit: Situation,
    *,
    reserved: Option | None,
    spot_available_now: bool,
    runs: int = RUNS,
    seed: int = SEED,
) -> Quote | None:
    """The policy's quote for the job's remaining work in `sit`; None when nothing could run it.

    The spot pool simulated is `sit.pool` (the one the job runs on, or waits for). The reaction
    time is `sit.step_hours`, decide()'s, which its safety net and reserve allow for; None: the
    quote's own resolution."""
    job, restart_hours, hours_left = sit.job, sit.restart_hours, sit.hours_left
    spot, on_demand = sit.pool, sit.on_demand
    if reserved is not None:
        hours = work_hours(job, reserved) + restart_hours
        meet = 1.0 if hours_left is None or hours <= hours_left else 0.0
        return Quote(0.0, 0.0, hours, meet, 0.0, 0.0)
    if spot is None and on_demand is None:
        return None
    rng = random.Random(seed)
    sim = _Sim(sit)
    sims = [sim.run(spot_available_now, rng) for _ in range(runs)]
    costs = sorted(s[0] for s in sims)
    if any(math.isinf(c) for c in costs):
        return Quote(math.inf, math.inf, math.inf, 0.0, 1.0, math.inf)
    spot_hours = sum(s[3] for s in sims)
    billed = sum(s[4] for s in sims)
    return Quote(
        expected_cost=sum(costs) / runs,
        hold_cost=hold_of(costs),
        expected_hours=sum(s[1] for s in sims) / runs,
        p_meet_deadline=sum(s[2] for s in sims) / runs,
        spot_share=spot_hours / billed if billed > 0 else 0.0,
        typical_cost=likely(costs),
    )


@dataclass(slots=True)
class _Run:
    """One simulated run's state: the clock, the bill, the work left, what runs and the spot
    pool's next change. Its transitions are the policy's moves and the pool's."""

    work: float  # hours of the situation's unit GPU
    available: bool  # the spot pool has capacity
    until_flip: float  # hours to the pool's next change
    t: float = 0.0
    cost: float = 0.0
    spot_hours: float = 0.0
    billed: float = 0.0
    on: Choice = Choice.WAIT
    changeover: float = 0.0  # restart hours the current attempt still has to go through
    since_ckpt: float = 0.0  # wall hours run since the last checkpoint
    started: float = 0.0  # when the current attempt started
    held: float | None = None  # a standby's changeover hours left to its handover

    def move(self, choice: Choice, restart: float) -> None:
        """decide()'s verdict: a new attempt where it changes what runs (none to wait); spot
        while the pool is out starts nothing."""
        if choice is not self.on:
            if choice is not Choice.WAIT:
                self.changeover = restart
                self.started = self.t
            self.on = choice
            self.since_ckpt = 0.0
        if self.on is Choice.SPOT and not self.available:
            self.on = Choice.WAIT

    def hold(self, changeover: float) -> None:
        """A standby starts on spot beside on-demand: its changeover runs while on-demand
        trains."""
        self.held = changeover

    def hand_over(self) -> None:
        """The standby, through its changeover, takes over from on-demand with none left."""
        self.on, self.changeover, self.started, self.held = Choice.SPOT, 0.0, self.t, None
        self.since_ckpt = 0.0

    def drop_standby(self) -> None:
        """It left on-demand, or the standby's spot went with the pool."""
        self.held = None

    def bill_standby(self, step: float, price: float) -> None:
        assert self.held is not None
        self.cost += step * price
        self.billed += step
        self.spot_hours += step
        self.held -= step

    def run_for(self, step: float, price: float, overhead: float, pace: float, tau: float) -> bool:
        """The attempt runs `step` hours, billed at `price`: its changeover first, then work at
        `pace` wall hours per hour, stalled by checkpoints (`overhead`) every `tau`. True when
        the work is done within it (the clock and bill stop at the finish)."""
        on_spot = self.on is Choice.SPOT
        run = step
        self.cost += run * price
        self.billed += run
        if on_spot:
            self.spot_hours += run
        setup = min(self.changeover, run)
        self.changeover -= setup
        useful = (run - setup) / overhead / pace
        if useful >= self.work:
            extra = run - (setup + self.work * overhead * pace)
            self.cost -= extra * price
            self.billed -= extra
            if on_spot:
                self.spot_hours -= extra
            self.t += run - extra
            self.work = 0.0
            return True
        self.work -= useful
        ran_useful = useful * pace  # wall hours since the last checkpoint
        self.since_ckpt = (
            (self.since_ckpt + ran_useful) % tau
            if math.isfinite(tau)
            else self.since_ckpt + ran_useful
        )
        return False

    def advance(self, step: float) -> bool:
        """The clock moves on `step` hours; True when the pool changes then."""
        self.t += step
        self.until_flip -= step
        return self.until_flip <= 1e-12

    def preempt(self, lost: float, total_work: float) -> None:
        """Spot is reclaimed: the work since the last checkpoint (`lost`) is to be done again."""
        self.work = min(total_work, self.work + lost)
        self.since_ckpt = 0.0
        self.on = Choice.WAIT

    def close_out(self, price: float) -> None:
        """The work left, done at once at `price` an hour of work (not counted as billed hours)."""
        self.cost += self.work * price
        self.t += self.work
        self.work = 0.0

    def finish_beyond(self, hours: float, price: float) -> None:
        """Work past what one run simulates, on the fallback's terms at once."""
        self.cost += hours * price
        self.billed += hours
        self.t += hours


class _Sim:
    """One job's quote set-up; run() is one simulated run of the policy."""

    def __init__(self, sit: Situation) -> None:
        job, spot, od = sit.job, sit.pool, sit.on_demand
        self.sit, self.job, self.spot, self.od = sit, job, spot, od
        # The situation decide() would judge at each simulated moment: the pool there or out,
        # and (with one held) no other standby to ask about.
        self.up = replace(sit, spot=spot)
        self.out = replace(sit, spot=None)
        self.holding = replace(sit, spot=spot, standby=False)
        self.restart = sit.restart_hours
        self.spot_tau = interval(job, spot) / 3600.0 if spot is not None else math.inf
        self.od_tau = interval(job, od) / 3600.0 if od is not None else math.inf
        self.ckpt = job.checkpoint_cost_seconds / 3600.0
        self.notice = job.spec.trainer.checkpoint.on_preemption
        lifetime = spot.lifetime_hours if spot is not None else math.inf
        mtta = max(spot.risk.mtta_hours, 1e-6) if spot is not None else 1.0
        self.up_runs = Runs.fit(lifetime, spot.up_cv if spot is not None else 1.0)
        self.down_runs = Runs.fit(mtta, spot.down_cv if spot is not None else 1.0)
        # Work in hours of the situation's unit GPU (decide()'s: on-demand's, else spot's)
        simulated = min(job.remaining_hours, SIMULATED_WORK_HOURS)
        self.total_work = simulated * sit.unit
        self.beyond = (job.remaining_hours - simulated) * sit.unit if simulated > 0 else 0.0
        self.left = sit.hours_left
        horizon = self.left if self.left is not None else max(24.0 * 30, 20.0 * self.total_work)
        self.horizon = horizon
        self.stride = max(horizon / STEPS, 1.0 / 60.0)
        # decide()'s view of the deadline, as it computes it: only the reaction time may be the
        # quote's own resolution.
        self.terms = sit.terms(
            step_hours=sit.step_hours if sit.step_hours is not None else self.stride
        )
        self.g = self.terms.step_hours
        self.spot_pace = self.terms.spot_pace
        # (checkpoint overhead, wall hours per hour of work, checkpoint interval) on each
        self.paces = {
            on: (1.0 + (self.ckpt / tau if math.isfinite(tau) else 0.0), pace, tau)
            for on, tau, pace in (
                (Choice.SPOT, self.spot_tau, self.spot_pace),
                (Choice.ON_DEMAND, self.od_tau, 1.0),
            )
        }

    def run(self, available: bool, rng: random.Random) -> tuple[float, float, bool, float, float]:
        """(cost, hours to finish, met the deadline, spot hours, billed hours)."""
        spot, od, restart = self.spot, self.od, self.restart
        until_flip = self.up_runs.residual(rng) if available else self.down_runs.residual(rng)
        if spot is None:
            available, until_flip = False, math.inf
        s = _Run(work=self.total_work, available=available, until_flip=until_flip)
        limit = self.horizon * 4 if self.left is not None else self.horizon
        while s.work > 1e-9:
            if s.t >= limit:
                # Never finishing within four windows (or a month without a deadline): finish
                # the rest on the cheapest option's expected terms so the quote stays finite.
                fallback = od or spot
                s.close_out(fallback.price_per_hour if fallback is not None else 0.0)
                break
            # The simulated state as decide()'s verdict (api.placement.verdict) takes it.
            sit = (self.holding if s.held is not None else self.up) if s.available else self.out
            at = Moment(
                None if self.left is None else self.left - s.t,
                s.work,
                s.work * self.spot_pace,
                s.on,
                s.changeover,
                math.inf if s.on is Choice.WAIT else s.t - s.started,
                # Never "held" here, as before the verdict was shared: the quote does not model
                # decide()'s stay on a spot pool that on-demand can no longer beat
                # (slack._late_either_way); changing that would change every such quote.
                False,
            )
            judged = ruling(sit, at, self.terms)
            choice = judged.verdict.choice
            if spot is None and od is not None and s.on is Choice.WAIT:
                # The quote's own: with no spot pool at all it runs on-demand at once, where
                # decide() waits out its slack first for the spot that cannot come.
                choice = Choice.ON_DEMAND
            if s.on is Choice.ON_DEMAND and s.available and self.up.standby:
                # Make-before-break (decide()'s Standby): where the rule moves to spot, or where
                # one pays, a standby takes its changeover while on-demand trains, then takes
                # over with none left.
                if s.held is None and judged.standby is not None:
                    s.hold(restart + self.g)
                if s.held is not None:
                    if s.held <= 1e-12:
                        s.hand_over()
                    choice = s.on
            elif s.on is not Choice.ON_DEMAND or not s.available:
                s.drop_standby()
            s.move(choice, restart)
            # Hours to the next simulated decision. Nothing the rule looks at changes while spot
            # runs or while on-demand runs without spot to return to: jump to the pool's next
            # change (the finish is caught by run_for).
            if (s.on is Choice.SPOT and s.available) or (
                s.on is Choice.ON_DEMAND and not s.available
            ):
                # A pool that never changes: run to the finish at once.
                overhead, pace, _ = self.paces[s.on]
                step = min(s.until_flip, s.changeover + s.work * overhead * pace + 1.0)
            elif s.on is Choice.WAIT and at.hours_left is not None:
                # Wait exactly up to the reserve: slack falls an hour per hour waited while
                # the reserve falls slower, so this step never passes the point to leave. (The
                # rule's view where the verdict needed none: no on-demand to fall back on.)
                view = judged.view or slack_view(sit, at, self.terms)
                margin = view.hours_left - view.work_left - restart - self.g - reserve(view)
                step = min(self.stride, s.until_flip, max(self.g, margin))
            else:
                step = min(self.stride, s.until_flip)
            if s.held is not None:
                step = max(min(step, s.held), 1e-9)
                s.bill_standby(step, spot.price_per_hour)  # type: ignore[union-attr]  # held: spot set
            if s.on is not Choice.WAIT:
                option = spot if s.on is Choice.SPOT else od
                price = option.price_per_hour if option is not None else 0.0
                if s.run_for(step, price, *self.paces[s.on]):
                    break
            if s.advance(step):
                self._flip(s, rng)
        if self.beyond > 0:
            fallback = od or spot
            s.finish_beyond(self.beyond, fallback.price_per_hour if fallback is not None else 0.0)
        met = self.left is None or s.t <= self.left + 1e-9
        return s.cost, s.t, met, s.spot_hours, s.billed

    def _flip(self, s: _Run, rng: random.Random) -> None:
        """The pool changes: a fresh run of the other state; spot running on it is preempted."""
        s.available = not s.available
        if s.available:
            s.until_flip = self.up_runs.fresh(rng)
            return
        s.until_flip = self.down_runs.fresh(rng)
        if s.on is Choice.SPOT:
            # Preempted: the work since the last checkpoint is lost (only the save itself when
            # the trainer checkpoints on the notice).
            lost = (self.ckpt if self.notice else s.since_ckpt) / self.spot_pace
            s.preempt(lost, self.total_work)
