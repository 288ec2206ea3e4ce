"""The omniscient baseline: dynamic programming over the known trace (a lower bound on cost)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from benchmarks.spot.simulator import IDLE, ON_DEMAND, SPOT, Setting


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


def omniscient_costs_zones(
    available: np.ndarray, starts: Sequence[int], setting: Setting, *, standby: bool = False
) -> np.ndarray:
    """omniscient_costs over several zones known in advance (`available`: zones x ticks): spot in
    any zone, and any move (zone to zone, spot to on-demand and back) is a new instance whose
    first d ticks make no progress. Needs d >= 1.

    With `standby`, also the simulator's make-before-break from on-demand to spot: a standby
    started at tick t in a zone whose spot lasts through t + d is billed at the spot price for
    its d changeover ticks and the handover tick, while on-demand makes d + 1 ticks of progress
    beside it; at t + d + 1 the job runs on spot (the ceiling of the standby design)."""
    s = setting
    n, W, D, d = len(starts), s.work, s.deadline, s.changeover
    if d < 1:
        raise ValueError("omniscient_costs_zones needs a changeover of at least one tick")
    Z = available.shape[0]
    avail = np.zeros((Z, n, D + d + 1), dtype=bool)
    for i, st in enumerate(starts):
        chunk = available[:, st : st + D + d + 1]
        avail[:, i, : chunk.shape[1]] = chunk
    run = np.zeros((Z, n, D + d + 2), dtype=np.int64)
    for t in range(D + d, -1, -1):
        run[:, :, t] = np.where(avail[:, :, t], run[:, :, t + 1] + 1, 0)
    inf = np.inf
    idle = np.full((n, W + 1), inf)
    idle[:, 0] = 0.0
    spot = np.full((Z, n, W + 1), inf)
    od = np.full((n, W + 1), inf)
    ring = d + 2
    pend_spot = np.full((ring, Z, n, W + 1), inf)
    pend_od = np.full((ring, n, W + 1), inf)
    best = np.full(n, inf)
    cs, co = s.spot_tick_cost, s.od_tick_cost
    for t in range(D + 1):
        slot = t % ring
        np.minimum(spot, pend_spot[slot], out=spot)
        np.minimum(od, pend_od[slot], out=od)
        pend_spot[slot].fill(inf)
        pend_od[slot].fill(inf)
        av = avail[:, :, t][:, :, None]
        np.minimum(idle, np.where(av, inf, spot).min(axis=0), out=idle)  # preempted -> idle
        spot = np.where(av, spot, inf)
        done = np.minimum(np.minimum(idle[:, W], spot[:, :, W].min(axis=0)), od[:, W])
        np.minimum(best, done, out=best)
        if t == D:
            break
        idle[:, W] = od[:, W] = inf
        spot[:, :, W] = inf
        any_spot = spot.min(axis=0)
        nxt_idle = np.minimum(np.minimum(idle, any_spot), od)
        nxt_spot = np.full((Z, n, W + 1), inf)
        nxt_spot[:, :, 1:] = spot[:, :, :-1] + cs
        nxt_od = np.full((n, W + 1), inf)
        nxt_od[:, 1:] = od[:, :-1] + co
        if t + d <= D:
            target = (t + d) % ring
            base = np.minimum(idle, od)
            for z in range(Z):
                others = np.delete(spot, z, axis=0)
                src = np.minimum(base, others.min(axis=0)) if Z > 1 else base
                can = (run[z, :, t] >= d)[:, None]
                start = np.where(can, src + d * cs, inf)
                np.minimum(pend_spot[target, z], start, out=pend_spot[target, z])
            np.minimum(pend_od[target], np.minimum(idle, any_spot) + d * co, out=pend_od[target])
        if standby and t + d + 1 <= D:
            target, k = (t + d + 1) % ring, d + 1
            handed = np.full((n, W + 1), inf)
            handed[:, k:] = od[:, : W + 1 - k] + k * (co + cs)
            for z in range(Z):
                can = (run[z, :, t] >= k)[:, None]
                np.minimum(
                    pend_spot[target, z], np.where(can, handed, inf), out=pend_spot[target, z]
                )
        idle, spot, od = nxt_idle, nxt_spot, nxt_od
    return best
