"""Trace-driven spot/on-demand simulator with the rules of "Can't Be Late" (Wu et al., NSDI'24),
and the observation model of this service's scheduler.

Rules (exact, so results can be checked by hand):
- Time advances in ticks of the trace's `gap_seconds`; work W and deadline D are whole ticks
  (rounded down), the changeover delay d is whole ticks (rounded up).
- At the start of each tick a spot instance is lost if its zone's trace shows 0 (value > 0 =
  available; for the 16-node set that means "at least one spot instance available", used as the
  availability signal of a one-node job).
- The policy then picks `spot` (in a zone: `spot@z`; plain `spot` is the zone it runs in, else the
  first zone not known out), `on_demand` or `idle`. Picking the instance the job is on continues
  it; picking another stops the current one and starts a new one whose first d ticks make no
  progress.
- Every tick on an instance is billed in full at its price and makes one tick of progress unless
  it is a changeover tick; idle is free. Done when progress reaches W; met if within D ticks.

What the policy observes is what the scheduler observes (worker/scheduler.py, reconciler.py):
spot availability only as a launch attempt reveals it. A policy is never told the trace. Picking
spot in a zone where the job does not run is a launch attempt: it succeeds when the zone's trace
shows capacity in the tick the attempt falls in; otherwise it fails (nothing billed, the instance
the job was on is already stopped, as the scheduler's migrate stops before it places), the zone is
known out until the reconciler's no-capacity backoff has passed, and the policy is asked again at
once. Retries come at the cadence production uses: the reconcile pass that sees the failure, the
backoff, then the next scheduling pass (`Cadence.production()`, from api.settings). A preemption
is seen (the instance is gone) but marks nothing, as in the reconciler: the next attempt finds out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from api.pricing.cost_model import RESTART_HOURS

SPOT = "spot"
ON_DEMAND = "on_demand"
IDLE = "idle"
ACTIONS = (SPOT, ON_DEMAND, IDLE)

OD_PRICE = 3.06
SPOT_PRICE = 0.9731
CHANGEOVER_HOURS = RESTART_HOURS  # the changeover is the service's own restart time
MAX_ATTEMPTS_PER_TICK = 64  # a policy that keeps asking for a zone it knows is out is a bug


def spot_in(zone: int) -> str:
    return f"{SPOT}@{zone}"


def parse(action: str) -> tuple[str, int | None]:
    kind, _, zone = action.partition("@")
    return kind, (int(zone) if zone else None)


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    gap_seconds: float
    available: np.ndarray  # bool per tick

    @property
    def gap_hours(self) -> float:
        return self.gap_seconds / 3600.0


def load_trace(path: Path) -> Trace:
    raw = json.loads(path.read_text())
    values = np.asarray(raw["data"], dtype=np.int64)
    return Trace(path.stem, float(raw["metadata"]["gap_seconds"]), values > 0)


@dataclass(frozen=True, slots=True)
class Cadence:
    """Seconds from a launch attempt that found no capacity to the next attempt in that zone."""

    retry_seconds: float

    @classmethod
    def production(cls) -> Cadence:
        """The shipped defaults: the reconciler sees the failure on its next pass, marks the
        zone out for `no_capacity_backoff_s`, and the scheduler's next pass tries again. A
        local launch fails at once; on Kubernetes the failure is the cluster autoscaler's
        refusal on the pod (`k8s_autoscaler_verdict`), once the cloud has reported the stockout
        to it: that delay is not counted here."""
        from api.settings import Settings

        s = Settings()
        return cls(s.reconcile_interval_s + s.no_capacity_backoff_s + s.schedule_interval_s)


@dataclass(frozen=True, slots=True)
class Setting:
    """A job in ticks: work W, deadline D, changeover d, prices per tick."""

    work: int
    deadline: int
    changeover: int
    spot_tick_cost: float
    od_tick_cost: float
    gap_hours: float

    @classmethod
    def from_hours(
        cls,
        trace: Trace,
        *,
        work_hours: float,
        deadline_hours: float,
        changeover_hours: float,
        spot_price: float = SPOT_PRICE,
        od_price: float = OD_PRICE,
    ) -> Setting:
        gap = trace.gap_hours
        eps = 1e-9  # 0.2 h / (300 s) is 2.4 in exact arithmetic; keep floor/ceil honest
        return cls(
            work=math.floor(work_hours / gap + eps),
            deadline=math.floor(deadline_hours / gap + eps),
            changeover=math.ceil(changeover_hours / gap - eps),
            spot_tick_cost=spot_price * gap,
            od_tick_cost=od_price * gap,
            gap_hours=gap,
        )


@dataclass(frozen=True, slots=True)
class View:
    """What an online policy sees when it is asked (after any preemption): no trace."""

    tick: int
    progress: int
    current: str  # SPOT, ON_DEMAND or IDLE
    changeover_left: int
    # Spot is worth a try: the job runs on it, or some zone is not known out (no recent
    # launch attempt there found no capacity).
    spot_available: bool
    setting: Setting
    zone: int | None = None  # the zone of the spot instance the job runs on
    zones_open: tuple[bool, ...] = (True,)  # per zone: not known out


Policy = Callable[[View], str]


@dataclass(slots=True)
class Result:
    cost: float
    spot_ticks: int
    od_ticks: int
    finish_tick: int
    met_deadline: bool
    actions: list[str] = field(default_factory=list)
    attempts: int = 0  # spot launch attempts
    failed_attempts: int = 0


def simulate(
    available: np.ndarray,
    start: int,
    setting: Setting,
    policy: Policy,
    cadence: Cadence | None = None,
) -> Result:
    """Run one job from `start` on one zone (`available` 1-D) or several (zones x ticks); ticks
    past the trace's end count as spot unavailable. Without a cadence a failed attempt's zone is
    known out until the next tick."""
    s = setting
    avail = np.atleast_2d(np.asarray(available, dtype=bool))
    zones = avail.shape[0]
    window = avail[:, start:]
    gap_s = s.gap_hours * 3600.0
    retry = cadence.retry_seconds if cadence is not None else gap_s
    next_try = [-math.inf] * zones  # seconds from the start: the zone is known out until then
    progress = changeover_left = tick = 0
    current, zone = IDLE, None
    result = Result(0.0, 0, 0, 0, False)
    # A job that cannot finish within D + W ticks is a policy bug, not a slow run.
    while progress < s.work and tick < s.deadline + s.work + s.changeover + 1:
        up = window[:, tick] if tick < window.shape[1] else np.zeros(zones, dtype=bool)
        end_s = (tick + 1) * gap_s
        if current == SPOT and not up[zone]:
            current, zone, changeover_left = IDLE, None, 0
        for _ in range(MAX_ATTEMPTS_PER_TICK):
            open_ = tuple(t < end_s for t in next_try)
            view = View(
                tick, progress, current, changeover_left, current == SPOT or any(open_), s,
                zone, open_,
            )  # fmt: skip
            kind, want = parse(policy(view))
            if kind != SPOT:
                break
            if current == SPOT and want in (None, zone):
                break
            if want is None:
                want = next((z for z in range(zones) if open_[z]), 0)
            if not open_[want]:
                raise ValueError(f"policy picked spot in zone {want} at tick {tick}: known out")
            current, zone, changeover_left = IDLE, None, 0  # stop before the new one starts
            result.attempts += 1
            if up[want]:
                current, zone, changeover_left = SPOT, want, s.changeover
                break
            result.failed_attempts += 1
            next_try[want] = max(tick * gap_s, next_try[want]) + retry
        else:
            raise ValueError(f"policy kept asking for spot at tick {tick}")
        if kind == IDLE:
            current, zone, changeover_left = IDLE, None, 0
        elif kind == ON_DEMAND:
            if current != ON_DEMAND:
                current, zone, changeover_left = ON_DEMAND, None, s.changeover
        elif kind != SPOT:
            raise ValueError(f"unknown action {kind!r}")
        if current == SPOT:
            result.cost += s.spot_tick_cost
            result.spot_ticks += 1
        elif current == ON_DEMAND:
            result.cost += s.od_tick_cost
            result.od_ticks += 1
        if current != IDLE:
            if changeover_left > 0:
                changeover_left -= 1
            else:
                progress += 1
        result.actions.append(current if current != SPOT or zones == 1 else spot_in(zone or 0))
        tick += 1
    result.finish_tick = tick
    result.met_deadline = progress >= s.work and tick <= s.deadline
    return result


def replay(available: np.ndarray, start: int, setting: Setting, actions: list[str]) -> Result:
    """Actions known in advance (the omniscient plan): the trace is known, so no attempt fails."""
    plan = iter(actions)
    return simulate(available, start, setting, lambda v: next(plan, ON_DEMAND))
