"""The busy service's jobs (benchmarks/spot/busy.py): ours + standby run in lockstep over one
trace, each given the other jobs' spot attempts as the scheduler would have read them, and
optionally a probe: a zone asked for capacity and released at once, a hit billed one minute.
What each is worth is measured in busy.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np

from api.placement.learning import SpotAttempt
from benchmarks.spot.adapter import SIM_EPOCH
from benchmarks.spot.experiment import (
    _seen,
)
from benchmarks.spot.simulator import (
    ON_DEMAND,
    STANDBY,
    Cadence,
    Result,
    Setting,
    View,
    parse,
    probe_in,
    steps,
)
from benchmarks.spot.standby import OursStandbyPolicy, keeps_fallback

if TYPE_CHECKING:
    from api.pricing.preemption import PreemptionPrior

    Rates = dict[tuple[str, str], PreemptionPrior]


class ServicePolicy(OursStandbyPolicy):
    """Ours + standby as one job of a busy service: it also learns from the other jobs'
    attempts the service has seen (`share`), and, given a cadence, may probe."""

    def __init__(
        self,
        trace_names: str | Sequence[str],
        setting: Setting,
        *,
        prior: PreemptionPrior | None = None,
        seen: Sequence[Sequence[SpotAttempt]] | None = None,
        probe: Cadence | None = None,
    ) -> None:
        super().__init__(trace_names, setting, prior=prior, seen=seen)
        # attempts[z][:own_from[z]] is the week before the job, not the job's own
        self.own_from = [len(zone) for zone in self.attempts]
        self.others: list[list[SpotAttempt]] = [[] for _ in self.attempts]
        self.probe_cadence = probe
        self.probing: tuple[int, datetime] | None = None  # zone, when: the probe just asked for
        self.probes: list[tuple[int, int]] = []  # (tick, zone) of each probe
        self._memo: dict[object, Rates] = {}
        self._memo_at: datetime | None = None

    def share(self, others: list[list[SpotAttempt]]) -> None:
        """Per zone, the other jobs' attempts the service knows of, on this job's clock."""
        self.others = others
        self._memo.clear()

    def own(self) -> list[list[SpotAttempt]]:
        """Per zone, the job's own closed attempts."""
        return [zone[n:] for zone, n in zip(self.attempts, self.own_from, strict=True)]

    def holding(self) -> list[tuple[int, datetime]]:
        """(zone, since) of the job's attempts holding capacity after its last answer: a launch
        or a standby asked for and not asked again within that tick found capacity."""
        return [h for h in (self.running or self.asked, self.standby or self.standby_asked) if h]

    def _rates(self, now: datetime) -> Rates:
        """The pools as the service sees them: the job's attempts and the other jobs'. Asked
        several times a tick with the same attempts (decide(), the standby, the probe)."""
        if now != self._memo_at:
            self._memo.clear()
            self._memo_at = now
        last = tuple((len(a), a[-1] if a else None) for a in self.attempts)
        key = (self.running, self.standby, last)
        rates = self._memo.get(key)
        if rates is None:
            sizes = [len(zone) for zone in self.attempts]
            for zone, extra in zip(self.attempts, self.others, strict=True):
                zone.extend(extra)
            try:
                rates = super()._rates(now)
            finally:
                for zone, n in zip(self.attempts, sizes, strict=True):
                    del zone[n:]
            self._memo[key] = rates
        return rates

    def __call__(self, v: View) -> str:
        now = SIM_EPOCH + timedelta(hours=v.tick * self.setting.gap_hours)
        if self.probing is not None:  # asked again at once: the probe's answer
            zone, at = self.probing
            self.probing = None
            seen = (
                SpotAttempt(at, at, at, "cancelled")
                if v.probe_found
                else SpotAttempt(at, None, at, "no_capacity")
            )
            self.attempts[zone].append(seen)
        elif self.probe_cadence is not None:
            self._observe(v, now)  # both idempotent within a tick: the call below repeats them
            self._observe_standby(v, now)
            target = self._probe_zone(v, now, self.probe_cadence)
            if target is not None:
                self.probing = (target, now)
                self.probes.append((v.tick, target))
                return probe_in(target)
        return super().__call__(v)

    def _answer(self, v: View, now: datetime) -> str:
        """What __call__ answers on on-demand, without recording it."""
        return self._standby(v, self._decide(v, now), now)

    def _probe_zone(self, v: View, now: datetime, cadence: Cadence) -> int | None:
        """The zone worth a probe now, if any (the module's rule)."""
        if v.current != ON_DEMAND or v.standby_zone is not None or self.standby is not None:
            return None
        if not keeps_fallback(v):  # on-demand to the end: nothing seen could move the job
            return None
        gap_s = self.setting.gap_hours * 3600.0
        if self.probes and (v.tick - self.probes[-1][0]) * gap_s < cadence.retry_seconds:
            return None
        if parse(self._answer(v, now))[0] == STANDBY:
            return None  # its launch is the look, free when refused
        rates = self._rates(now)
        for zone in sorted(range(len(self.offers)), key=lambda z: -self._lifetime(rates, z)):
            if any(a.tried_at == now for a in self.attempts[zone][-2:]):
                continue  # a launch saw it this tick: a probe would see the same
            opened = tuple(o or z == zone for z, o in enumerate(v.zones_open))
            self.attempts[zone].append(SpotAttempt(now, now, now, "cancelled"))
            try:
                answer = self._answer(replace(v, zones_open=opened, spot_available=True), now)
            finally:
                self.attempts[zone].pop()
            if parse(answer) == (STANDBY, zone):
                return zone
        return None


@dataclass(frozen=True, slots=True)
class Job:
    start: int  # the trace tick it is submitted at
    setting: Setting


def service_policies(
    names: Sequence[str],
    available: np.ndarray,
    jobs: Sequence[Job],
    *,
    probe: Cadence | None,
    history: bool = True,
) -> list[ServicePolicy]:
    """One policy per job, each starting from the week before it (observed.py) if `history`."""
    return [
        ServicePolicy(
            names,
            job.setting,
            seen=_seen(available, job.start, job.setting) if history else None,
            probe=probe,
        )
        for job in jobs
    ]


def _moved(attempt: SpotAttempt, by: timedelta) -> SpotAttempt:
    def at(t: datetime | None) -> datetime | None:
        return None if t is None else t + by

    tried = attempt.tried_at + by
    return SpotAttempt(tried, at(attempt.started_at), at(attempt.ended_at), attempt.end_reason)


def run_service(
    available: np.ndarray,
    jobs: Sequence[Job],
    policies: Sequence[ServicePolicy],
    *,
    shared: bool,
    cadence: Cadence | None = None,
    only: str | None = None,
) -> list[Result]:
    """Run the jobs on one trace (zones x ticks) tick by tick in lockstep. Each policy's clock
    starts at its job's submission (SIM_EPOCH); attempts pass between jobs moved onto the
    receiver's clock. Shared: before any job decides at trace tick t, each is given what the
    service knew of the others' attempts after t - 1 (the service's log, in the order the
    attempts became known, and those holding capacity, open). Refusals by several jobs at the
    same instant are passed once: pool_history reads a refusal only as a time capacity was seen
    gone, and a second at the same time changes nothing it computes (the jobs of a busy service
    are refused together through every outage, and folding each copy is most of the run).
    `only`: "runs" shares the attempts that held capacity (spot time, preemptions), "refusals"
    the launches that found none; None both."""
    if only not in (None, "runs", "refusals"):
        raise ValueError(f"only {only!r}")
    avail = np.atleast_2d(np.asarray(available, dtype=bool))
    zones = avail.shape[0]
    gap = timedelta(hours=jobs[0].setting.gap_hours)
    offset = [job.start * gap for job in jobs]  # a job's clock to the trace's
    runs = [steps(avail, job.start, job.setting, cadence) for job in jobs]
    views: list[View | None] = [None] * len(jobs)
    results: list[Result | None] = [None] * len(jobs)
    # (first tick others may see it, job, zone, attempt on the trace's clock)
    log: list[tuple[int, int, int, SpotAttempt]] = []
    logged = [list(p.own_from) for p in policies]
    read = [0] * len(jobs)
    known: list[list[list[SpotAttempt]]] = [[[] for _ in range(zones)] for _ in jobs]
    refused: list[list[set[datetime]]] = [[set() for _ in range(zones)] for _ in jobs]

    def record(k: int, tick: int, done: bool) -> None:
        """Job k's attempts that became known in `tick`; when it is done, its open ones end."""
        p = policies[k]
        for z, zone in enumerate(p.attempts):
            log.extend((tick + 1, k, z, _moved(a, offset[k])) for a in zone[logged[k][z] :])
            logged[k][z] = len(zone)
        if done:
            end = (tick + 1 - jobs[k].start) * gap + SIM_EPOCH
            for z, since in p.holding():
                stopped = SpotAttempt(since, since, end, "stopped")
                log.append((tick + 1, k, z, _moved(stopped, offset[k])))

    def passes(attempt: SpotAttempt) -> bool:
        return only is None or (only == "runs") == (attempt.started_at is not None)

    def share(tick: int, active: list[int]) -> None:
        holding = {
            i: [(z, since + offset[i]) for z, since in policies[i].holding()]
            for i in range(len(jobs))
            if results[i] is None and jobs[i].start < tick
        }
        for j in active:
            while read[j] < len(log) and log[read[j]][0] <= tick:
                _, i, z, attempt = log[read[j]]
                read[j] += 1
                if i == j or not passes(attempt):
                    continue
                if attempt.end_reason == "no_capacity":
                    if attempt.tried_at in refused[j][z]:
                        continue
                    refused[j][z].add(attempt.tried_at)
                known[j][z].append(_moved(attempt, -offset[j]))
            others = [list(zone) for zone in known[j]]
            for i, held in holding.items():
                if i != j and only != "refusals":
                    for z, since in held:
                        mine = since - offset[j]
                        others[z].append(SpotAttempt(mine, mine, None, None))
            policies[j].share(others)

    tick = min(job.start for job in jobs)
    while any(r is None for r in results):
        active = [k for k, job in enumerate(jobs) if results[k] is None and job.start <= tick]
        if shared:
            share(tick, active)
        for k in active:
            try:
                view = views[k]
                if view is None:
                    view = next(runs[k])
                while view.tick == tick - jobs[k].start:
                    view = runs[k].send(policies[k](view))
                views[k] = view
            except StopIteration as done:
                results[k] = done.value
            record(k, tick, results[k] is not None)
        tick += 1
    return [r for r in results if r is not None]
