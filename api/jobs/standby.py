"""A standby's life, from its attempt's stored columns: its states and the named transitions
between them, the only code that writes them (make-before-break: worker/handover.py walks it,
api.placement.standby decides when one is worth holding).

    HELD ──ready──> READY ──release──> RELEASED ──hand_over──> HANDED_OVER (the job's primary)
      │               │                   │
      └──── stop / withdraw ────> STOPPING ──> ENDED (closed as a standby: on the ledger only)

Held: launched beside the job's running attempt, its trainer building. Ready: its trainer waits
for its go (`ready_at`). Released: the attempt it stands beside was asked to checkpoint and stop
(`stop_reason = handover` on that attempt, the only state read from another row). Handed over:
promoted, the job's primary from then on. Stopping: asked to stop before a handover (`stop_reason`
on the standby), answered `stop` and never released. Ended: closed while still a standby, whatever
ended it (`ended_at`; worker.billing.close writes that, with its cost).

The states are derived, never stored, so the columns stay as they were (no migration): the role
flag (`JobAttempt.role`), `ready_at`, `stop_reason`, `ended_at`, and the running attempt's
`stop_reason`. A transition the state does not allow raises `IllegalTransition`: a caller that
takes one out of turn has misread the attempt, and writing anyway would break the rule that
exactly one attempt trains at any moment.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum, StrEnum

from api.models import AttemptRole, JobAttempt
from gpujobs.reasons import EndReason, StopReason


class StandbyState(StrEnum):
    HELD = "held"
    READY = "ready"
    RELEASED = "released"
    HANDED_OVER = "handed_over"
    STOPPING = "stopping"
    ENDED = "ended"


class Transition(Enum):
    """Each transition with the states it may start from and the one it leads to."""

    READY = (frozenset({StandbyState.HELD}), StandbyState.READY)
    RELEASE = (frozenset({StandbyState.READY}), StandbyState.RELEASED)
    HAND_OVER = (frozenset({StandbyState.RELEASED}), StandbyState.HANDED_OVER)
    # Once the running attempt is released the standby is the attempt that trains next: the
    # rule that held it may no longer withdraw it; only its job's end, move or stop does.
    WITHDRAW = (frozenset({StandbyState.HELD, StandbyState.READY}), StandbyState.STOPPING)
    STOP = (
        frozenset({StandbyState.HELD, StandbyState.READY, StandbyState.RELEASED}),
        StandbyState.STOPPING,
    )

    @property
    def sources(self) -> frozenset[StandbyState]:
        return self.value[0]

    @property
    def target(self) -> StandbyState:
        return self.value[1]


class IllegalTransition(RuntimeError):
    def __init__(self, transition: Transition, state: StandbyState | None) -> None:
        super().__init__(
            f"a standby cannot {transition.name.lower().replace('_', ' ')} "
            f"from {state.value if state else 'not being a standby'}"
        )
        self.transition = transition
        self.state = state


# Why a standby was asked to stop before its handover (the stop reasons STOP writes).
STOPS = frozenset({StopReason.STANDBY_STOP, StopReason.STANDBY_STUCK})


def state(attempt: JobAttempt, *, running: JobAttempt | None = None) -> StandbyState | None:
    """Where `attempt` is in a standby's life; None for an attempt that never was a standby.
    `running`: the attempt it stands beside, whose release makes it RELEASED; without it a
    released standby reads as READY (its trainer's answer is the same: wait)."""
    if attempt.role is AttemptRole.PRIMARY:
        # Only a standby's trainer says it is ready: a primary with `ready_at` was promoted.
        return StandbyState.HANDED_OVER if attempt.ready_at is not None else None
    if attempt.ended_at is not None:
        return StandbyState.ENDED
    if attempt.stop_reason is not None:
        return StandbyState.STOPPING
    if attempt.ready_at is None:
        return StandbyState.HELD
    if running is not None and running.stop_reason == StopReason.HANDOVER:
        return StandbyState.RELEASED
    return StandbyState.READY


def may(transition: Transition, attempt: JobAttempt, *, running: JobAttempt | None = None) -> bool:
    return state(attempt, running=running) in transition.sources


def _take(transition: Transition, attempt: JobAttempt, *, running: JobAttempt | None) -> None:
    found = state(attempt, running=running)
    if found not in transition.sources:
        raise IllegalTransition(transition, found)


def ready(standby: JobAttempt, *, now: datetime) -> None:
    """Its trainer has built and waits for its go: the handover may begin."""
    _take(Transition.READY, standby, running=None)
    standby.ready_at = now


def release(standby: JobAttempt, *, running: JobAttempt) -> None:
    """Ask the attempt it stands beside to checkpoint and stop, for the standby to go on."""
    _take(Transition.RELEASE, standby, running=running)
    running.stop_reason = StopReason.HANDOVER


def hand_over(
    standby: JobAttempt, *, old: JobAttempt, resume_from_step: int | None, now: datetime
) -> None:
    """`old` has gone: the standby becomes the job's primary and trains from `resume_from_step`."""
    _take(Transition.HAND_OVER, standby, running=old)
    standby.role = AttemptRole.PRIMARY
    standby.resume_from_step = resume_from_step
    standby.running_at = now  # it trains from here: its first report is waited for from here
    if standby.started_at is None:
        standby.started_at = standby.launched_at or now


def withdraw(standby: JobAttempt, *, running: JobAttempt | None) -> None:
    """The rule that held it no longer does (api.placement.policy's Withdraw)."""
    _take(Transition.WITHDRAW, standby, running=running)
    standby.stop_reason = StopReason.WITHDRAWN


def stop(standby: JobAttempt, *, reason: StopReason, running: JobAttempt | None) -> None:
    """Its job no longer runs where it stood (STANDBY_STOP), or its trainer never waited
    (STANDBY_STUCK)."""
    if reason not in STOPS:
        raise ValueError(f"{reason} is not why a standby stops")
    _take(Transition.STOP, standby, running=running)
    standby.stop_reason = reason


def unlaunched_end(attempt: JobAttempt, *, job_running: bool) -> EndReason | None:
    """How a standby whose launch comes only now ends instead of launching: it was withdrawn
    before its launch, or its job ended or moved since (its launch failed, and was retried). None:
    launch it (a primary, or a standby still wanted)."""
    found = state(attempt)
    if found is StandbyState.STOPPING:
        return (
            EndReason.WITHDRAWN
            if attempt.stop_reason == StopReason.WITHDRAWN
            else EndReason.STANDBY_STOPPED
        )
    if found in Transition.STOP.sources and not job_running:
        stop(attempt, reason=StopReason.STANDBY_STOP, running=None)
        return EndReason.STANDBY_STOPPED
    return None
