"""Ours + standby (issue #25, make-before-break): decide()'s rule, and while the job runs on
on-demand, a standby on spot beside it (the simulator's `standby`, benchmarks/spot/simulator.py).

Where decide() would move the job from on-demand back to spot (stopping on-demand first), the
standby does it without the risk: a launch that finds no capacity costs nothing and leaves
on-demand running, and the changeover is spent while on-demand trains. Where decide() keeps the
job on on-demand, a standby is still held when it pays for itself, judged from the job's own
quantities with the shipped rule, `api.placement.standby.standby_pays` (decide() holds its
standbys by it): the pool's learned spot lifetime L, the restart (changeover) time d, the
reaction step g, the price ratio k = on-demand / spot, the work left w and the slack.
- The handover must keep the on-demand fallback: once on spot, a preemption costs a restart onto
  on-demand, so the slack after one more step must still hold it (slack >= g, where the slack
  already counts one restart: the rule's "leaving on-demand could not be undone in time").
- The standby is paid for whether or not it reaches its handover: its changeover and the
  handover tick, (d + g) hours at the spot price. It reaches the handover with probability
  q = exp(-(d + g) / L) (the learned pool, memoryless). Handed over, it runs spot for
  min(L, w) hours, each saving k - 1 (in spot price per hour); when L < w it is expected to be
  preempted before the end, and riding that outage on on-demand costs a restart there, d k.
  Held when q (min(L, w) (k - 1) - [L < w] d k) > d + g.
The rule's reserve is not asked for: it is the slack kept to restart onto on-demand after the
outages to come, and a handover spends none of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from api.placement.learning import SpotAttempt
from api.placement.standby import standby_pays
from api.placement.world import EVIDENCE_HALF_LIFE
from benchmarks.spot.adapter import SIM_EPOCH, OursPolicy
from benchmarks.spot.simulator import (
    ON_DEMAND,
    SPOT,
    STANDBY,
    Setting,
    View,
    parse,
    standby_in,
)

if TYPE_CHECKING:
    from api.pricing.preemption import PreemptionPrior


def keeps_fallback(v: View) -> bool:
    """After the handover and one more tick, a restart onto on-demand still meets the deadline."""
    s = v.setting
    left = s.deadline - v.tick
    work = s.work - v.progress + (v.changeover_left if v.current == ON_DEMAND else 0)
    return left - 1 >= work + s.changeover


class OursStandbyPolicy(OursPolicy):
    """OursPolicy (decide() through the adapter), with a standby held beside on-demand.

    What the standby's attempts show is recorded as the reconciler records any spot attempt: a
    launch that found no capacity, a standby preempted or stopped; one handed over becomes the
    job's running spot attempt."""

    def __init__(
        self,
        trace_names: str | Sequence[str],
        setting: Setting,
        *,
        prior: PreemptionPrior | None = None,
        seen: Sequence[Sequence[SpotAttempt]] | None = None,
        half_life: timedelta | None = EVIDENCE_HALF_LIFE,
    ) -> None:
        super().__init__(trace_names, setting, prior=prior, seen=seen, half_life=half_life)
        self.standby: tuple[int, datetime] | None = None  # zone, since: the standby held
        self.standby_asked: tuple[int, datetime] | None = None  # zone, when: its launch

    def __call__(self, v: View) -> str:
        now = SIM_EPOCH + timedelta(hours=v.tick * self.setting.gap_hours)
        self._observe(v, now)
        self._observe_standby(v, now)
        action = self._decide(v, now)
        if v.current == ON_DEMAND:
            action = self._standby(v, action, now)
        kind, zone = parse(action)
        if kind != STANDBY:
            self._stop_standby(now)
            self._record(v, action, now)
        elif self.standby is None:
            self.standby_asked = (zone or 0, now)
        elif v.standby_left == 0:  # handed over within this tick: now the running attempt
            assert v.standby_zone == self.standby[0]
            self.running, self.standby = self.standby, None
            self.started_tick = v.tick
            self.warm = True  # its changeover was spent beside on-demand, as decide() is told
        return action

    def _observe_standby(self, v: View, now: datetime) -> None:
        if self.standby_asked is not None:
            zone, tried = self.standby_asked
            if v.standby_zone is None:  # asked again at once: the launch found no capacity
                self.attempts[zone].append(SpotAttempt(tried, None, tried, "no_capacity"))
            else:
                self.standby = (zone, tried)
            self.standby_asked = None
        if self.standby is not None and v.standby_zone is None:
            zone, since = self.standby
            self.attempts[zone].append(SpotAttempt(since, since, now, "preempted"))
            self.standby = None

    def _stop_standby(self, now: datetime) -> None:
        if self.standby is not None:
            zone, since = self.standby
            self.attempts[zone].append(SpotAttempt(since, since, now, "stopped"))
            self.standby = None

    def _rates(self, now: datetime) -> dict[tuple[str, str], PreemptionPrior]:
        """The held standby is spot time the pool is seen through, as a running attempt is."""
        if self.standby is None:
            return super()._rates(now)
        zone, since = self.standby
        self.attempts[zone].append(SpotAttempt(since, since, None, None))
        try:
            return super()._rates(now)
        finally:
            self.attempts[zone].pop()

    def _standby(self, v: View, action: str, now: datetime) -> str:
        """On on-demand: a standby where decide() would move to spot, or where one pays."""
        if not keeps_fallback(v):
            return ON_DEMAND
        kind, zone = parse(action)
        rates = self._rates(now)
        if self.standby is not None:
            held = self.standby[0]
            return standby_in(held) if kind == SPOT or self._pays(v, rates, held) else ON_DEMAND
        if kind == SPOT and zone is not None and v.zones_open[zone]:
            return standby_in(zone)
        open_ = [z for z, o in enumerate(v.zones_open) if o]
        if not open_:
            return ON_DEMAND
        best = max(open_, key=lambda z: self._lifetime(rates, z))
        return standby_in(best) if self._pays(v, rates, best) else ON_DEMAND

    def _lifetime(self, rates: dict[tuple[str, str], PreemptionPrior], zone: int) -> float:
        o = self.offers[zone]
        return rates[(o.zone, o.instance_type)].mean_lifetime_hours

    def _pays(self, v: View, rates: dict[tuple[str, str], PreemptionPrior], zone: int) -> bool:
        s, g = self.setting, self.setting.gap_hours
        return standby_pays(
            lifetime=self._lifetime(rates, zone),
            work_left=(s.work - v.progress) * g,
            restart=s.changeover * g,
            step=g,
            price_ratio=s.od_tick_cost / s.spot_tick_cost,
        )
