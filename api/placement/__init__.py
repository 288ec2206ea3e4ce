"""Placement: which capacity each job runs on, decided purely from a snapshot."""

from api.placement.decisions import Decision, Defer, Migrate, Place, Reject
from api.placement.estimate import Plan, estimate
from api.placement.policy import decide
from api.placement.snapshot import JobState, Placement, Reservation, Snapshot

__all__ = [
    "Decision",
    "Defer",
    "JobState",
    "Migrate",
    "Place",
    "Placement",
    "Plan",
    "Reject",
    "Reservation",
    "Snapshot",
    "decide",
    "estimate",
]
