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

Policies: on_demand, greedy, uniform_progress (the paper's rules 1-3 plus the safety net),
omniscient (dynamic programming over the known trace) and ours: the shipped `decide()`, called
through an adapter that builds a one-job snapshot every tick.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

SPOT = "spot"
ON_DEMAND = "on_demand"
IDLE = "idle"
ACTIONS = (SPOT, ON_DEMAND, IDLE)

OD_PRICE = 3.06
SPOT_PRICE = 0.9731
CHANGEOVER_HOURS = 0.2
DEADLINE_HOURS = 48.0
JOB_FRACTIONS = (0.6, 0.7, 0.8, 0.9)
START_TICKS = 100
SEED = 20240416
TRACE_SETS = (
    "availability/1-node/aws-02-15-2023",
    "availability/1-node/aws-10-26-2022",
    "availability/16-node/aws-08-27-2023",
)
POLICIES = ("on_demand", "greedy", "uniform_progress", "omniscient", "ours")


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


# --- baseline policies -----------------------------------------------------------------------


def _must_take_on_demand(v: View) -> bool:
    """Safety net: a non-on-demand tick now could leave too little time to finish on on-demand.

    Idling (or a spot tick that is lost next tick) leaves, next tick, D - t - 1 ticks for the
    remaining work plus a changeover; a spot tick that makes progress removes one tick of work.
    """
    s = v.setting
    if v.current == ON_DEMAND:
        return True  # callers ask only when not on on-demand; staying is always safe
    left = s.deadline - v.tick
    remaining = s.work - v.progress
    progresses = v.current == SPOT and v.spot_available and v.changeover_left == 0
    return left - 1 < remaining - (1 if progresses else 0) + s.changeover


def on_demand_policy(v: View) -> str:
    return ON_DEMAND


def greedy_policy(v: View) -> str:
    """Spot when available, else idle; on-demand to the end once the safety net fires."""
    if v.current == ON_DEMAND:
        return ON_DEMAND
    if _must_take_on_demand(v):
        return ON_DEMAND
    return SPOT if v.spot_available else IDLE


def uniform_progress_policy(v: View) -> str:
    """Uniform Progress with hysteresis (paper §5.2.2), plus the Safety Net rule.

    ep(t) = t * W / D. On on-demand: stay until cp(t) >= ep(t + 2d) (hysteresis), then spot if
    available, else idle. Otherwise: spot whenever available (taking risks; stay until
    preempted); when spot is unavailable, on-demand if cp(t) < ep(t), else idle. The safety net
    (the greedy one above) puts the job on on-demand for good.
    """
    s = v.setting
    rate = s.work / s.deadline
    if v.current == ON_DEMAND:
        if v.progress < rate * (v.tick + 2 * s.changeover):
            return ON_DEMAND
        left = s.deadline - v.tick
        # Leaving on-demand must keep a later restart on on-demand possible.
        if left - 1 < s.work - v.progress + s.changeover:
            return ON_DEMAND
        return SPOT if v.spot_available else IDLE
    if _must_take_on_demand(v):
        return ON_DEMAND
    if v.spot_available:
        return SPOT
    return ON_DEMAND if v.progress < rate * v.tick else IDLE


# --- omniscient ----------------------------------------------------------------------------


def omniscient_costs(available: np.ndarray, starts: Sequence[int], setting: Setting) -> np.ndarray:
    """Minimum cost to finish by the deadline for every start, knowing the whole trace.

    Forward dynamic programming over (tick, progress, instance), vectorised over starts and
    progress. Starting an instance jumps d ticks ahead with no progress; a spot start is only
    allowed when spot stays available for those d ticks (one lost during its changeover costs
    money for nothing, so idling dominates it). Returns inf where the deadline is infeasible.
    """
    s = setting
    n, W, D, d = len(starts), s.work, s.deadline, s.changeover
    avail = np.zeros((n, D + d + 1), dtype=bool)
    for i, st in enumerate(starts):
        chunk = available[st : st + D + d + 1]
        avail[i, : len(chunk)] = chunk
    # run[i, t]: consecutive available ticks from t (to check a spot start survives changeover)
    run = np.zeros((n, D + d + 2), dtype=np.int64)
    for t in range(D + d, -1, -1):
        run[:, t] = np.where(avail[:, t], run[:, t + 1] + 1, 0)
    inf = np.inf
    idle = np.full((n, W + 1), inf)
    idle[:, 0] = 0.0
    spot = np.full((n, W + 1), inf)
    od = np.full((n, W + 1), inf)
    ring = d + 1
    pend_spot = np.full((ring, n, W + 1), inf)
    pend_od = np.full((ring, n, W + 1), inf)
    best = np.full(n, inf)
    cs, co = s.spot_tick_cost, s.od_tick_cost
    for t in range(D + 1):
        slot = t % ring
        np.minimum(spot, pend_spot[slot], out=spot)
        np.minimum(od, pend_od[slot], out=od)
        pend_spot[slot].fill(inf)
        pend_od[slot].fill(inf)
        av = avail[:, t][:, None]
        np.minimum(idle, np.where(av, inf, spot), out=idle)  # preempted spot becomes idle
        spot = np.where(av, spot, inf)
        if d == 0:
            spot = np.where(av, np.minimum(spot, np.minimum(idle, od)), inf)
            od = np.minimum(od, np.minimum(idle, spot))
        done = np.minimum(np.minimum(idle[:, W], spot[:, W]), od[:, W])
        np.minimum(best, done, out=best)
        if t == D:
            break
        idle[:, W] = spot[:, W] = od[:, W] = inf
        nxt_idle = np.minimum(np.minimum(idle, spot), od)
        nxt_spot = np.full((n, W + 1), inf)
        nxt_spot[:, 1:] = spot[:, :-1] + cs
        nxt_od = np.full((n, W + 1), inf)
        nxt_od[:, 1:] = od[:, :-1] + co
        if d > 0 and t + d <= D:
            target = (t + d) % ring
            can_spot = (run[:, t] >= d)[:, None]
            start_spot = np.where(can_spot, np.minimum(idle, od) + d * cs, inf)
            np.minimum(pend_spot[target], start_spot, out=pend_spot[target])
            np.minimum(pend_od[target], np.minimum(idle, spot) + d * co, out=pend_od[target])
        idle, spot, od = nxt_idle, nxt_spot, nxt_od
    return best


def omniscient_plan(available: np.ndarray, start: int, setting: Setting) -> tuple[float, list[str]]:
    """The optimal actions for one start: backward DP (same moves as omniscient_costs), then
    a forward walk along the argmins. Returns (inf, []) when the deadline is infeasible."""
    s = setting
    W, D, d = s.work, s.deadline, s.changeover
    avail = np.zeros(D + d + 1, dtype=bool)
    chunk = available[start : start + D + d + 1]
    avail[: len(chunk)] = chunk
    run = np.zeros(D + d + 2, dtype=np.int64)
    for t in range(D + d, -1, -1):
        run[t] = run[t + 1] + 1 if avail[t] else 0
    cs, co = s.spot_tick_cost, s.od_tick_cost
    inf = np.inf
    # value[t, mode, p]: modes 0 idle, 1 spot running, 2 on-demand running
    value = np.full((D + 1, 3, W + 1), inf)
    value[:, :, W] = 0.0

    def options(t: int, mode: int) -> dict[str, np.ndarray]:
        nxt = value[t + 1]
        opts = {"idle": nxt[0].copy()}
        if mode == 1 and avail[t]:
            opts["spot"] = np.append(cs + nxt[1][1:], inf)
        if mode == 2:
            opts["od"] = np.append(co + nxt[2][1:], inf)
        if t + d <= D and d > 0:
            if mode != 1 and avail[t] and run[t] >= d:
                opts["start_spot"] = d * cs + value[t + d][1]
            if mode != 2:
                opts["start_od"] = d * co + value[t + d][2]
        for o in opts.values():
            o[W] = 0.0
        return opts

    for t in range(D - 1, -1, -1):
        for mode in range(3):
            eff = 0 if mode == 1 and not avail[t] else mode
            best = np.minimum.reduce(list(options(t, eff).values()))
            value[t, mode, :W] = best[:W]
    if d == 0:
        raise ValueError("omniscient_plan needs a changeover of at least one tick")
    total = float(value[0, 0, 0])
    if not np.isfinite(total):
        return total, []
    actions: list[str] = []
    t, mode, p = 0, 0, 0
    names = {"idle": IDLE, "spot": SPOT, "od": ON_DEMAND, "start_spot": SPOT, "start_od": ON_DEMAND}
    while p < W:
        if mode == 1 and not avail[t]:
            mode = 0
        opts = options(t, mode)
        move = min(opts, key=lambda k: (opts[k][p], k != "idle"))
        if move.startswith("start"):
            actions += [names[move]] * d
            t, mode = t + d, (1 if move == "start_spot" else 2)
        else:
            actions.append(names[move])
            if move != "idle":
                p += 1
            else:
                mode = 0
            t += 1
    return total, actions


# --- ours: the shipped decide() through a one-job snapshot ----------------------------------

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
        from gpujobs.spec import JobSpec

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
            trainer={"steps": 1, "checkpoint": {"on_preemption": True}},
            capacity={"types": ["spot", "on_demand"]},
            estimated_hours=s.work * s.gap_hours,
            deadline_hours=s.deadline * s.gap_hours,
        )
        self.prior = default_priors().default
        self.started_tick = 0
        self.last_action = IDLE
        self.preemptions = 0
        self.spot_ticks = 0

    def __call__(self, v: View) -> str:
        from api.placement import JobState, Migrate, Place, Placement, Snapshot, decide
        from api.pricing.preemption import posterior_rate
        from gpujobs.spec import CapacityType

        s, gap = self.setting, self.setting.gap_hours
        if self.last_action == SPOT and v.current == IDLE:
            self.preemptions += 1
        now = SIM_EPOCH + timedelta(hours=v.tick * gap)
        placement = None
        if v.current != IDLE:
            placement = Placement(
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
            state="running" if placement else "pending",
            placement=placement,
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
                action = str(decision.capacity_type)
            elif placement is None:
                action = IDLE  # Defer
        elif placement is None:
            raise RuntimeError("decide() returned nothing for a pending job")
        if action != v.current and action != IDLE:
            self.started_tick = v.tick
        if action == SPOT:
            self.spot_ticks += 1
        self.last_action = action
        return action


# --- benchmark driver ------------------------------------------------------------------------


def _policy(name: str, trace: Trace, setting: Setting) -> Policy:
    if name == "ours":
        return OursPolicy(trace.name, setting)
    return {
        "on_demand": on_demand_policy,
        "greedy": greedy_policy,
        "uniform_progress": uniform_progress_policy,
    }[name]


def _starts(trace: Trace, setting_max: Setting, count: int) -> list[int]:
    import zlib

    rng = np.random.default_rng(SEED + zlib.crc32(trace.name.encode()))
    high = len(trace.available) - setting_max.deadline - setting_max.changeover - 1
    return sorted(int(x) for x in rng.choice(high, size=min(count, high), replace=False))


def _run_task(task: tuple[str, str, float, int]) -> dict[str, object]:
    path, set_name, fraction, n_starts = task
    trace = load_trace(Path(path))
    setting = Setting.from_hours(
        trace,
        work_hours=DEADLINE_HOURS * fraction,
        deadline_hours=DEADLINE_HOURS,
        changeover_hours=CHANGEOVER_HOURS,
    )
    starts = _starts(trace, setting, n_starts)
    od_cost = (setting.work + setting.changeover) * setting.od_tick_cost
    out: dict[str, dict[str, list[float]]] = {}
    omni = omniscient_costs(trace.available, starts, setting)
    out["omniscient"] = {"cost": list(omni / od_cost), "miss": [0.0] * len(starts)}
    for name in ("on_demand", "greedy", "uniform_progress", "ours"):
        costs, misses, spot = [], [], []
        for st in starts:
            r = simulate(trace.available, st, setting, _policy(name, trace, setting))
            costs.append(r.cost / od_cost)
            misses.append(0.0 if r.met_deadline else 1.0)
            spot.append(r.spot_ticks * setting.gap_hours)
        out[name] = {"cost": costs, "miss": misses, "spot_hours": spot}
    return {"set": set_name, "trace": trace.name, "fraction": fraction, "results": out}


def run_benchmark(data: Path, n_starts: int = START_TICKS, workers: int = 2) -> dict[str, object]:
    tasks = []
    for set_name in TRACE_SETS:
        for path in sorted((data / "spot-traces" / set_name).glob("*.json")):
            for fraction in JOB_FRACTIONS:
                tasks.append((str(path), set_name, fraction, n_starts))
    if workers > 1:
        from multiprocessing import Pool

        with Pool(workers) as pool:
            rows = pool.map(_run_task, tasks)
    else:
        rows = [_run_task(t) for t in tasks]
    return summarize(rows, n_starts)


def summarize(rows: list[dict[str, object]], n_starts: int) -> dict[str, object]:
    table: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    pooled: dict[tuple[str, float, str], dict[str, list[float]]] = {}
    for row in rows:
        results = row["results"]
        assert isinstance(results, dict)
        for policy, res in results.items():
            acc = pooled.setdefault((str(row["set"]), float(row["fraction"]), policy), {})
            for k, values in res.items():
                acc.setdefault(k, []).extend(values)
    for (set_name, fraction, policy), acc in sorted(pooled.items()):
        omni = float(np.mean(pooled[(set_name, fraction, "omniscient")]["cost"]))
        mean = float(np.mean(acc["cost"]))
        entry = {
            "mean_cost_normalized": round(mean, 5),
            "deadline_misses": int(sum(acc["miss"])),
            "runs": len(acc["cost"]),
            "gap_to_omniscient": round(mean / omni - 1.0, 5),
        }
        if "spot_hours" in acc:
            entry["mean_spot_hours"] = round(float(np.mean(acc["spot_hours"])), 3)
        table.setdefault(set_name, {}).setdefault(str(fraction), {})[policy] = entry
    cells = [(s, f) for s, fr in table.items() for f in fr]

    def avg(policy: str) -> float:
        return float(np.mean([table[s][f][policy]["mean_cost_normalized"] for s, f in cells]))

    ours, up, omni = avg("ours"), avg("uniform_progress"), avg("omniscient")
    summary = {
        "mean_cost_normalized": {p: round(avg(p), 5) for p in POLICIES},
        "ours_vs_uniform_progress": round(ours / up - 1.0, 5),
        "ours_gap_to_omniscient": round(ours / omni - 1.0, 5),
        "ours_deadline_misses": sum(table[s][f]["ours"]["deadline_misses"] for s, f in cells),
        "ours_never_above_uniform_progress": all(
            table[s][f]["ours"]["mean_cost_normalized"]
            <= table[s][f]["uniform_progress"]["mean_cost_normalized"]
            for s, f in cells
        ),
    }
    return {
        "setting": {
            "on_demand_price": OD_PRICE,
            "spot_price": SPOT_PRICE,
            "changeover_hours": CHANGEOVER_HOURS,
            "deadline_hours": DEADLINE_HOURS,
            "job_fractions": list(JOB_FRACTIONS),
            "start_ticks_per_trace": n_starts,
            "seed": SEED,
            "availability": "value > 0 = spot available (16-node set: at least one instance)",
            "averages": "unweighted over (trace set, job fraction) cells",
        },
        "summary": summary,
        "trace_sets": table,
    }


def single_run(args: argparse.Namespace) -> dict[str, object]:
    trace = load_trace(Path(args.trace))
    setting = Setting.from_hours(
        trace,
        work_hours=args.work_hours,
        deadline_hours=args.deadline_hours,
        changeover_hours=args.changeover_hours,
    )
    if args.policy == "omniscient":
        cost, actions = omniscient_plan(trace.available, args.start_tick, setting)
        result = replay(trace.available, args.start_tick, setting, actions)
        assert abs(result.cost - cost) < 1e-6
    else:
        result = simulate(
            trace.available, args.start_tick, setting, _policy(args.policy, trace, setting)
        )
    g = setting.gap_hours
    return {
        "policy": args.policy,
        "cost": round(result.cost, 6),
        "spot_hours": round(result.spot_ticks * g, 6),
        "on_demand_hours": round(result.od_ticks * g, 6),
        "finish_hours": round(result.finish_tick * g, 6),
        "met_deadline": result.met_deadline,
        "actions": result.actions,
    }


def replay(available: np.ndarray, start: int, setting: Setting, actions: list[str]) -> Result:
    plan = iter(actions)
    return simulate(available, start, setting, lambda v: next(plan, ON_DEMAND))


def main(argv: list[str] | None = None) -> None:
    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description="Spot policy benchmark (Can't Be Late rules).")
    parser.add_argument("--data", type=Path, default=root / ".." / "shared" / "data")
    parser.add_argument("--starts", type=int, default=START_TICKS)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--out", type=Path, default=root / "benchmarks" / "results" / "spot_policy.json"
    )
    parser.add_argument("--trace")
    parser.add_argument("--policy", choices=POLICIES)
    parser.add_argument("--work-hours", type=float)
    parser.add_argument("--deadline-hours", type=float, default=DEADLINE_HOURS)
    parser.add_argument("--changeover-hours", type=float, default=CHANGEOVER_HOURS)
    parser.add_argument("--start-tick", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.trace:
        if not args.policy or args.work_hours is None:
            parser.error("--trace needs --policy and --work-hours")
        out = single_run(args)
        print(json.dumps(out) if args.json else json.dumps(out, indent=1))
        return
    result = run_benchmark(args.data, args.starts, args.workers)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    sys.exit(main())
