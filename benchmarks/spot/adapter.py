"""Ours: the shipped `decide()`, called through an adapter that builds the snapshot the
scheduling loop would build each time the simulator asks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from benchmarks.spot.simulator import IDLE, ON_DEMAND, SPOT, Setting, View, parse, spot_in

if TYPE_CHECKING:
    from api.pricing.offers import Offer
    from api.pricing.preemption import PreemptionPrior

SIM_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


class OursPolicy:
    """Adapter: builds a one-job snapshot from the view and maps the decision back to an action.
    It holds no policy logic, only what the service would know: the running attempt, the zones a
    launch attempt recently found out (the snapshot's `unavailable`, as the reconciler's outage
    marks make it), and per zone the preemptions and spot hours observed so far, turned into a
    posterior preemption rate (posterior_rate) as the service does. The prior is the pooled
    default over all traces (aggregate, not the trace being replayed) unless one is given (what
    a running service had learned of the pool by then: observed.py)."""

    def __init__(
        self,
        trace_names: str | Sequence[str],
        setting: Setting,
        *,
        prior: PreemptionPrior | None = None,
    ) -> None:
        from api.pricing.offers import Offer
        from api.pricing.preemption import default_priors
        from gpujobs.spec import CapacitySpec, JobSpec, TrainerSpec

        s = setting
        self.setting = s
        names = [trace_names] if isinstance(trace_names, str) else list(trace_names)
        self.offers = [
            Offer(
                cloud="aws",
                region=zone[:-1],
                zone=zone,
                instance_type="p3.2xlarge",
                gpu_model="V100",
                gpu_count=1,
                gpu_memory_gb=16.0,
                vcpus=8.0,
                ram_gb=61.0,
                on_demand_price=s.od_tick_cost / s.gap_hours,
                spot_price=s.spot_tick_cost / s.gap_hours,
            )
            for zone in (name.split("_")[0] for name in names)
        ]
        self.zone_of = {o.key: z for z, o in enumerate(self.offers)}
        self.spec = JobSpec(
            name="sim",
            trainer=TrainerSpec.model_validate({"steps": 1, "checkpoint": {"on_preemption": True}}),
            capacity=CapacitySpec.model_validate({"types": ["spot", "on_demand"]}),
            estimated_hours=s.work * s.gap_hours,
            deadline_hours=s.deadline * s.gap_hours,
        )
        self.prior = prior or default_priors().default
        self.started_tick = 0
        self.last_tick = -1
        self.last_spot_zone: int | None = None  # where the last answer asked to run on spot
        self.preemptions = [0] * len(self.offers)
        self.spot_ticks = [0] * len(self.offers)

    @property
    def offer(self) -> Offer:
        """The first zone's offer (the only one on a single-zone trace)."""
        return self.offers[0]

    def _observe(self, v: View) -> None:
        """A new tick: the last answer stands. Spot asked for and not running now was lost."""
        if v.tick == self.last_tick:
            return  # asked again in the same tick: the attempt just made found no capacity
        z = self.last_spot_zone
        if z is not None:
            self.spot_ticks[z] += 1
            if v.current != SPOT:
                self.preemptions[z] += 1
        self.last_tick = v.tick

    def __call__(self, v: View) -> str:
        from api.placement import Current, JobState, Migrate, Place, Snapshot, decide
        from api.pricing.preemption import posterior_rate
        from gpujobs.spec import CapacityType

        self._observe(v)
        s, gap = self.setting, self.setting.gap_hours
        now = SIM_EPOCH + timedelta(hours=v.tick * gap)
        current = None
        if v.current != IDLE:
            offer = self.offers[v.zone or 0]
            current = Current(
                offer_key=offer.key,
                capacity_type=CapacityType(v.current),
                started_at=SIM_EPOCH + timedelta(hours=self.started_tick * gap),
            )
        job = JobState(
            id="job",
            team="sim",
            spec=self.spec,
            submitted_at=SIM_EPOCH,
            deadline_at=SIM_EPOCH + timedelta(hours=s.deadline * gap),
            remaining_hours=(s.work - v.progress) * gap,
            state="running" if current else "pending",
            current=current,
            preemptions=sum(self.preemptions),
        )
        unavailable = frozenset(
            (o.zone, o.instance_type, CapacityType.SPOT)
            for o, open_ in zip(self.offers, v.zones_open, strict=True)
            if not open_
        )
        rates = {
            (o.zone, o.instance_type): posterior_rate(
                self.prior, self.preemptions[z], self.spot_ticks[z] * gap
            )
            for z, o in enumerate(self.offers)
        }
        snapshot = Snapshot(
            now=now,
            jobs=(job,),
            offers=tuple(self.offers),
            unavailable=unavailable,
            rates=rates,
            restart_hours=s.changeover * gap,
            step_hours=gap,
        )
        decisions = decide(snapshot)
        action = v.current if v.current != SPOT else spot_in(v.zone or 0)
        if decisions:
            (decision,) = decisions
            if isinstance(decision, Migrate):
                decision = decision.to
            if isinstance(decision, Place):
                if decision.plan.capacity_type == CapacityType.SPOT:
                    action = spot_in(self.zone_of[decision.plan.offer.key])
                else:
                    action = ON_DEMAND
            elif current is None:
                action = IDLE  # Defer
        elif current is None:
            raise RuntimeError("decide() returned nothing for a pending job")
        kind, zone = parse(action)
        if kind != IDLE and (kind != v.current or (kind == SPOT and zone != v.zone)):
            self.started_tick = v.tick
        self.last_spot_zone = zone if kind == SPOT else None
        return action
