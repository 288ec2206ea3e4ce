"""What the Kubernetes launcher must read from a cluster, as test bodies run on two worlds.

The same scenario runs against the emulator (tests/launchers/test_k8s_scenarios.py: kmock, where
`EmulatedWorld` plays the Job controller, the kubelet and the garbage collector by hand, step by
step, as the real ones were seen to do) and against the real local cluster
(tests/k8s/test_real_scenarios.py: its controllers do it). Where the two differ the emulated
world is wrong: the real one is the reference (the gang eviction below is such a case: the
emulator ended the Job at once, the real Job controller first writes FailureTarget, lets the
evicted pod go and stops the other rank, and only then writes Failed).

A world records every observation the launcher gave while a scenario ran (`seen`), so a scenario
can say what must never be read on the way, not only where it ends.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal, Protocol

from worker.launchers.base import Observation, ObservedState
from worker.launchers.kubernetes import KubernetesLauncher

# What the attempt's trainer does once its pods run: trains until stopped, finishes (a short
# run), or crashes at start (an option it refuses).
Trainer = Literal["trains", "finishes", "crashes"]
ENDED = frozenset(
    {ObservedState.SUCCEEDED, ObservedState.FAILED, ObservedState.PREEMPTED}
)  # fmt: skip
PREEMPTED_EXITS = (75, 76)


class World(Protocol):
    launcher: KubernetesLauncher
    seen: list[Observation]

    def launch(self, trainer: Trainer, *, nodes: int = 1) -> str:
        """Launch an attempt whose trainer does `trainer`; its handle."""
        ...

    def run(self, handle: str) -> None:
        """Its pods start and its trainer does what it does (until stopped, when it trains)."""
        ...

    def trained(self, handle: str) -> None:
        """Wait until every rank runs and rank 0 has trained some steps."""
        ...

    def evict(self, handle: str, rank: int) -> None:
        """The Eviction API on the pod of `rank`, as a cloud's spot reclaim does it."""
        ...

    def cancel(self, handle: str) -> None:
        """launcher.cancel, and what the cluster then does with the pods."""
        ...

    def settle(
        self, handle: str, states: Collection[ObservedState], *, timeout: float
    ) -> Observation:
        """Poll the launcher until it reads one of `states`; each reading goes to `seen`."""
        ...

    def pods(self, handle: str) -> list[str]: ...

    def secrets(self, handle: str) -> list[str]: ...


def _states(world: World) -> list[ObservedState]:
    return [o.state for o in world.seen]


def a_trainer_runs_to_success(world: World) -> None:
    handle = world.launch("finishes")
    world.run(handle)
    done = world.settle(handle, ENDED, timeout=300)
    assert (done.state, done.exit_code) == (ObservedState.SUCCEEDED, 0), done
    assert not {ObservedState.FAILED, ObservedState.PREEMPTED} & set(_states(world)), world.seen


def an_evicted_pod_is_a_preemption(world: World, *, nodes: int = 1, rank: int = 0) -> None:
    """The notice (DisruptionTarget, SIGTERM) to one rank; the trainers checkpoint and exit 75.
    Every rank's end is read as the preemption, never as a failure on the way."""
    handle = world.launch("trains", nodes=nodes)
    world.run(handle)
    world.trained(handle)
    before = len(world.seen)
    world.evict(handle, rank)
    ended = world.settle(handle, ENDED, timeout=180)
    assert ended.state is ObservedState.PREEMPTED, ended
    # The exit code is the trainer's (75: it checkpointed) while a pod of it is left to read;
    # once the Job controller has let them all go, only the Job's condition tells.
    assert ended.exit_code in (None, *PREEMPTED_EXITS), ended
    after = _states(world)[before:]
    assert ObservedState.FAILED not in after, world.seen[before:]


def a_crash_is_a_failure_with_its_exit_code(world: World) -> None:
    handle = world.launch("crashes")
    world.run(handle)
    ended = world.settle(handle, ENDED, timeout=180)
    assert ended.state is ObservedState.FAILED, ended
    assert ended.exit_code not in (None, 0, *PREEMPTED_EXITS), ended
    assert ObservedState.PREEMPTED not in _states(world), world.seen


def cancel_stops_the_pods_and_removes_the_secret(world: World) -> None:
    handle = world.launch("trains")
    world.run(handle)
    world.settle(handle, {ObservedState.RUNNING}, timeout=180)
    before = len(world.seen)
    world.cancel(handle)
    # Deleted in the foreground: the Job stays until its pods are gone (their trainers saving
    # in the grace period read as still running, then cancelled), then it is gone too.
    world.settle(handle, {ObservedState.LOST}, timeout=120)
    assert not world.pods(handle)
    assert not world.secrets(handle)
    on_the_way = set(_states(world)[before:])
    assert on_the_way <= {ObservedState.RUNNING, ObservedState.CANCELLED, ObservedState.LOST}, (
        world.seen[before:]
    )
