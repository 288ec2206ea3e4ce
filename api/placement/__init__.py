"""Placement: which capacity each job runs on, decided purely from a snapshot."""

from api.placement.decisions import (
    Decision,
    Defer,
    Migrate,
    Place,
    Reject,
    Standby,
    Unweighable,
    Withdraw,
)
from api.placement.estimate import Estimate, Weighed, estimate
from api.placement.plan import Plan
from api.placement.policy import decide
from api.placement.snapshot import Current, JobState, Reservation, Snapshot
from api.pricing.offers import Placement

__all__ = [
    "Current",
    "Decision",
    "Defer",
    "Estimate",
    "JobState",
    "Migrate",
    "Place",
    "Placement",
    "Plan",
    "Reject",
    "Reservation",
    "Snapshot",
    "Standby",
    "Unweighable",
    "Withdraw",
    "Weighed",
    "decide",
    "estimate",
]
