"""watch_attempts: the reconciler's fast path, against the emulator's watch streams."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import kmock

from worker.launchers.base import LaunchRequest, Observation, ObservedState

if TYPE_CHECKING:
    from conftest import Cluster

    from worker.launchers.kubernetes import KubernetesLauncher

NS = "gpujobs-test"
RequestFactory = Callable[..., LaunchRequest]


def collect(
    launcher: KubernetesLauncher,
    *,
    timeout_s: float,
    until: ObservedState | None = None,
) -> list[tuple[str, Observation]]:
    seen = []
    for handle, observation in launcher.watch_attempts(timeout_s):
        seen.append((handle, observation))
        if observation.state is until:
            break
    return seen


def later(delay_s: float, action: Callable[[], None]) -> threading.Timer:
    timer = threading.Timer(delay_s, action)
    timer.start()
    return timer


def watch_params(cluster: Cluster, plural: str) -> list[dict[str, str]]:
    return [
        dict(r.params)
        for r in cluster.requests("GET")
        if r.url.path.endswith(f"/{plural}") and r.params.get("watch", "").lower() == "true"
    ]


def pod_lists(cluster: Cluster) -> list[dict[str, str]]:
    return [
        dict(r.params)
        for r in cluster.requests("GET")
        if r.url.path.endswith("/pods") and "watch" not in r.params
    ]


def test_watch_reports_a_disruption_as_it_happens(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    (pod,) = cluster.start_pods(handle)
    cluster.set_pod_status(pod, cluster.running())

    def preempt() -> None:
        disruption = cluster.condition("DisruptionTarget", "True", "TerminationByKubelet")
        cluster.set_pod_status(pod, {**cluster.terminated(143), "conditions": [disruption]})

    started = time.monotonic()
    timer = later(0.3, preempt)
    seen = collect(launcher, timeout_s=10, until=ObservedState.PREEMPTED)
    timer.join()

    assert time.monotonic() - started < 5  # the event, not the timeout, ended the wait
    assert [(h, o.state) for h, o in seen] == [
        (handle, ObservedState.RUNNING),
        (handle, ObservedState.PREEMPTED),
    ]
    assert seen[-1][1].exit_code == 143


def test_watch_reports_changes_only_and_resumes_from_the_last_version(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    (pod,) = cluster.start_pods(handle)
    cluster.set_pod_status(pod, cluster.running())

    first = collect(launcher, timeout_s=1)
    assert [(h, o.state) for h, o in first] == [(handle, ObservedState.RUNNING)]
    last_pod_version = cluster.core.read_namespaced_pod(pod, NS).metadata.resource_version
    last_job_version = cluster.batch.read_namespaced_job(handle.split("/")[1], NS)
    last_job_version = last_job_version.metadata.resource_version

    # Nothing changed: nothing to report, even though kmock replays every object.
    assert collect(launcher, timeout_s=1) == []
    # The second round of watches asked to resume where the first one stopped.
    assert watch_params(cluster, "pods")[-1]["resourceVersion"] == last_pod_version
    assert watch_params(cluster, "jobs")[-1]["resourceVersion"] == last_job_version

    later(0.2, lambda: cluster.set_pod_status(pod, cluster.terminated(0, reason="Completed")))
    seen = collect(launcher, timeout_s=5, until=ObservedState.SUCCEEDED)
    assert [(h, o.state) for h, o in seen] == [(handle, ObservedState.SUCCEEDED)]


def test_watch_reports_a_deleted_job_as_lost(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    assert [o.state for _, o in collect(launcher, timeout_s=1)] == [ObservedState.PENDING]

    later(0.2, lambda: cluster.batch.delete_namespaced_job(handle.split("/")[1], NS))
    seen = collect(launcher, timeout_s=5, until=ObservedState.LOST)
    assert [(h, o.state) for h, o in seen] == [(handle, ObservedState.LOST)]


def test_watch_ignores_objects_it_does_not_manage(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    cluster.core.create_namespaced_pod(
        NS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "someone-else", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx"}]},
        },
    )
    handle = launcher.launch(make_request())
    assert [h for h, _ in collect(launcher, timeout_s=1)] == [handle]


def test_watch_starts_over_when_its_version_expired(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    assert len(collect(launcher, timeout_s=1)) == 1
    # The server compacted its history: the resumed pod watch is told 410 Gone, once.
    expired = {
        "type": "ERROR",
        "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"},
    }
    pod_watches = cluster.emulator[kmock.action.WATCH, kmock.resource("", "v1", "pods")]
    served = len(list(pod_watches))  # kmock slices count requests from the very first one
    pod_watches[served : served + 1] << (b"", expired)

    (pod,) = cluster.start_pods(handle)
    later(0.3, lambda: cluster.set_pod_status(pod, cluster.running()))
    seen = collect(launcher, timeout_s=5, until=ObservedState.RUNNING)

    assert [(h, o.state) for h, o in seen][-1] == (handle, ObservedState.RUNNING)
    # Listed at the start, resumed and got 410, listed again, and watched on from there.
    assert len(pod_lists(cluster)) == 2
    assert len(watch_params(cluster, "pods")) == 3
