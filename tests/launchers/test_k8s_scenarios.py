"""The launcher scenarios of tests/launchers/scenarios.py on the emulator, whose controllers are
played here by hand, the way the real cluster's were seen to act (tests/k8s/test_real_scenarios.py
runs the same bodies there)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import pytest

from tests.launchers import scenarios
from tests.launchers.conftest import NAMESPACE, Cluster
from worker.launchers.base import LaunchRequest, Observation, ObservedState
from worker.launchers.kubernetes import KubernetesLauncher
from worker.launchers.kubernetes.manifests import secret_name
from worker.launchers.kubernetes.observe import completion_index

RequestFactory = Callable[..., LaunchRequest]
# What the trainer of each kind exits with once it stops by itself.
EXITS = {"finishes": 0, "crashes": 1}


@dataclass
class EmulatedWorld:
    cluster: Cluster
    make_request: RequestFactory
    launcher: KubernetesLauncher = field(init=False)
    seen: list[Observation] = field(default_factory=list)
    trainers: dict[str, scenarios.Trainer] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.launcher = self.cluster.launcher()

    def _observe(self, handle: str) -> Observation:
        observation = self.launcher.status(handle)
        self.seen.append(observation)
        return observation

    def _ranked(self, handle: str) -> list[str]:
        pods = self.cluster.core.list_namespaced_pod(
            NAMESPACE, label_selector=f"batch.kubernetes.io/job-name={handle.split('/')[1]}"
        ).items
        return [p.metadata.name for p in sorted(pods, key=lambda p: completion_index(p) or 0)]

    def launch(self, trainer: scenarios.Trainer, *, nodes: int = 1) -> str:
        handle = self.launcher.launch(self.make_request(nodes=nodes))
        self.trainers[handle] = trainer
        self._observe(handle)
        return handle

    def run(self, handle: str) -> None:
        """The Job controller makes the pods, the kubelet starts them; a trainer that stops by
        itself does, and the Job controller writes the Job's end."""
        pods = self.cluster.start_pods(handle)
        self._observe(handle)
        for pod in pods:
            self.cluster.set_pod_status(pod, self.cluster.running())
        self._observe(handle)
        trainer = self.trainers[handle]
        if trainer == "trains":
            return
        code = EXITS[trainer]
        for pod in pods:
            self.cluster.set_pod_status(pod, self.cluster.terminated(code))
            self._observe(handle)
        if code == 0:
            self.cluster.set_job_conditions(
                handle, self.cluster.condition("Complete", "True", "CompletionsReached")
            )
        else:
            self.cluster.fail_by_policy(handle, pods[0], exit_code=code, disrupted=False)

    def trained(self, handle: str) -> None:
        self._observe(handle)

    def evict(self, handle: str, rank: int) -> None:
        """What the real cluster did (tests/k8s): the evicted pod gets DisruptionTarget and
        SIGTERM, its trainer checkpoints and exits 75; the Job controller writes FailureTarget
        (the disruption rule), lets the evicted pod go and stops the other ranks, whose
        trainers checkpoint and exit 75 too; only then does it write Failed."""
        pods = self._ranked(handle)
        evicted = pods[rank]
        disruption = self.cluster.condition(
            "DisruptionTarget", "True", "EvictionByEvictionAPI", message="Eviction API: evicting"
        )
        self.cluster.set_pod_status(evicted, {"conditions": [disruption]})
        self._observe(handle)
        self.cluster.set_pod_status(evicted, self.cluster.terminated(75))
        self._observe(handle)
        self.cluster.fail_by_policy(
            handle, evicted, exit_code=75, disrupted=True, condition="FailureTarget"
        )
        self.cluster.core.delete_namespaced_pod(evicted, NAMESPACE)
        self._observe(handle)
        for pod in pods:
            if pod != evicted:
                self.cluster.set_pod_status(pod, self.cluster.terminated(75))
                self._observe(handle)
        self.cluster.fail_by_policy(handle, evicted, exit_code=75, disrupted=True)

    def cancel(self, handle: str) -> None:
        """The launcher deletes the Job; the garbage collector then deletes its pods (the
        emulator has none: played here)."""
        self.launcher.cancel(handle)
        for pod in self._ranked(handle):
            self.cluster.core.delete_namespaced_pod(pod, NAMESPACE)

    def settle(
        self, handle: str, states: Collection[ObservedState], *, timeout: float
    ) -> Observation:
        # Nothing moves in the emulator but what the world did: the reading now is the last.
        observation = self._observe(handle)
        assert observation.state in states, (observation, self.seen)
        return observation

    def pods(self, handle: str) -> list[str]:
        return self._ranked(handle)

    def secrets(self, handle: str) -> list[str]:
        name = secret_name(self.launcher.config, handle.split("/")[1])
        found = self.cluster.core.list_namespaced_secret(NAMESPACE).items
        return [s.metadata.name for s in found if s.metadata.name == name]


@pytest.fixture
def world(cluster: Cluster, make_request: RequestFactory) -> EmulatedWorld:
    return EmulatedWorld(cluster, make_request)


def test_a_trainer_runs_to_success(world: EmulatedWorld) -> None:
    scenarios.a_trainer_runs_to_success(world)


def test_an_evicted_pod_is_a_preemption(world: EmulatedWorld) -> None:
    scenarios.an_evicted_pod_is_a_preemption(world)


def test_a_gang_with_an_evicted_rank_is_a_preemption(world: EmulatedWorld) -> None:
    scenarios.an_evicted_pod_is_a_preemption(world, nodes=2, rank=1)


def test_a_crash_is_a_failure_with_its_exit_code(world: EmulatedWorld) -> None:
    scenarios.a_crash_is_a_failure_with_its_exit_code(world)


def test_cancel_stops_the_pods_and_removes_the_secret(world: EmulatedWorld) -> None:
    scenarios.cancel_stops_the_pods_and_removes_the_secret(world)
