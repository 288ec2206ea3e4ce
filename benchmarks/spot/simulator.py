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

Make-before-break (issue #25): while the job runs on on-demand, a policy may answer `standby`
(`standby@z`): on-demand keeps training and a second attempt is held on spot beside it.
- Holding none, the answer is a launch attempt on spot, observed and retried like any other
  (nothing billed when refused, the zone known out for the cadence, the policy asked again at
  once); on-demand is not stopped. It is the only way a job on on-demand learns of spot: no
  availability is shown for free.
- A standby with capacity is billed at the spot price every tick it is held, from the tick it got
  capacity (a probe that found capacity costs at least that tick), while it goes through the
  changeover (start the trainer, restore the latest checkpoint); on-demand is billed beside it.
- Asked again with the standby ready (its changeover done), `standby` hands over: the running
  attempt checkpoints and the standby loads that checkpoint, within one tick billed on both
  (that tick's progress is made once); from the next tick the job runs on spot with no
  changeover left. No step is lost and no changeover is spent without progress.
- A standby whose zone is out at the start of a tick is preempted: it has cost only its own
  ticks, and the job never left on-demand. Any answer other than `standby` or `probe` stops it.

A probe (`probe@z`, issue #25, benchmarks/spot/busy.py) asks a zone for capacity and cancels at
once: the job's instance and standby are untouched and the policy is asked again at once. One
that finds capacity is billed `PROBE_BILLED_SECONDS` at the spot price (SkyNomad bills a
successful probe one minute) and lifts the zone's known-out mark (capacity was just seen); one
that finds none is free and marks the zone out for the cadence from the tick's start (a mark
already longer stays); the view that follows says which (`probe_found`).

`steps` is the same run as a generator (it yields each view and is sent the answer), so that
several jobs can be run in lockstep (busy.py); `simulate` drives it with one policy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from api.pricing.cost_model import RESTART_HOURS

SPOT = "spot"
ON_DEMAND = "on_demand"
IDLE = "idle"
STANDBY = "standby"  # stay on on-demand and hold a spot attempt beside it (make-before-break)
PROBE = "probe"  # ask a zone for capacity and cancel at once: an observation, priced
ACTIONS = (SPOT, ON_DEMAND, IDLE, STANDBY, PROBE)

OD_PRICE = 3.06
SPOT_PRICE = 0.9731
CHANGEOVER_HOURS = RESTART_HOURS  # the changeover is the service's own restart time
MAX_ATTEMPTS_PER_TICK = 64  # a policy that keeps asking for a zone it knows is out is a bug
PROBE_BILLED_SECONDS = 60.0  # a probe that finds capacity is billed one minute (SkyNomad)


def spot_in(zone: int) -> str:
    return f"{SPOT}@{zone}"


def standby_in(zone: int) -> str:
    return f"{STANDBY}@{zone}"


def probe_in(zone: int) -> str:
    return f"{PROBE}@{zone}"


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
    standby_zone: int | None = None  # the zone of the standby held beside on-demand
    standby_left: int = 0  # changeover ticks the standby still has to go through (0: ready)
    probe_found: bool | None = None  # asked again after a probe: whether it found capacity


Policy = Callable[[View], str]


@dataclass(slots=True)
class Result:
    cost: float
    spot_ticks: int
    od_ticks: int
    finish_tick: int
    met_deadline: bool
    actions: list[str] = field(default_factory=list)
    attempts: int = 0  # spot launch attempts (standby attempts included)
    failed_attempts: int = 0
    standby_attempts: int = 0
    standby_ticks: int = 0  # ticks a standby was held, billed at the spot price (not spot_ticks)
    handovers: int = 0
    standbys_lost: int = 0  # preempted before their handover
    probes: int = 0
    probe_hits: int = 0  # probes that found capacity (each billed PROBE_BILLED_SECONDS)
    probe_cost: float = 0.0  # in `cost` too


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
    run = steps(available, start, setting, cadence)
    try:
        view = next(run)
        while True:
            view = run.send(policy(view))
    except StopIteration as done:
        return done.value


def steps(
    available: np.ndarray,
    start: int,
    setting: Setting,
    cadence: Cadence | None = None,
) -> Generator[View, str, Result]:
    """`simulate`'s run, yielding each view and sent the policy's answer; returns the result."""
    s = setting
    avail = np.atleast_2d(np.asarray(available, dtype=bool))
    zones = avail.shape[0]
    window = avail[:, start:]
    gap_s = s.gap_hours * 3600.0
    retry = cadence.retry_seconds if cadence is not None else gap_s
    next_try = [-math.inf] * zones  # seconds from the start: the zone is known out until then
    progress = changeover_left = tick = 0
    current, zone = IDLE, None
    standby: int | None = None  # the standby's zone
    standby_left = 0
    probe_found: bool | None = None
    result = Result(0.0, 0, 0, 0, False)
    # A job that cannot finish within D + W ticks is a policy bug, not a slow run.
    while progress < s.work and tick < s.deadline + s.work + s.changeover + 1:
        up = window[:, tick] if tick < window.shape[1] else np.zeros(zones, dtype=bool)
        end_s = (tick + 1) * gap_s
        if current == SPOT and not up[zone]:
            current, zone, changeover_left = IDLE, None, 0
        if standby is not None and not up[standby]:
            standby, standby_left = None, 0
            result.standbys_lost += 1
        handover = False
        for _ in range(MAX_ATTEMPTS_PER_TICK):
            open_ = tuple(t < end_s for t in next_try)
            view = View(
                tick, progress, current, changeover_left, current == SPOT or any(open_), s,
                zone, open_, standby, standby_left, probe_found,
            )  # fmt: skip
            kind, want = parse((yield view))
            probe_found = None
            if kind == PROBE:  # the job's instances are untouched: asked again at once
                want = want or 0
                result.probes += 1
                probe_found = bool(up[want])
                if probe_found:
                    billed = s.spot_tick_cost * min(1.0, PROBE_BILLED_SECONDS / gap_s)
                    result.cost += billed
                    result.probe_cost += billed
                    result.probe_hits += 1
                    next_try[want] = -math.inf
                else:  # the backoff runs from the probe, at the tick's start
                    next_try[want] = max(next_try[want], tick * gap_s + retry)
                continue
            if kind == STANDBY:
                if current != ON_DEMAND:
                    raise ValueError(f"policy held a standby at tick {tick} off on-demand")
                if standby is not None and want in (None, standby):
                    if standby_left == 0:  # ready: hand over within this tick
                        current, zone, changeover_left = SPOT, standby, 0
                        standby, handover = None, True
                        result.handovers += 1
                    break
                if want is None:
                    want = next((z for z in range(zones) if open_[z]), 0)
                if not open_[want]:
                    raise ValueError(f"policy held a standby in zone {want} at tick {tick}")
                standby, standby_left = None, 0  # one standby at a time
                result.attempts += 1
                result.standby_attempts += 1
                if up[want]:
                    standby, standby_left = want, s.changeover
                    break
                result.failed_attempts += 1
                next_try[want] = max(tick * gap_s, next_try[want]) + retry
                continue
            standby, standby_left = None, 0  # any other answer stops the standby
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
        elif kind not in (SPOT, STANDBY):
            raise ValueError(f"unknown action {kind!r}")
        if handover:  # the running attempt's last tick: checkpointing, billed beside spot
            result.cost += s.od_tick_cost
            result.od_ticks += 1
        if standby is not None:
            result.cost += s.spot_tick_cost
            result.standby_ticks += 1
            standby_left = max(0, standby_left - 1)
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
