"""The launcher scenarios of tests/launchers/scenarios.py on the real local cluster: the same test
bodies the emulator runs (tests/launchers/test_k8s_scenarios.py), with the API server, the Job
controller, the garbage collector, the kubelet and the trainer image doing what the emulated world
plays by hand."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field

import pytest

from devstack.cluster import RealCluster
from tests.k8s.test_real_launcher import request, trainer_spec
from tests.launchers import scenarios
from worker.launchers.base import Observation, ObservedState
from worker.launchers.kubernetes import KubernetesLauncher
from worker.launchers.kubernetes.manifests import secret_name
from worker.launchers.kubernetes.observe import completion_index

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]

TRAINERS: dict[scenarios.Trainer, dict[str, object]] = {
    "trains": trainer_spec(100_000),
    "finishes": trainer_spec(30),
    # A corpus the trainer cannot read: it exits non-zero at start, every time.
    "crashes": trainer_spec(10, corpus="/no/such/corpus"),
}


@dataclass
class RealWorld:
    cluster: RealCluster
    namespace: str
    pod_s3: str
    store: str
    launcher: KubernetesLauncher = field(init=False)
    seen: list[Observation] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.launcher = self.cluster.launcher(self.namespace)

    def launch(self, trainer: scenarios.Trainer, *, nodes: int = 1) -> str:
        return self.launcher.launch(
            request(trainer=dict(TRAINERS[trainer]), checkpoint_uri=self.store,
                    s3_url=self.pod_s3, nodes=nodes)
        )  # fmt: skip

    def run(self, handle: str) -> None:
        """The cluster's controllers and the trainer do it."""

    def trained(self, handle: str) -> None:
        self.settle(handle, {ObservedState.RUNNING}, timeout=180)
        self.cluster.wait(
            lambda: any('"step"' in line for line in self.launcher.logs(handle)),
            timeout=180,
            what="rank 0's first steps",
        )

    def _ranked(self, handle: str) -> list[str]:
        pods = self.cluster.pods(self.namespace, handle.split("/")[1])
        return [p.metadata.name for p in sorted(pods, key=lambda p: completion_index(p) or 0)]

    def evict(self, handle: str, rank: int) -> None:
        self.cluster.evict(self.namespace, self._ranked(handle)[rank])

    def cancel(self, handle: str) -> None:
        self.launcher.cancel(handle)

    def settle(
        self, handle: str, states: Collection[ObservedState], *, timeout: float
    ) -> Observation:
        deadline = time.monotonic() + timeout
        while True:
            observation = self.launcher.status(handle)
            self.seen.append(observation)
            if observation.state in states:
                return observation
            assert time.monotonic() < deadline, (f"{handle} never reached {states}", self.seen)
            time.sleep(0.25)

    def pods(self, handle: str) -> list[str]:
        return self._ranked(handle)

    def secrets(self, handle: str) -> list[str]:
        name = secret_name(self.launcher.config, handle.split("/")[1])
        found = self.cluster.core.list_namespaced_secret(self.namespace).items
        return [s.metadata.name for s in found if s.metadata.name == name]


@pytest.fixture
def world(real_cluster: RealCluster, namespace: str, pod_s3: str, store: str) -> RealWorld:
    return RealWorld(real_cluster, namespace, pod_s3, store)


def test_a_trainer_runs_to_success(world: RealWorld) -> None:
    scenarios.a_trainer_runs_to_success(world)


def test_an_evicted_pod_is_a_preemption(world: RealWorld) -> None:
    scenarios.an_evicted_pod_is_a_preemption(world)


def test_a_gang_with_an_evicted_rank_is_a_preemption(world: RealWorld) -> None:
    scenarios.an_evicted_pod_is_a_preemption(world, nodes=2, rank=1)


def test_a_crash_is_a_failure_with_its_exit_code(world: RealWorld) -> None:
    scenarios.a_crash_is_a_failure_with_its_exit_code(world)


def test_cancel_stops_the_pods_and_removes_the_secret(world: RealWorld) -> None:
    scenarios.cancel_stops_the_pods_and_removes_the_secret(world)
