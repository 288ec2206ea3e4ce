"""Expected cost and finish time of a job's remaining work on one option, with spot risk.

Model (hours throughout). Running costs checkpoint overhead C per interval tau, so W hours of
work need W * (1 + C / tau) hours of running. A spot job is preempted as a Poisson process with
rate lambda per running hour (the whole gang's: Priors.gang_rate); each preemption loses the work
since the last checkpoint (tau / 2 on average, or just C when the trainer checkpoints on the
notice), costs a restart delay d that is billed, and a wait of MTTA hours (unbilled) until spot is
back. Expected running hours solve H = W (1 + C/tau) + lambda H (lost + d).
Reserved capacity is prepaid: its marginal cost is 0, which is why it is used first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpujobs.spec import CapacityType

# The defaults everything else takes from here: provisioning + restore of a new attempt (the
# traces' paper's changeover delay), and the stall of one checkpoint until the trainer measures it.
RESTART_HOURS = 0.2
# The local launcher's: no node to provision, only a process to start (torch import, restore from
# the checkpoint store); up to about 35 s measured on a busy 2-core machine.
LOCAL_RESTART_HOURS = 0.01
CHECKPOINT_COST_SECONDS = 30.0
MIN_CHECKPOINT_SECONDS = 60.0
# The shortest interval the model takes from a spec: `every_seconds` and `estimated_hours` only
# need be > 0, and an interval of a subnormal float of seconds makes C / tau infinite (a plan
# priced null). A trainer checks its interval at step boundaries; no step is this short.
SHORTEST_CHECKPOINT_SECONDS = 1e-3
MAX_CHECKPOINT_SECONDS = 24 * 3600.0
# Beyond this mean count of preemptions P(deadline) is taken from a normal, not summed term by
# term: a job of absurd work (a rate no bound caught) made the sum run for minutes.
EXACT_POISSON_MEAN = 10_000.0
# Beyond this fraction of time lost to preemptions a spot option is treated as unusable.
MAX_LOSS_FRACTION = 0.9


def young_daly_interval(checkpoint_cost_seconds: float, preemption_rate_per_hour: float) -> float:
    """Checkpoint interval (seconds) minimising expected overhead: sqrt(2 * C * MTBF).

    Clamped to [1 min, 24 h]; no preemption risk gives the upper bound."""
    if checkpoint_cost_seconds <= 0:
        return MIN_CHECKPOINT_SECONDS
    if preemption_rate_per_hour <= 0:
        return MAX_CHECKPOINT_SECONDS
    mtbf_seconds = 3600.0 / preemption_rate_per_hour
    interval = math.sqrt(2.0 * checkpoint_cost_seconds * mtbf_seconds)
    return min(MAX_CHECKPOINT_SECONDS, max(MIN_CHECKPOINT_SECONDS, interval))


@dataclass(frozen=True, slots=True)
class Risk:
    """What a capacity option risks; zero rate for on-demand and reserved."""

    preemption_rate: float = 0.0  # per running hour, whole job
    mtta_hours: float = 0.0
    restart_hours: float = RESTART_HOURS
    checkpoint_cost_hours: float = CHECKPOINT_COST_SECONDS / 3600.0
    checkpoint_on_notice: bool = True


@dataclass(frozen=True, slots=True)
class Outcome:
    expected_cost: float  # USD, marginal (0 on reserved capacity)
    expected_hours: float  # wall-clock hours until done, from now
    p_meet_deadline: float
    checkpoint_every_seconds: float
    running_hours: float  # billed hours


def checkpoint_seconds(
    *,
    every_seconds: float | None,
    every_steps: int | None,
    step_seconds: float | None,
    checkpoint_cost_seconds: float,
    preemption_rate_per_hour: float,
) -> float:
    """The interval the trainer will actually use, as the cost model must see it.

    The spec's own interval wins; `every_steps` becomes seconds by the step time when it is known
    (otherwise Young/Daly stands in); neither set (`auto`) is Young/Daly, which the scheduler
    tells the trainer, so the trainer's own default never applies to a scheduled attempt."""
    if every_seconds is not None:
        return max(every_seconds, SHORTEST_CHECKPOINT_SECONDS)
    if every_steps is not None and step_seconds is not None and step_seconds > 0:
        return max(every_steps * step_seconds, SHORTEST_CHECKPOINT_SECONDS)
    return young_daly_interval(checkpoint_cost_seconds, preemption_rate_per_hour)


def loss_fraction(risk: Risk, checkpoint_every_seconds: float) -> float:
    """Share of running time lost to preemptions (work since the checkpoint plus the restart)."""
    tau = checkpoint_every_seconds / 3600.0
    lost = risk.checkpoint_cost_hours if risk.checkpoint_on_notice else tau / 2.0
    return risk.preemption_rate * (lost + risk.restart_hours)


def evaluate(
    *,
    work_hours: float,
    price_per_hour: float,
    capacity: CapacityType,
    risk: Risk,
    hours_to_deadline: float | None,
    checkpoint_every_seconds: float | None = None,
    already_running: bool = False,
) -> Outcome:
    """Expected cost, finish and P(deadline) of the remaining work on one option.

    `price_per_hour` is the whole job's; `already_running` skips the first restart delay."""
    rate = risk.preemption_rate if capacity == CapacityType.SPOT else 0.0
    tau_s = checkpoint_every_seconds or young_daly_interval(
        risk.checkpoint_cost_hours * 3600.0, rate
    )
    if math.isnan(tau_s):
        tau_s = young_daly_interval(risk.checkpoint_cost_hours * 3600.0, rate)
    # No interval is shorter than a step (checkpoint_seconds' floor): a vanishing one made
    # C / tau a division by zero.
    tau_s = max(tau_s, SHORTEST_CHECKPOINT_SECONDS)
    tau = tau_s / 3600.0
    overhead = 1.0 + risk.checkpoint_cost_hours / tau
    lost = risk.checkpoint_cost_hours if risk.checkpoint_on_notice else tau / 2.0
    per_preemption = lost + risk.restart_hours
    start = 0.0 if already_running else risk.restart_hours
    base = work_hours * overhead
    # Products with a rate of 0 are 0, not NaN, where the other factor is infinite (no
    # checkpoint ever, or work past any bound): on-demand loses nothing to preemptions.
    loss = rate * per_preemption if rate > 0 else 0.0  # loss_fraction()
    if loss >= MAX_LOSS_FRACTION:
        return Outcome(math.inf, math.inf, 0.0, tau_s, math.inf)
    running = start + base / (1.0 - loss)
    preemptions = rate * running if rate > 0 else 0.0
    expected_hours = running + preemptions * risk.mtta_hours
    marginal = 0.0 if capacity == CapacityType.RESERVED else price_per_hour
    p_meet = _p_meet(
        base=start + base,
        rate=rate,
        per_preemption=per_preemption + risk.mtta_hours,
        hours_to_deadline=hours_to_deadline,
    )
    return Outcome(running * marginal if marginal else 0.0, expected_hours, p_meet, tau_s, running)


def _p_meet(
    *, base: float, rate: float, per_preemption: float, hours_to_deadline: float | None
) -> float:
    """P(finish by the deadline) with a Poisson number of preemptions over the base run."""
    if hours_to_deadline is None:
        return 1.0
    if not base <= hours_to_deadline:  # NaN too: a run that cannot be timed meets nothing
        return 0.0
    if not (rate > 0 and per_preemption > 0):
        return 1.0
    mean = rate * base
    slack = (hours_to_deadline - base) / per_preemption
    if not math.isfinite(mean) or math.isnan(slack):
        return 0.0
    if mean <= 0 or slack > mean + 12.0 * math.sqrt(mean) + 12.0:
        return 1.0  # the Poisson tail beyond this is below 1e-12
    allowed = math.floor(slack)
    if mean > EXACT_POISSON_MEAN:
        # The sum below would take `allowed` terms; a normal with the continuity correction is
        # within a percent of it from here on.
        return 0.5 * math.erfc((mean - allowed - 0.5) / math.sqrt(2.0 * mean))
    # Poisson CDF up to `allowed`, summed in log space to stay finite for large means.
    total = 0.0
    log_term = -mean
    for k in range(allowed + 1):
        if k > 0:
            log_term += math.log(mean) - math.log(k)
        total += math.exp(log_term)
    return min(1.0, total)
