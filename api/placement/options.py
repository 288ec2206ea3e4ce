"""Where a job could run, enumerated once for decide(), the estimate and admission.

Per job, three ordered streams of options: free reservation pools, spot by expected cost per
hour of progress, on-demand by price. Each option comes with the reason it cannot be used now
(over the price cap, no capacity, a pool that preempts too often for the job to ever finish),
so decide() takes the first usable one of each kind and the estimate says why the others lose.
The cost of an option (expected cost, finish, P(deadline), checkpoint interval) is `outcome()`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from api.placement.candidates import CandidateIndex, Candidates, SpotCandidate
from api.placement.market_clock import market_duration
from api.placement.plan import Plan
from api.placement.snapshot import JobState, Reservation, Snapshot
from api.pricing.cost_model import (
    MAX_LOSS_FRACTION,
    Outcome,
    Risk,
    checkpoint_seconds,
    evaluate,
    loss_fraction,
)
from api.pricing.gpu_speed import pace, reference_gpu, speed_of
from api.pricing.offers import Offer
from api.pricing.preemption import default_priors
from gpujobs.spec import CapacityType

# Preemptions before any checkpoint (in a row, in any pool) after which a job that may run
# on-demand stops trying spot until it checkpoints: spot is not making progress for it.
SPOT_STRIKES = 3
# Beyond ten years a finish time means nothing (and soon is not a representable datetime).
MAX_HOURS = 24 * 3650


@dataclass(frozen=True, slots=True)
class Option:
    offer: Offer
    capacity: CapacityType
    price_per_hour: float  # whole job
    risk: Risk
    reservation: Reservation | None = None
    # Hours on this option's GPU model per hour of the job's work (JobState.remaining_hours,
    # counted on its reference GPU): 0.5 on a model twice as fast.
    pace: float = 1.0
    # Spot only: how bursty the pool is (coefficients of variation of its available and
    # unavailable run lengths; 1 is memoryless), for the quote's availability model.
    up_cv: float = 1.0
    down_cv: float = 1.0

    @property
    def lifetime_hours(self) -> float:
        """Expected run until the job's gang is preempted (its risk's rate is the gang's)."""
        rate = self.risk.preemption_rate
        return 1.0 / rate if rate > 0 else math.inf


@dataclass(frozen=True, slots=True)
class _Ranked:
    spot: Iterator[SpotCandidate]
    on_demand: Iterator[Offer]


@dataclass(frozen=True, slots=True)
class Considered:
    option: Option
    unusable: str | None = None  # why it cannot be used now; None: usable
    transient: bool = False  # the only reason is capacity gone for now: the policy waits for it


class Market:
    """The snapshot's offers, priors and learned rates, indexed once per snapshot."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.index = CandidateIndex(
            snapshot.offers,
            priors=snapshot.priors or default_priors(),
            rates=snapshot.rates,
            restart_hours=snapshot.restart_hours,
            speeds=snapshot.gpu_speeds,
        )
        self.pools: dict[tuple[str, str], list[Reservation]] = {}
        for r in snapshot.reservations:
            self.pools.setdefault((r.zone, r.instance_type), []).append(r)
        self.offer_by_key = {o.key: o for o in snapshot.offers}
        self._by_job: dict[str, Candidates] = {}
        self._own_ranked: dict[str, tuple[tuple[SpotCandidate, ...], tuple[Offer, ...]]] = {}

    def candidates(self, job: JobState) -> Candidates:
        found = self._by_job.get(job.id)
        if found is None:
            found = self._by_job[job.id] = self.index.candidates(job.spec.resources)
        return found

    def _ranked(self, job: JobState) -> _Ranked:
        """The job's candidates, cheapest per hour of work first: the index ranks them by the
        table's speeds; a job with its own measured speeds is ranked anew, once per snapshot."""
        cands = self.candidates(job)
        own = job.gpu_speeds
        if own is None:
            return _Ranked(cands.iter_spot(), cands.iter_on_demand())
        found = self._own_ranked.get(job.id)
        if found is None:
            spot = sorted(
                cands.iter_spot(),
                key=lambda c: c.effective_price / speed_of(own, c.offer.gpu_model),
            )
            od = sorted(
                cands.iter_on_demand(),
                key=lambda o: (o.on_demand_price or 0.0) / speed_of(own, o.gpu_model),
            )
            found = self._own_ranked[job.id] = (tuple(spot), tuple(od))
        return _Ranked(iter(found[0]), iter(found[1]))

    def speeds(self, job: JobState) -> Mapping[str, float]:
        """The job's GPU speeds: what its team measured, else the snapshot's table."""
        return job.gpu_speeds if job.gpu_speeds is not None else self.snapshot.gpu_speeds

    def pace(self, job: JobState, offer: Offer) -> float:
        return pace(self.speeds(job), measured_on=reference_gpu(job.spec), runs_on=offer.gpu_model)

    def in_time(
        self, job: JobState, considered: Iterator[Considered], *, hours_left: float | None
    ) -> Option | None:
        """The first (cheapest per hour of work) usable option that can still finish the job
        by its deadline, starting now; when none can, the one that would finish soonest. The
        offer a running job holds comes first and is kept: whether to leave it is the deadline
        rule's call, which counts the work at that offer's pace. Without a deadline, or with
        every GPU model alike, simply the first."""
        if hours_left is None or not self.snapshot.gpu_speeds:
            return first(considered)
        current = job.current if job.state == "running" else None
        soonest: Option | None = None
        for c in considered:
            if c.unusable is not None:
                continue
            option = c.option
            held = (
                current is not None
                and current.offer_key == option.offer.key
                and current.capacity_type == option.capacity
            )
            if held or work_hours(job, option) + self.snapshot.restart_hours <= hours_left:
                return option
            if soonest is None or option.pace < soonest.pace:
                soonest = option
        return soonest

    def reservation(
        self,
        job: JobState,
        free: Mapping[str, int],
        *,
        hours_left: float | None,
        affordable: Callable[[Option], bool] = lambda option: True,
    ) -> Option | None:
        """The free reservation decide() takes, prepaid, before anything else: one that can
        still finish by the deadline; else, for a pending job, the soonest unless on-demand
        on a faster GPU would meet the deadline that it misses, and is `affordable`. A running
        job moves onto one only if the deadline's slack then still covers a step."""
        if CapacityType.RESERVED not in job.spec.capacity.types:
            return None
        option = self.in_time(job, self.reserved(job, free), hours_left=hours_left)
        if option is None or hours_left is None:
            return option
        restart = self.snapshot.restart_hours
        slack = hours_left - work_hours(job, option) - restart
        if job.state == "running":
            return option if slack >= self.snapshot.step_hours else None
        if slack >= 0 or CapacityType.ON_DEMAND not in job.spec.capacity.types:
            return option
        od = self.in_time(job, self.on_demand(job), hours_left=hours_left)
        meets = od is not None and hours_left - work_hours(job, od) - restart >= 0
        return None if meets and od is not None and affordable(od) else option

    def risk(self, job: JobState, rate: float = 0.0, mtta: float = 0.0) -> Risk:
        return Risk(
            preemption_rate=rate,
            mtta_hours=mtta,
            restart_hours=self.snapshot.restart_hours,
            checkpoint_cost_hours=job.checkpoint_cost_seconds / 3600.0,
            checkpoint_on_notice=job.spec.trainer.checkpoint.on_preemption,
        )

    def reserved(self, job: JobState, free: Mapping[str, int]) -> Iterator[Considered]:
        nodes = job.spec.resources.nodes
        cands = self.candidates(job)
        for (zone, instance_type), pools in self.pools.items():
            offer = cands.at(zone, instance_type)
            if offer is None:
                continue
            for pool in pools:
                option = Option(
                    offer,
                    CapacityType.RESERVED,
                    pool.price_per_hour * nodes,
                    self.risk(job),
                    reservation=pool,
                    pace=self.pace(job, offer),
                )
                short = free.get(pool.id, 0) < nodes
                yield Considered(
                    option, f"reservation {pool.id} has no {nodes} free nodes" if short else None
                )

    def spot(self, job: JobState) -> Iterator[Considered]:
        nodes = job.spec.resources.nodes
        current = job.current if job.state == "running" else None
        held = current.offer_key if current and current.capacity_type == CapacityType.SPOT else None
        on_demand_allowed = CapacityType.ON_DEMAND in job.spec.capacity.types
        spot: Iterable[SpotCandidate] = self._ranked(job).spot
        if held is not None:
            # Staying where it runs avoids a restart: the current offer first.
            spot = sorted(spot, key=lambda c: c.offer.key != held)
        for c in spot:
            # a gang stops when any node is preempted; its nodes tend to go together
            rate = self.index.gang_rate(c.prior.rate, nodes)
            option = Option(
                c.offer,
                CapacityType.SPOT,
                (c.offer.spot_price or 0.0) * nodes,
                self.risk(job, rate, c.prior.mtta_hours),
                up_cv=c.prior.up_cv,
                down_cv=c.prior.down_cv,
                pace=self.pace(job, c.offer),
            )
            holds = c.offer.key == held
            if not holds and job.spot_strikes >= SPOT_STRIKES and on_demand_allowed:
                strikes = job.spot_strikes
                yield Considered(
                    option, f"spot preempted this job {strikes} times before it could checkpoint"
                )
                continue
            if not holds and c.offer.key in job.avoid:
                yield Considered(option, "preempted this job before its first checkpoint")
                continue
            unusable = self._unusable(job, option, holds=holds)
            transient = unusable is not None and unusable.startswith("no spot")
            yield Considered(option, unusable, transient=transient)

    def on_demand(self, job: JobState) -> Iterator[Considered]:
        nodes = job.spec.resources.nodes
        current = job.current if job.state == "running" else None
        if current is not None and current.capacity_type == CapacityType.ON_DEMAND:
            offer = self.offer_by_key.get(current.offer_key)
            if offer is not None and offer.on_demand_price is not None:
                option = Option(
                    offer,
                    CapacityType.ON_DEMAND,
                    offer.on_demand_price * nodes,
                    self.risk(job),
                    pace=self.pace(job, offer),
                )
                yield Considered(option)
        for offer in self._ranked(job).on_demand:
            option = Option(
                offer,
                CapacityType.ON_DEMAND,
                (offer.on_demand_price or 0.0) * nodes,
                self.risk(job),
                pace=self.pace(job, offer),
            )
            yield Considered(option, self._unusable(job, option, holds=False))

    def _unusable(self, job: JobState, option: Option, *, holds: bool) -> str | None:
        cap = job.spec.capacity.max_price_per_hour
        if cap is not None and option.price_per_hour > cap + 1e-9:
            return f"${option.price_per_hour:,.2f}/h is above max_price_per_hour ${cap:,.2f}"
        where = (option.offer.zone, option.offer.instance_type, option.capacity)
        # A job holds the spot capacity it runs on until it is preempted: "no spot here" is
        # news for new instances, not a reason to leave one that still runs.
        if not holds and where in self.snapshot.unavailable:
            return f"no {option.capacity} capacity in {option.offer.zone} now"
        if option.capacity == CapacityType.SPOT:
            every = interval(job, option)
            if loss_fraction(option.risk, every) >= MAX_LOSS_FRACTION:
                every_run = market_duration(
                    option.lifetime_hours, time_scale=self.snapshot.time_scale
                )
                return (
                    f"preempts a {job.spec.resources.nodes}-node gang about every {every_run}: "
                    "it would never finish (expected cost infinite)"
                )
        return None


def first(considered: Iterator[Considered], *, waiting: bool = False) -> Option | None:
    """The first usable option; with `waiting`, also one only short of capacity now."""
    return next(
        (c.option for c in considered if c.unusable is None or (waiting and c.transient)), None
    )


def work_hours(job: JobState, option: Option) -> float:
    """The job's work left, in hours on the option's GPU model."""
    return job.remaining_hours * option.pace


def running_hours(job: JobState, option: Option, work: float) -> float:
    """Hours of running that `work` hours on the option's GPU take: each checkpoint the
    trainer takes there stalls it. What a deadline must leave room for, not the work alone."""
    return work * (1.0 + job.checkpoint_cost_seconds / interval(job, option))


def interval(job: JobState, option: Option) -> float:
    """The checkpoint interval the trainer will use on this option (seconds)."""
    ckpt = job.spec.trainer.checkpoint
    return checkpoint_seconds(
        every_seconds=ckpt.every_seconds,
        every_steps=ckpt.every_steps,
        step_seconds=job.step_seconds * option.pace if job.step_seconds is not None else None,
        checkpoint_cost_seconds=job.checkpoint_cost_seconds,
        preemption_rate_per_hour=option.risk.preemption_rate
        if option.capacity == CapacityType.SPOT
        else 0.0,
    )


def outcome(job: JobState, option: Option, hours_left: float | None) -> Outcome:
    return evaluate(
        work_hours=work_hours(job, option),
        price_per_hour=option.price_per_hour,
        capacity=option.capacity,
        risk=option.risk,
        hours_to_deadline=hours_left,
        checkpoint_every_seconds=interval(job, option),
    )


def plan(job: JobState, option: Option, out: Outcome, now: datetime) -> Plan:
    ckpt = job.spec.trainer.checkpoint
    return Plan(
        offer=option.offer,
        capacity_type=option.capacity,
        nodes=job.spec.resources.nodes,
        price_per_hour=option.price_per_hour,
        reservation_id=option.reservation.id if option.reservation else None,
        checkpoint_every_seconds=None
        if ckpt.every_steps is not None
        else out.checkpoint_every_seconds,
        expected_cost=out.expected_cost,
        expected_finish=now + timedelta(hours=min(out.expected_hours, MAX_HOURS)),
        p_meet_deadline=out.p_meet_deadline,
        work_assumed=job.spec.estimated_hours is None and job.step_seconds is None,
    )
