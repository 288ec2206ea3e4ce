"""Trace-driven spot/on-demand simulator with the rules of "Can't Be Late" (Wu et al., NSDI'24).

Rules (exact, so results can be checked by hand):
- Time advances in ticks of the trace's `gap_seconds`; work W and deadline D are whole ticks
  (rounded down), the changeover delay d is whole ticks (rounded up).
- At the start of each tick a spot instance is lost if the trace shows 0 (value > 0 = available;
  for the 16-node set that means "at least one spot instance available", used as the availability
  signal of a one-node job).
- The policy then picks `spot` (only if available), `on_demand` or `idle`. Picking the instance the
  job is on continues it; picking another starts a new one whose first d ticks make no progress.
- Every tick on an instance is billed in full at its price and makes one tick of progress unless
  it is a changeover tick; idle is free. Done when progress reaches W; met if within D ticks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
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
    """What an online policy sees at the start of a tick (after any preemption)."""

    tick: int
    progress: int
    current: str  # SPOT, ON_DEMAND or IDLE
    changeover_left: int
    spot_available: bool
    setting: Setting
    history: Sequence[bool]  # availability seen so far, including this tick


Policy = Callable[[View], str]


@dataclass(slots=True)
class Result:
    cost: float
    spot_ticks: int
    od_ticks: int
    finish_tick: int
    met_deadline: bool
    actions: list[str] = field(default_factory=list)


def simulate(available: np.ndarray, start: int, setting: Setting, policy: Policy) -> Result:
    """Run one job from `start`; ticks past the trace's end count as spot unavailable."""
    s = setting
    progress = changeover_left = tick = 0
    current = IDLE
    cost = 0.0
    spot_ticks = od_ticks = 0
    actions: list[str] = []
    window = available[start:]
    history: list[bool] = []
    # A job that cannot finish within D + W ticks is a policy bug, not a slow run.
    while progress < s.work and tick < s.deadline + s.work + s.changeover + 1:
        avail = bool(window[tick]) if tick < len(window) else False
        history.append(avail)
        if current == SPOT and not avail:
            current, changeover_left = IDLE, 0
        action = policy(View(tick, progress, current, changeover_left, avail, s, history))
        if action == SPOT and not avail:
            raise ValueError(f"policy picked spot at tick {tick} while it is unavailable")
        if action == IDLE:
            current, changeover_left = IDLE, 0
        else:
            if action != current:
                current, changeover_left = action, s.changeover
            if action == SPOT:
                cost += s.spot_tick_cost
                spot_ticks += 1
            else:
                cost += s.od_tick_cost
                od_ticks += 1
            if changeover_left > 0:
                changeover_left -= 1
            else:
                progress += 1
        actions.append(action)
        tick += 1
    return Result(
        cost, spot_ticks, od_ticks, tick, progress >= s.work and tick <= s.deadline, actions
    )


def replay(available: np.ndarray, start: int, setting: Setting, actions: list[str]) -> Result:
    plan = iter(actions)
    return simulate(available, start, setting, lambda v: next(plan, ON_DEMAND))
