"""The launcher interface: start an attempt somewhere, watch it, stop it, read its logs.

Launchers see plain values, never ORM objects, so a launch can be retried from any process.
`launch` is idempotent per attempt: launching the same attempt twice finds the first one.

What only some launchers can do, each declares in `capabilities`; callers ask for it by name
(`drains`, `spot_probe`, `offset_logs`), which gives the launcher typed as able, or None; a
capability with no calls of its own (`standby`) is a yes or no.

It depends on the contract (gpujobs) alone, not on the API's internals: what a launcher reads of
a placement is `Placed` here, which the API's `Placement` (api.pricing.offers) is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from gpujobs.logs import LogChunk
from gpujobs.runtime import RunConfig
from gpujobs.spec import CapacityType
from worker.storage_credentials import S3Credentials


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
    # PENDING because something outside the attempt holds it until that frees (a queue's quota:
    # Kueue's): the wait may last, so its job's status line says the message, and its events
    # each new one.
    held: bool = False
    # Of an attempt that has ended: how many of its processes had to be killed (they outlived
    # its trainer, or a stop's notice). A launcher that cannot tell says 0.
    killed: int = 0


class Placed(Protocol):
    """Where the scheduler placed an attempt, as a launcher reads it (not its price)."""

    @property
    def cloud(self) -> str: ...
    @property
    def region(self) -> str: ...
    @property
    def zone(self) -> str: ...
    @property
    def instance_type(self) -> str: ...
    @property
    def gpu_model(self) -> str: ...
    @property
    def gpu_count(self) -> int: ...  # per node
    @property
    def nodes(self) -> int: ...
    @property
    def capacity_type(self) -> CapacityType: ...


@dataclass(frozen=True)
class LaunchRequest:
    job_id: str
    attempt_id: str
    attempt_number: int
    job_name: str
    team: str
    placement: Placed  # the attempt's, as the scheduler placed it
    gpus_per_node: int  # what the spec asks of each node (the trainer's world size)
    run_config: RunConfig
    job_token: str
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    # The attempt's own S3 keys (worker.storage_credentials); None: the launcher's static ones.
    storage: S3Credentials | None = field(default=None, repr=False)


class LaunchRefused(ValueError):
    """The attempt can never be launched as asked (an environment no process can hold): a retry
    would fail the same way, and mint another job token each time. Raised before anything is
    started; the job fails with this message, which names what to fix."""


class Capability(StrEnum):
    """What a launcher may do besides the protocol's four calls."""

    DRAIN = "drain"  # stops this machine's attempts as a spot notice would (Drains)
    SPOT_AVAILABILITY = "spot_availability"  # tells whether spot is offered now (SpotProbe)
    LOG_OFFSET = "log_offset"  # reads a log from a byte offset, a chunk at a time (OffsetLogs)
    # Runs a standby attempt beside the job's running attempt (make-before-break, #25): two
    # attempts of one job at once, each stopped, observed and billed on its own.
    STANDBY = "standby"


class Launcher(Protocol):
    name: str
    capabilities: frozenset[Capability]

    def launch(self, request: LaunchRequest) -> str:
        """Start the attempt and return its handle; a second call returns the same handle."""
        ...

    def status(self, handle: str) -> Observation: ...

    def cancel(self, handle: str) -> None: ...

    def logs(self, handle: str, *, follow: bool = False) -> Iterator[str]: ...


@runtime_checkable
class Drains(Protocol):
    def drain(self, *, timeout_s: float | None = None) -> list[str]:
        """The machine is going away: give every running attempt the preemption notice, wait
        up to `timeout_s` for them to exit, then kill what is left. Returns their handles."""
        ...


@runtime_checkable
class SpotProbe(Protocol):
    def spot_available(self) -> bool | None:
        """Whether spot capacity is offered now; None when the launcher cannot tell."""
        ...


@runtime_checkable
class OffsetLogs(Protocol):
    def read_log(self, handle: str, *, offset: int = 0) -> Iterator[LogChunk]:
        """The log from byte `offset` (from the end when negative) to where it ends now, in
        chunks of at most gpujobs.logs.CHUNK_BYTES."""
        ...


class CapabilityMissing(TypeError):
    """A launcher declares a capability it does not implement."""


def drains(launcher: Launcher) -> Drains | None:
    if Capability.DRAIN not in launcher.capabilities:
        return None
    if not isinstance(launcher, Drains):
        raise CapabilityMissing(f"the {launcher.name} launcher declares drain but has no drain()")
    return launcher


def spot_probe(launcher: Launcher) -> SpotProbe | None:
    if Capability.SPOT_AVAILABILITY not in launcher.capabilities:
        return None
    if not isinstance(launcher, SpotProbe):
        raise CapabilityMissing(
            f"the {launcher.name} launcher declares spot availability but has no spot_available()"
        )
    return launcher


def offset_logs(launcher: Launcher) -> OffsetLogs | None:
    if Capability.LOG_OFFSET not in launcher.capabilities:
        return None
    if not isinstance(launcher, OffsetLogs):
        raise CapabilityMissing(
            f"the {launcher.name} launcher declares log offsets but has no read_log()"
        )
    return launcher


def holds_standby(launcher: Launcher) -> bool:
    """Whether the launcher may hold a standby attempt beside the job's running one. Nothing
    to call: each is an attempt of its own, with its own handle, for the four calls above."""
    return Capability.STANDBY in launcher.capabilities
