"""Recovery from a preemption on the real local cluster, beside the local launcher's, in one run.

    python -m benchmarks.k8s_recovery [--runs 3] [--local-runs 3]

The whole service (API, a Celery worker and beat, PostgreSQL, Redis, SeaweedFS) launches on the
cluster of `make cluster` (scripts/cluster/) with GPUJOBS_LAUNCHER=kubernetes, the trainer image
already in the node's containerd. One tiny-GPT job (spot or on-demand, a generous deadline) trains
in a pod; once it has trained a while its pod is evicted through the Eviction API, as a cloud's
spot reclaim (Karpenter's interruption handling, a node drain) does. The run ends at the first
training step of the next attempt, in a new pod.

notice -> resumed is split into
  detect:     the eviction -> the reconciler closes the attempt as preempted (ended_at); the
              trainer's `preempted` event (its checkpoint on SIGTERM) on the way
  reschedule: -> the next attempt row (created_at)
  start:      -> its pod's container started (the Job, the scheduler, the kubelet, containerd)
  restore:    -> the trainer's first step (interpreter, imports, model, checkpoint load)
Steps lost = the step the evicted trainer stopped at (its `preempted` event) minus the step the
next attempt resumed from (its `resume` event).

The local launcher's figure comes from benchmarks.recovery's run in the same process (notice by
the trace market, spot back after a short gap that is reported apart). Writes
benchmarks/results/k8s_recovery.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks import recovery
from devstack.cluster import (
    TRAINER_IMAGE,
    RealCluster,
    build_trainer_image,
    cluster_setting,
    import_images,
    service_env,
    start_cluster,
)
from devstack.confinement import open_directory
from devstack.relay import Relay
from devstack.s3server import S3Server, start_s3_server
from devstack.stack import Stack, free_port

RESULTS = recovery.RESULTS
GOAL = {"notice_to_resumed_s_max": 30, "steps_lost": 0}
CHECKPOINT_EVERY_STEPS = 50
PARTS = ("detect_s", "reschedule_s", "start_s", "restore_s")


def _spec() -> dict[str, Any]:
    trainer = recovery.job_spec(on_preemption=True)["trainer"]
    return {
        "name": "k8s-recovery-bench",
        # The corpus of the image (docker/trainer.Dockerfile copies the api package to /src).
        "trainer": {**trainer, "args": {**trainer["args"], "corpus": "/src/api"}},
        "capacity": {"types": ["spot", "on_demand"]},
        "deadline_hours": 24,
        "estimated_hours": 1,
        "env": {"OMP_NUM_THREADS": "1"},
    }


def _epoch(text: str | None) -> float:
    assert text is not None
    return datetime.fromisoformat(text).timestamp()


class PodLog:
    """A pod's log followed to its end in a thread: an evicted pod's lines outlive it here."""

    def __init__(self, cluster: RealCluster, namespace: str, pod: str) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(
            target=self._follow, args=(cluster, namespace, pod), daemon=True
        )
        self._thread.start()

    def _follow(self, cluster: RealCluster, namespace: str, pod: str) -> None:
        with contextlib.suppress(Exception):
            stream = cluster.core.read_namespaced_pod_log(
                pod, namespace, follow=True, _preload_content=False
            )
            buffer = b""
            for chunk in stream.stream(4096):
                buffer += chunk
                *whole, buffer = buffer.split(b"\n")
                self.lines.extend(line.decode(errors="replace") for line in whole)

    def records(self) -> list[dict[str, Any]]:
        return recovery.records_in(list(self.lines))


def _pod_of(cluster: RealCluster, namespace: str, attempt: int) -> Any:
    selector = f"gpujobs.dev/attempt-number={attempt}"
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=selector).items
    running = [p for p in pods if p.status.phase == "Running"]
    return running[0] if running else None


def _started_at(pod: Any) -> float | None:
    for status in pod.status.container_statuses or []:
        if status.state is not None and status.state.running is not None:
            return float(status.state.running.started_at.timestamp())
    return None


def one_run(cluster: RealCluster, namespace: str, stack: Stack) -> dict[str, Any]:
    job_id = stack.submit(_spec())
    try:
        pod = cluster.wait(
            lambda: _pod_of(cluster, namespace, 1), timeout=300, what="attempt 1's pod"
        )
        first = PodLog(cluster, namespace, pod.metadata.name)
        # Past a periodic checkpoint, so the resume point is the notice's checkpoint or nothing.
        cluster.wait(
            lambda: any(
                r.get("step", 0) > 2 * CHECKPOINT_EVERY_STEPS
                for r in first.records()
                if "event" not in r
            ),
            timeout=300,
            what="attempt 1 to train",
        )
        notice = time.time()
        cluster.evict(namespace, pod.metadata.name)
        second_pod = cluster.wait(
            lambda: _pod_of(cluster, namespace, 2), timeout=300, what="attempt 2's pod"
        )
        second = PodLog(cluster, namespace, second_pod.metadata.name)
        first_step = cluster.wait(
            lambda: recovery.first_event(second.records(), "first_step"),
            timeout=300,
            what="the resumed step",
        )
        started = cluster.wait(
            lambda: _started_at(cluster.core.read_namespaced_pod(
                second_pod.metadata.name, namespace
            )),
            timeout=30,
            what="attempt 2's container start",
        )  # fmt: skip
        attempts = stack.attempts(job_id)
        preempted = cluster.wait(
            lambda: recovery.first_event(first.records(), "preempted"),
            timeout=30,
            what="the notice's event",
        )
        resume = recovery.first_event(second.records(), "resume")
        assert resume is not None
        old, new = attempts[0], attempts[1]
        ended, created = _epoch(old["ended_at"]), _epoch(new["created_at"])
        return {
            "attempts": [(a["capacity_type"], a["end_reason"]) for a in attempts[:2]],
            "notice_to_resumed_s": first_step["time"] - notice,
            "detect_s": ended - notice,
            "reschedule_s": created - ended,
            "start_s": started - created,
            "restore_s": first_step["time"] - started,
            "notice_to_preempted_event_s": preempted["time"] - notice,
            "preempted_at_step": preempted["step"],
            "checkpoint_saved_on_notice": preempted.get("saved"),
            "resumed_from_step": resume["step"],
            "steps_lost": preempted["step"] - resume["step"],
            "steps_lost_recorded": old["steps_lost"],
        }
    finally:
        with stack.client() as client:
            client.post(f"/v1/jobs/{job_id}/cancel")
        stack.wait_status(job_id, {"CANCELLED", "SUCCEEDED", "FAILED"}, timeout=120)


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def kubernetes_runs(runs: int, tmp: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    kubeconfig = start_cluster()
    build_trainer_image()
    import_images(TRAINER_IMAGE)
    cluster = RealCluster(kubeconfig=kubeconfig, node_ip=cluster_setting("NODE_IP"))
    cluster.prepare_node()
    namespace = cluster.namespace()
    s3: S3Server = start_s3_server(tmp / "seaweedfs")
    s3_relay = Relay(cluster.node_ip, int(s3.endpoint_url.rsplit(":", 1)[1]))
    port = free_port()
    api_relay = Relay(cluster.node_ip, port)
    stack = Stack(
        tmp=tmp,
        s3=s3,
        trace={"metadata": {"gap_seconds": 60}, "data": [1] * 1000},
        extra_env=service_env(
            cluster, namespace=namespace, s3=s3, pod_s3_url=s3_relay.url,
            public_url=api_relay.url,
        ),
    )  # fmt: skip
    stack.port, stack.url = port, f"http://127.0.0.1:{port}"
    try:
        stack.start()
        results = [one_run(cluster, namespace, stack) for _ in range(runs)]
        version = cluster.kubectl("version", "-o", "json")
        server = json.loads(version).get("serverVersion", {}).get("gitVersion")
        return results, {"kubernetes": server, "namespace_pod_security": "restricted"}
    finally:
        stack.stop()
        api_relay.close()
        s3_relay.close()
        s3.stop()
        cluster.delete_namespace(namespace)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--local-runs", type=int, default=3)
    parser.add_argument("--up-s", type=int, default=20, help="local: spot up before the notice")
    parser.add_argument("--gap-s", type=int, default=1, help="local: spot gone after it")
    parser.add_argument("--out", type=Path, default=RESULTS / "k8s_recovery.json")
    args = parser.parse_args()

    tmp = open_directory()
    try:
        k8s, cluster_info = kubernetes_runs(args.runs, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    local = [
        recovery.one_run(on_preemption=True, up_s=args.up_s, gap_s=args.gap_s)
        for _ in range(args.local_runs)
    ]
    k8s_resumed = [r["notice_to_resumed_s"] for r in k8s]
    local_resumed = [r["notice_to_resumed_s"] for r in local]
    local_no_gap = [r["notice_to_resumed_s"] - r["spot_wait_s"] for r in local]
    lost = max(r["steps_lost"] for r in k8s)
    result = {
        "benchmark": "k8s_recovery",
        "notice_to_resumed_s": _summary(k8s_resumed),
        "steps_lost_max": lost,
        "parts_median_s": {p: round(statistics.median(r[p] for r in k8s), 3) for p in PARTS},
        "local": {
            "notice_to_resumed_s": _summary(local_resumed),
            "notice_to_resumed_without_spot_wait_s": _summary(local_no_gap),
            "steps_lost_max": max(r["steps_lost"] for r in local),
        },
        "ratio_to_local_median": round(
            statistics.median(k8s_resumed) / statistics.median(local_no_gap), 2
        ),
        "goal": GOAL,
        "meets_goal": max(k8s_resumed) <= GOAL["notice_to_resumed_s_max"] and lost == 0,
        "runs": {"kubernetes": k8s, "local": local},
        "setup": {
            **cluster_info,
            "image_present": True,
            "checkpoint_every_steps": CHECKPOINT_EVERY_STEPS,
            "preemption": "Eviction API on the running pod (kubernetes); the trace market's "
            f"notice, spot back after {args.gap_s} s (local)",
        },
        "machine": recovery.machine_info(),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    shown = ("notice_to_resumed_s", "steps_lost_max", "parts_median_s", "local", "meets_goal")
    print(json.dumps({key: result[key] for key in shown}))


if __name__ == "__main__":
    main()
