"""Ours: the shipped `decide()`, called through an adapter that builds the snapshot the
scheduling loop would build each time the simulator asks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from api.placement.learning import SpotAttempt, pool_history
from api.placement.world import EVIDENCE_HALF_LIFE, OBSERVATION_WINDOW
from benchmarks.spot.simulator import IDLE, ON_DEMAND, SPOT, Setting, View, parse, spot_in

if TYPE_CHECKING:
    from api.pricing.offers import Offer
    from api.pricing.preemption import PreemptionPrior

SIM_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


class OursPolicy:
    """Adapter: builds a one-job snapshot from the view and maps the decision back to an action.
    It holds no policy logic, only what the service would know: the running attempt, the zones a
    launch attempt recently found out (the snapshot's `unavailable`, as the reconciler's outage
    marks make it), and per zone the spot attempts the service saw (`seen`: what a running
    service saw before the job, observed.py; then the job's own, recorded as the reconciler
    records them), folded into the pool's posterior by the scheduler's own rule
    (api.placement.learning, world.learned_rates). The prior is the pooled default over all
    traces (aggregate, not the trace being replayed) unless one is given."""

    def __init__(
        self,
        trace_names: str | Sequence[str],
        setting: Setting,
        *,
        prior: PreemptionPrior | None = None,
        seen: Sequence[Sequence[SpotAttempt]] | None = None,
        half_life: timedelta | None = EVIDENCE_HALF_LIFE,
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
        self.half_life = half_life  # how the pools' evidence is weighed by age (world's)
        self.started_tick = 0
        self.warm = False  # the instance the job is on was a standby handed over (Current.warm)
        self.last_tick = -1
        # Per zone, the spot attempts the service knows of: those before the job (`seen`) and
        # the job's own, closed; the one asked for last, and the one running, open.
        self.attempts: list[list[SpotAttempt]] = [list(z) for z in seen] if seen else []
        self.attempts += [[] for _ in range(len(self.offers) - len(self.attempts))]
        self.asked: tuple[int, datetime] | None = None  # zone, when: the last answer's launch
        self.running: tuple[int, datetime] | None = None  # zone, since: the spot attempt on
        self.preemptions = 0

    @property
    def offer(self) -> Offer:
        """The first zone's offer (the only one on a single-zone trace)."""
        return self.offers[0]

    def _observe(self, v: View, now: datetime) -> None:
        """What the last answer's launch and the running attempt became, as the reconciler
        records them: asked again in the same tick, the launch found no capacity; a new tick
        without the spot instance it ran on, that instance was preempted."""
        if self.asked is not None:
            zone, tried = self.asked
            if v.tick == self.last_tick:
                self.attempts[zone].append(SpotAttempt(tried, None, tried, "no_capacity"))
            else:
                self.running = (zone, tried)
            self.asked = None
        if self.running is not None and v.tick != self.last_tick:
            zone, since = self.running
            if v.current != SPOT or v.zone not in (None, zone):
                self.attempts[zone].append(SpotAttempt(since, since, now, "preempted"))
                self.running, self.preemptions = None, self.preemptions + 1
        self.last_tick = v.tick

    def _leave(self, now: datetime) -> None:
        """The answer moves the job off the spot instance it runs on: that attempt ends."""
        if self.running is not None:
            zone, since = self.running
            self.attempts[zone].append(SpotAttempt(since, since, now, "stopped"))
            self.running = None

    def _rates(self, now: datetime) -> dict[tuple[str, str], PreemptionPrior]:
        """Each zone's prior moved by what the service saw of it (world.learned_rates)."""
        rates = {}
        for z, o in enumerate(self.offers):
            mine = self.attempts[z]
            if self.running is not None and self.running[0] == z:
                mine = [*mine, SpotAttempt(self.running[1], self.running[1], None, None)]
            seen = pool_history(
                mine, since=now - OBSERVATION_WINDOW, now=now, half_life=self.half_life
            )
            rates[(o.zone, o.instance_type)] = seen.posterior(self.prior)
        return rates

    def __call__(self, v: View) -> str:
        now = SIM_EPOCH + timedelta(hours=v.tick * self.setting.gap_hours)
        self._observe(v, now)
        action = self._decide(v, now)
        self._record(v, action, now)
        return action

    def _decide(self, v: View, now: datetime) -> str:
        """decide()'s answer for the job as the view shows it, as an action."""
        from api.placement import Current, JobState, Migrate, Place, Snapshot, decide
        from gpujobs.spec import CapacityType

        s, gap = self.setting, self.setting.gap_hours
        current = None
        if v.current != IDLE:
            offer = self.offers[v.zone or 0]
            current = Current(
                offer_key=offer.key,
                capacity_type=CapacityType(v.current),
                started_at=SIM_EPOCH + timedelta(hours=self.started_tick * gap),
                warm=self.warm,
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
            preemptions=self.preemptions,
        )
        unavailable = frozenset(
            (o.zone, o.instance_type, CapacityType.SPOT)
            for o, open_ in zip(self.offers, v.zones_open, strict=True)
            if not open_
        )
        rates = self._rates(now)
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
        return action

    def _record(self, v: View, action: str, now: datetime) -> None:
        """The answer's effect on what the service knows of its attempts."""
        kind, zone = parse(action)
        moves = kind != v.current or (kind == SPOT and zone != v.zone)
        if moves:
            self._leave(now)
            if kind == SPOT:
                self.asked = (zone or 0, now)
        if kind != IDLE and moves:
            self.started_tick = v.tick
            self.warm = False
