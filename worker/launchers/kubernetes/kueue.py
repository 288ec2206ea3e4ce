"""What Kueue says about an attempt's Job, read from its Workload: pure, as observe.py is.

Kueue admits a suspended Job by unsuspending it, and takes its quota back (a higher priority
preempts it, its queue is stopped) by suspending it again: the Job controller then stops its
pods, and the Job looks as it did before admission. Only the Workload tells the two apart: its
Evicted condition stays True from the eviction until quota is reserved again.

The Workload is the object Kueue makes for the Job (labelled with the Job's uid) in the
`kueue.x-k8s.io` API, read as a plain dict through the custom objects API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client

from worker.launchers.kubernetes.manifests import CONTAINER_NAME, KUEUE_QUEUE_LABEL

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
WORKLOADS = "workloads"
# Kueue's label on the Workload it makes for a Job: the Job's uid.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"

Workload = Mapping[str, Any]


def _condition(workload: Workload | None, type_: str) -> Mapping[str, Any] | None:
    for condition in (workload or {}).get("status", {}).get("conditions") or []:
        if condition.get("type") == type_:
            return dict(condition)
    return None


def eviction(workload: Workload | None) -> str | None:
    """Kueue took the workload's quota back (its Evicted condition, reason Preempted when a
    higher priority took it): what it wrote, or None while it was never evicted or has quota
    again."""
    evicted = _condition(workload, "Evicted")
    if evicted is None or evicted.get("status") != "True":
        return None
    reason = evicted.get("reason") or "Evicted"
    return f"evicted by Kueue: {reason}: {evicted.get('message') or ''}".rstrip(": ")


def waiting(job: client.V1Job, workload: Workload | None) -> str:
    """Why a suspended Job waits: the queue, what it asks for, and Kueue's word on the quota
    (the Workload's QuotaReserved=False message) once it has one."""
    queue = (job.metadata.labels or {}).get(KUEUE_QUEUE_LABEL)
    where = f" in queue {queue}" if queue else ""
    message = f"suspended: waiting for Kueue quota{where} (asks {asks(job)})"
    reserved = _condition(workload, "QuotaReserved")
    if reserved is not None and reserved.get("status") == "False" and reserved.get("message"):
        message += f": {reserved['message']}"
    return message


def asks(job: client.V1Job) -> str:
    """What the Job asks Kueue for: its pods (parallelism) times the trainer container's
    requests, a limit standing for a request it lacks (GPUs are asked for by limit)."""
    spec = job.spec
    pods = (spec.parallelism if spec is not None and spec.parallelism is not None else 1) or 1
    template = spec.template.spec if spec is not None and spec.template is not None else None
    per_pod: dict[str, str] = {}
    for container in (template.containers if template is not None else None) or []:
        if container.name != CONTAINER_NAME:
            continue
        resources = container.resources
        requests = (resources.requests if resources else None) or {}
        per_pod = {name: str(value) for name, value in requests.items()}
        for name, value in ((resources.limits if resources else None) or {}).items():
            per_pod.setdefault(name, str(value))
    each = ", ".join(f"{name}: {per_pod[name]}" for name in sorted(per_pod))
    return f"{pods} pod(s), each {{{each}}}"
