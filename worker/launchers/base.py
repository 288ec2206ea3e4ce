"""The launcher interface: start an attempt somewhere, watch it, stop it, read its logs.

Launchers see plain values, never ORM objects, so a launch can be retried from any process.
`launch` is idempotent per attempt: launching the same attempt twice finds the first one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from api.pricing.offers import Placement
from gpujobs.runtime import RunConfig


class ObservedState(StrEnum):
    PENDING = "pending"
    NO_CAPACITY = "no_capacity"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PREEMPTED = "preempted"
    CANCELLED = "cancelled"
    LOST = "lost"  # the launcher has no record of it any more


@dataclass(frozen=True)
class Observation:
    state: ObservedState
    exit_code: int | None = None
    message: str | None = None


@dataclass(frozen=True)
class LaunchRequest:
    job_id: str
    attempt_id: str
    attempt_number: int
    job_name: str
    team: str
    placement: Placement  # the attempt's, as the scheduler placed it
    gpus_per_node: int  # what the spec asks of each node (the trainer's world size)
    run_config: RunConfig
    job_token: str
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)


class Launcher(Protocol):
    name: str

    def launch(self, request: LaunchRequest) -> str:
        """Start the attempt and return its handle; a second call returns the same handle."""
        ...

    def status(self, handle: str) -> Observation: ...

    def cancel(self, handle: str) -> None: ...

    def logs(self, handle: str, *, follow: bool = False) -> Iterator[str]: ...
