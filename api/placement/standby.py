"""Make-before-break: when a standby on spot beside a job running on on-demand is worth it.

A standby is a second attempt that gets spot capacity, starts the trainer and waits; the running
attempt then checkpoints and the standby continues from that step, so the changeover is spent
while on-demand trains and a spot launch that finds no capacity costs nothing. What it costs:
its own minutes at the spot price, paid whether or not it reaches the handover.

Judged from the job's own quantities, as the deadline rule (slack.py) judges, with no fitted
constants: the pool's learned spot lifetime L, the changeover (restart) d, the reaction step g,
the price ratio k = on-demand / spot per hour of work, and the work left w.
- The handover must keep the on-demand fallback: once on spot, a preemption costs a restart onto
  on-demand, so after one more step that restart must still meet the deadline.
- It reaches the handover with probability q = exp(-(d + g) / L) (the learned pool,
  memoryless) and costs (d + g) hours at the spot price. Handed over, it runs spot for min(L, w)
  hours, each saving k - 1 (spot prices); when L < w it is expected to be preempted before the
  end, and riding that outage on on-demand costs a restart there, d k. Held when
  q (min(L, w) (k - 1) - [L < w] d k) > d + g.
Without a deadline, time left over has no use and only the bill counts: where the rule moves
the job to spot, the move is the cheaper way unless the pool is likely to be lost during the
changeover (standby_beats_move).
`benchmarks/spot/standby.py` measures this rule against the alternatives.
"""

from __future__ import annotations

import math

from api.placement.slack import SlackView


def standby_pays(
    *, lifetime: float, work_left: float, restart: float, step: float, price_ratio: float
) -> bool:
    """q (min(L, w) (k - 1) - [L < w] d k) > d + g, q = exp(-(d + g) / L); hours, spot prices."""
    k, d, g = price_ratio, restart, step
    if k <= 1.0 or lifetime <= 0.0:
        return False
    reaches = math.exp(-(d + g) / lifetime) if math.isfinite(lifetime) else 1.0
    run = min(lifetime, work_left)
    back = d * k if lifetime < work_left else 0.0
    return reaches * (run * (k - 1.0) - back) > d + g


def standby_beats_move(*, lifetime: float, restart: float, step: float, price_ratio: float) -> bool:
    """Without a deadline, a standby instead of a move to spot: it keeps on-demand training
    through the changeover, d hours at k instead of the 1 spot would charge for that work, and
    bills its own d + g, where the move bills d; the move loses its changeover and a restart
    back, d k, when the pool goes during it (1 - q). Held when d (k - 1) + g < (1 - q) d k."""
    k, d, g = price_ratio, restart, step
    reaches = math.exp(-(d + g) / lifetime) if lifetime > 0 and math.isfinite(lifetime) else 1.0
    if lifetime <= 0:
        reaches = 0.0
    return d * (k - 1.0) + g < (1.0 - reaches) * d * k


def keeps_fallback(view: SlackView) -> bool:
    """After the handover and one more step, a restart onto on-demand still meets the deadline
    (the work left counts the changeover the running attempt has still to go through)."""
    left = view.hours_left - view.step_hours
    return left >= view.work_left + view.changeover_left + view.restart_hours
