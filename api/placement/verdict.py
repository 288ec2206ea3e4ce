"""The verdict: what a job in a situation runs on now, and whether a standby is worth holding.

decide() judges the job it is given; the quote's simulation judges the job as each simulated
moment leaves it. Both ask `ruling()`, so the quote prices the very rule decide() applies: the
deadline rule (slack.py) between spot, on-demand and waiting, and make-before-break
(standby.py) beside on-demand. What decide() adds around it (reservations, budgets, the
offers where a standby failed before) is its own.

A `Situation` holds what stays put while the job runs or waits; a `Moment` what moves: the hours
left, the work left, what runs and for how long, and whether spot has capacity (`sit.spot`).
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import NamedTuple

from api.placement.options import work_hours
from api.placement.situation import Situation, Terms
from api.placement.slack import Choice, SlackView, Verdict, rule
from api.placement.standby import keeps_fallback, standby_beats_move, standby_pays
from gpujobs.spec import CapacityType


class Moment(NamedTuple):
    """What the rule looks at that changes while the job runs or waits. A NamedTuple, as
    Ruling: the quote makes one per simulated step, where a frozen dataclass's construction
    added about a sixth to its time."""

    hours_left: float | None  # to the deadline; None without one
    work: float  # hours on the situation's unit GPU (Situation.unit), stalls excluded
    spot_work: float  # the same work in hours on the spot GPU: what a standby there would run
    on: Choice  # what runs: WAIT when nothing does (reserved counts as ON_DEMAND)
    changeover_left: float  # restart hours the running attempt still has to go through
    on_hours: float  # how long the running attempt has run; inf when nothing runs
    spot_held: bool = False  # it runs on the spot pool judged (slack.SlackView.spot_held)


class Hold(StrEnum):
    """Why a standby on spot is worth holding beside on-demand."""

    SPOT_BACK = "spot_back"  # the rule moves the job to spot: the standby makes that move
    PAYS = "pays"  # on-demand stays, and a standby pays for itself (standby.standby_pays)


class Ruling(NamedTuple):
    verdict: Verdict
    view: SlackView | None  # the deadline rule's view; None where it was not needed
    standby: Hold | None  # asked only where one could be held; None: not worth it (or not asked)


def moment(sit: Situation) -> Moment:
    """The job as decide() finds it at `sit.now`: what it runs on, and since when."""
    job, spot = sit.job, sit.spot
    current = job.current if job.state == "running" else None
    on, ran, changeover_left = Choice.WAIT, math.inf, 0.0
    if current is not None:
        on = Choice.SPOT if current.capacity_type == CapacityType.SPOT else Choice.ON_DEMAND
        ran = (sit.now - current.started_at).total_seconds() / 3600.0
        changeover_left = 0.0 if current.warm else max(0.0, sit.restart_hours - ran)
    return Moment(
        hours_left=sit.hours_left,
        work=work_hours(job, sit.on_demand) if sit.on_demand is not None else 0.0,
        spot_work=work_hours(job, spot) if spot is not None else 0.0,
        on=on,
        changeover_left=changeover_left,
        on_hours=ran,
        spot_held=(
            current is not None
            and spot is not None
            and current.capacity_type == CapacityType.SPOT
            and current.offer_key == spot.offer.key
        ),
    )


def ruling(
    sit: Situation, at: Moment | None = None, terms: Terms | None = None, *, held: bool = False
) -> Ruling:
    """The verdict on `sit` at `at` (decide()'s moment: `moment(sit)`) under `terms` (the
    situation's own: `sit.terms()`), and, where the job runs on on-demand with spot there and
    standbys allowed, whether a standby on `sit.spot` is worth holding. `held`: one is held
    already, judged again; its start is spent, so without a deadline it no longer has to beat
    the move to spot that it replaced."""
    if at is None:
        at = moment(sit)
    if terms is None:
        terms = sit.terms()
    verdict, view = _verdict(sit, at, terms)
    standby = None
    if sit.spot is not None and (held or (sit.standby and at.on is Choice.ON_DEMAND)):
        standby = _hold(sit, at, terms, verdict, view, held=held)
    return Ruling(verdict, view, standby)


def _verdict(sit: Situation, at: Moment, terms: Terms) -> tuple[Verdict, SlackView | None]:
    spot, od = sit.spot, sit.on_demand
    if od is None:
        if spot is not None:
            return Verdict(Choice.SPOT, "cheapest expected cost while slack remains"), None
        return Verdict(Choice.WAIT, "no on-demand option to fall back on"), None
    if CapacityType.SPOT not in sit.job.spec.capacity.types:
        return Verdict(Choice.ON_DEMAND, "the spec's capacity.types do not allow spot"), None
    if spot is None and at.on is not Choice.WAIT:
        return Verdict(Choice.ON_DEMAND, "no usable spot offer now"), None
    if at.hours_left is None:
        # No deadline: no reason to pay on-demand while spot is there.
        if spot is not None:
            return Verdict(Choice.SPOT, "cheapest expected cost while slack remains"), None
        return Verdict(
            Choice.ON_DEMAND, "no usable spot offer now, and no deadline to wait in"
        ), None
    view = slack_view(sit, at, terms)
    return rule(view), view


def slack_view(sit: Situation, at: Moment, terms: Terms) -> SlackView:
    """The deadline rule's view of `sit` at `at`, which has a deadline."""
    assert at.hours_left is not None
    return sit.view(
        terms,
        hours_left=at.hours_left,
        work=at.work,
        on=at.on,
        changeover_left=at.changeover_left,
        spot_available=sit.spot is not None,
        on_hours=at.on_hours,
        spot_held=at.spot_held,
    )


def _hold(
    sit: Situation,
    at: Moment,
    terms: Terms,
    verdict: Verdict,
    view: SlackView | None,
    *,
    held: bool,
) -> Hold | None:
    """A standby on `sit.spot` beside on-demand where the rule would move the job to spot, or
    where one pays for itself; None: keep on-demand alone."""
    spot = sit.spot
    assert spot is not None
    if (
        at.hours_left is None
        and not held
        and not standby_beats_move(
            lifetime=spot.lifetime_hours,
            restart=sit.restart_hours,
            step=terms.step_hours,
            price_ratio=terms.price_ratio,
        )
    ):
        return None  # no deadline: the move to spot is the cheaper way
    if view is not None and not keeps_fallback(view):
        return None
    if verdict.choice is Choice.SPOT:
        return Hold.SPOT_BACK
    if standby_pays(
        lifetime=spot.lifetime_hours,
        work_left=at.spot_work,
        restart=sit.restart_hours,
        step=terms.step_hours,
        price_ratio=terms.price_ratio,
    ):
        return Hold.PAYS
    return None
