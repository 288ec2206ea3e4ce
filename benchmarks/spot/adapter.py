"""Ours: the shipped `decide()`, called through an adapter that builds a one-job snapshot every
tick."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from benchmarks.spot.simulator import IDLE, SPOT, Setting, View

SIM_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


class OursPolicy:
    """Adapter: each tick builds the snapshot the scheduling loop would build and maps the
    decision back to an action. It holds no policy logic, only what the service would know:
    the running attempt, and the preemptions and spot hours observed so far, turned into a
    posterior preemption rate (posterior_rate) as the service does. The prior is the pooled
    default over all traces (aggregate, not the trace being replayed)."""

    def __init__(self, trace_name: str, setting: Setting) -> None:
        from api.pricing.offers import Offer
        from api.pricing.preemption import default_priors
        from gpujobs.spec import CapacitySpec, JobSpec, TrainerSpec

        s = setting
        self.setting = s
        zone = trace_name.split("_")[0]
        self.offer = Offer(
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
        self.spec = JobSpec(
            name="sim",
            trainer=TrainerSpec.model_validate({"steps": 1, "checkpoint": {"on_preemption": True}}),
            capacity=CapacitySpec.model_validate({"types": ["spot", "on_demand"]}),
            estimated_hours=s.work * s.gap_hours,
            deadline_hours=s.deadline * s.gap_hours,
        )
        self.prior = default_priors().default
        self.started_tick = 0
        self.last_action = IDLE
        self.preemptions = 0
        self.spot_ticks = 0

    def __call__(self, v: View) -> str:
        from api.placement import Current, JobState, Migrate, Place, Snapshot, decide
        from api.pricing.preemption import posterior_rate
        from gpujobs.spec import CapacityType

        s, gap = self.setting, self.setting.gap_hours
        if self.last_action == SPOT and v.current == IDLE:
            self.preemptions += 1
        now = SIM_EPOCH + timedelta(hours=v.tick * gap)
        current = None
        if v.current != IDLE:
            current = Current(
                offer_key=self.offer.key,
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
            preemptions=self.preemptions,
        )
        unavailable = (
            frozenset()
            if v.spot_available
            else frozenset({(self.offer.zone, self.offer.instance_type, CapacityType.SPOT)})
        )
        rate = posterior_rate(self.prior, self.preemptions, self.spot_ticks * gap)
        snapshot = Snapshot(
            now=now,
            jobs=(job,),
            offers=(self.offer,),
            unavailable=unavailable,
            rates={(self.offer.zone, self.offer.instance_type): rate},
            restart_hours=s.changeover * gap,
            step_hours=gap,
        )
        decisions = decide(snapshot)
        action = v.current
        if decisions:
            (decision,) = decisions
            if isinstance(decision, Migrate):
                decision = decision.to
            if isinstance(decision, Place):
                action = str(decision.plan.capacity_type)
            elif current is None:
                action = IDLE  # Defer
        elif current is None:
            raise RuntimeError("decide() returned nothing for a pending job")
        if action != v.current and action != IDLE:
            self.started_tick = v.tick
        if action == SPOT:
            self.spot_ticks += 1
        self.last_action = action
        return action
