"""What state an attempt is in, read from its Job and pods: pure, so every case is testable.

A preemption is what the cluster saw: a pod's DisruptionTarget condition (an eviction, a drain,
a node shutdown, the scheduler's preemption, a node lost), or the Job failed by its disruption
rule once such pods are gone. Never an exit code alone: 75 is what a trainer exits with after
the notice, and a team's trainer can exit 75 without one (worker.outcomes).

Preemption is reported only once the attempt's pods have stopped: a disrupted pod is still
checkpointing during its grace period, and a replacement started meanwhile would resume from an
older checkpoint (and race the writer).

A kubelet eviction (node pressure: the pod or a neighbour used more memory or disk than asked
for) is not a preemption: the capacity was not reclaimed, and learning it as one would skew the
pool's preemption rate. It ends the attempt as a failure that names the eviction.

A Job that Kueue admitted and then evicted (a higher priority took its quota) is suspended
again: a preemption too, read from Kueue's Workload (kueue.py), and given up, as Kueue would
otherwise run it again once quota frees.

Some attempts never end by themselves: pods that stay unschedulable, or scheduled pods whose
container cannot start (a bad image, a missing Secret). `assess` says when to give such an
attempt up; the launcher then deletes its Job, which frees the nodes it holds. An unschedulable
pod is no capacity once the cluster autoscaler says it will add no node for it (a stockout
backs its node group off once the cloud reports it; a full group is at its maximum), or else
after a timeout: a spot launch then fails about when the cloud's own API says so, not after
minutes of slack spent pending.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple

from kubernetes import client

from worker.launchers.base import Observation, ObservedState
from worker.launchers.kubernetes import kueue
from worker.launchers.kubernetes.manifests import (
    COMPLETION_INDEX_ANNOTATION,
    CONTAINER_NAME,
    DISRUPTION_TARGET,
    PREEMPTED_EXIT_CODES,
)

_RULE_INDEX = re.compile(r"FailJob rule at index (\d+)")
_ACTIVE_PHASES = ("Pending", "Running")
# Waiting reasons of a container that will not start without someone fixing something.
CANNOT_START_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)
# Written on a Job the launcher gives up, before deleting it: read back while it is deleted.
VERDICT_ANNOTATION = "gpujobs.dev/verdict"
# What the cluster autoscaler records on a pending pod: it started a scale-up for it, it will
# start none (no node group fits, or each that would is at its maximum or backing off after a
# failed scale-up), or the scale-up it started failed (a stockout).
AUTOSCALER = "cluster-autoscaler"
SCALE_UP_STARTED = "TriggeredScaleUp"
SCALE_UP_REFUSED = frozenset({"NotTriggerScaleUp", "FailedScaleUp"})


@dataclass(frozen=True)
class Assessment:
    observation: Observation
    # The attempt is over but its Job would stay (pods pending or stuck): delete it.
    give_up: bool = False


def verdict_annotation(observation: Observation) -> str:
    return f"{observation.state.value}: {observation.message or ''}"


def _verdict(job: client.V1Job) -> Observation | None:
    text = (job.metadata.annotations or {}).get(VERDICT_ANNOTATION)
    if not text:
        return None
    state, _, message = text.partition(": ")
    try:
        return Observation(ObservedState(state), message=message or None)
    except ValueError:
        return None


def assess(
    job: client.V1Job | None,
    pods: Sequence[client.V1Pod],
    *,
    now: datetime,
    unschedulable_timeout_s: float,
    start_timeout_s: float = 300.0,
    gone_nodes: Collection[str] = (),
    scale_up_refused: str | None = None,
    workload: kueue.Workload | None = None,
) -> Assessment:
    """`gone_nodes`: nodes that pods were bound to and that no longer exist;
    `scale_up_refused`: the autoscaler's refusal to add a node for the unschedulable pod;
    `workload`: Kueue's Workload of the Job, when it is suspended and Kueue's."""
    if job is None:
        return Assessment(Observation(ObservedState.LOST, message="the Job no longer exists"))
    verdict = _verdict(job)
    if verdict is not None:
        return Assessment(verdict)  # given up by the launcher, deleted since or being deleted
    if job.metadata.deletion_timestamp is not None:
        return Assessment(_being_deleted(pods))
    return _assess_live(
        job,
        pods,
        now,
        unschedulable_timeout_s,
        start_timeout_s,
        gone_nodes,
        scale_up_refused,
        workload,
    )


def _being_deleted(pods: Sequence[client.V1Pod]) -> Observation:
    """A Job deleted in the foreground (a cancel, a handover, a migration) stays until its pods
    are gone. While one still runs (its trainer saving its checkpoint in the grace period) the
    attempt still holds capacity and may still write: it is not over, and a handover must not
    let its standby go yet. Once they have all stopped, it was cancelled, with rank 0's exit
    code (75: it checkpointed on the notice)."""
    if any(_phase(pod) in ("Pending", "Running") and _terminated(pod) is None for pod in pods):
        return Observation(ObservedState.RUNNING, message="the Job is being deleted")
    ranked = _by_index(pods)
    code = _exit_code(ranked[0]) if ranked else None
    if ranked and all(_phase(pod) == "Succeeded" for pod in ranked):
        # It finished its training before the stop took: done, not handed over or cancelled.
        return Observation(ObservedState.SUCCEEDED, exit_code=0)
    return Observation(ObservedState.CANCELLED, exit_code=code, message="the Job is being deleted")


def _assess_live(
    job: client.V1Job,
    pods: Sequence[client.V1Pod],
    now: datetime,
    unschedulable_timeout_s: float,
    start_timeout_s: float,
    gone_nodes: Collection[str],
    scale_up_refused: str | None,
    workload: kueue.Workload | None,
) -> Assessment:
    observation = _observe_live(
        job, pods, now, unschedulable_timeout_s, gone_nodes, scale_up_refused, workload
    )
    if observation.state is ObservedState.NO_CAPACITY:
        return Assessment(observation, give_up=True)
    if observation.state is ObservedState.PREEMPTED and job.spec is not None and job.spec.suspend:
        # Kueue requeues an evicted Job and would run it again once quota frees, beside the
        # attempt that resumes it: the Job goes.
        return Assessment(observation, give_up=True)
    if observation.state is ObservedState.PENDING:
        stuck = _cannot_start(pods, now, start_timeout_s)
        if stuck is not None:
            return Assessment(stuck, give_up=True)
    return Assessment(observation)


def _observe_live(
    job: client.V1Job,
    pods: Sequence[client.V1Pod],
    now: datetime,
    unschedulable_timeout_s: float,
    gone_nodes: Collection[str],
    scale_up_refused: str | None,
    workload: kueue.Workload | None,
) -> Observation:
    conditions = _true_conditions(job)
    if "Complete" in conditions:
        return Observation(ObservedState.SUCCEEDED, exit_code=0)
    suspended = job.spec is not None and bool(job.spec.suspend)
    evicted = kueue.eviction(workload) if suspended else None
    if evicted is not None:
        # Before the Failed condition: the Job controller stops a suspended Job's pods, its
        # trainer exits 75 on that notice, and the Job's own rule for that exit fails it.
        return _evicted(pods, evicted)
    if "Failed" in conditions:
        return _ended(job, pods, gone_nodes, conditions["Failed"])
    if suspended:
        # Before the pods are read: Kueue has not admitted it (yet, or again).
        return _waiting(job, now, unschedulable_timeout_s, workload)

    active = [p for p in pods if _phase(p) in _ACTIVE_PHASES and not _lost(p, gone_nodes)]
    interrupted = [p for p in pods if _disruption(p, gone_nodes)]
    failed = [p for p in pods if _phase(p) == "Failed"]
    if (interrupted or failed) and not active:
        # The Job controller has not written Failed yet (or is not running): the pods tell,
        # and so does FailureTarget, which it writes first. Read it: the pod whose rule fired
        # (an evicted rank) may be gone already while the ranks it stopped read only 75.
        return _ended(job, pods, gone_nodes, conditions.get("FailureTarget"))

    expected = (job.spec.completions if job.spec else None) or 1
    succeeded = [p for p in pods if _phase(p) == "Succeeded"]
    if len(succeeded) >= expected:
        return Observation(ObservedState.SUCCEEDED, exit_code=0)

    stuck = unschedulable(pods)
    if stuck is not None:
        if scale_up_refused is not None:
            return Observation(
                ObservedState.NO_CAPACITY,
                message=f"{stuck.message}; the cluster autoscaler adds no node: {scale_up_refused}",
            )
        if (now - stuck.since).total_seconds() > unschedulable_timeout_s:
            return Observation(ObservedState.NO_CAPACITY, message=stuck.message)
        return Observation(ObservedState.PENDING, message=stuck.message)

    running = [p for p in active if _phase(p) == "Running"]
    notice = f"; {_disruption(interrupted[0], gone_nodes)}" if interrupted else ""
    # Training starts when every rank is up; ranks that already finished count as up.
    if running and len(running) + len(succeeded) >= expected:
        return Observation(ObservedState.RUNNING, message=f"{len(running)} pod(s) running{notice}")
    message = f"{len(running)}/{expected} pods running{_waiting_reasons(pods)}{notice}"
    return Observation(ObservedState.PENDING, message=message)


def _evicted(pods: Sequence[client.V1Pod], evicted: str) -> Observation:
    """Kueue admitted the Job and then evicted it (a higher priority took its quota), which it
    does by suspending the Job: a preemption, reported once its pods have stopped (they
    checkpoint on the notice), with rank 0's exit code while its pod is there to tell it."""
    stopping = [p for p in pods if _phase(p) in _ACTIVE_PHASES and _terminated(p) is None]
    if stopping:
        return Observation(
            ObservedState.RUNNING, message=f"{evicted}; {len(stopping)} pod(s) stopping"
        )
    ranked = _by_index(pods)
    code = _exit_code(ranked[0]) if ranked else None
    return Observation(ObservedState.PREEMPTED, exit_code=code, message=evicted)


def _waiting(
    job: client.V1Job,
    now: datetime,
    unschedulable_timeout_s: float,
    workload: kueue.Workload | None,
) -> Observation:
    """A suspended Job that Kueue has not admitted; without its Workload (no Kueue, or no
    right to read it) an evicted Job reads so too, as it did before."""
    message = kueue.waiting(job, workload)
    created = job.metadata.creation_timestamp
    if created is not None and (now - created).total_seconds() > unschedulable_timeout_s:
        return Observation(ObservedState.NO_CAPACITY, message=message)
    return Observation(ObservedState.PENDING, message=message, held=True)


def _ended(
    job: client.V1Job,
    pods: Sequence[client.V1Pod],
    gone_nodes: Collection[str],
    failed: client.V1JobCondition | None,
) -> Observation:
    """The attempt is over and did not succeed: was it preempted, or did it fail?

    A disruption from outside (node drained, reclaimed, lost) wins anywhere: it is also why the
    other ranks crash (NCCL errors). Exit 75/76 is no evidence of one: a team's trainer may
    exit so on its own, and when one rank crashes the Job controller stops the others, whose
    trainers then checkpoint and exit 75 too. So the failure named is the first that is not
    such an exit, else the first.
    """
    for pod in _by_index(pods):
        reason = _disruption(pod, gone_nodes)
        if reason:
            return Observation(ObservedState.PREEMPTED, exit_code=_exit_code(pod), message=reason)
    for pod in _by_index(pods):
        if _kubelet_evicted(pod):
            code = _exit_code(pod)
            message = (
                f"pod {pod.metadata.name} evicted by the kubelet (node pressure, not a "
                f"preemption; exit code {code}): {pod.status.message}"
            )
            # No exit code on the observation: the trainer's 75 answered the kubelet's notice,
            # and reading it as a spot preemption would skew the learned preemption rate.
            return Observation(ObservedState.FAILED, exit_code=None, message=message)
    if failed is not None and _by_disruption_rule(job, failed):
        noticed = [p for p in _by_index(pods) if _notice_exit(p)]
        exit_code = _exit_code(noticed[0]) if noticed else None
        return Observation(ObservedState.PREEMPTED, exit_code=exit_code, message=failed.message)
    parts = [f"{failed.reason}: {failed.message}"] if failed is not None else []
    culprit = _first_failure([p for p in pods if not _notice_exit(p)]) or _first_failure(pods)
    terminated = _terminated(culprit) if culprit is not None else None
    exit_code = terminated.exit_code if terminated is not None else None
    if culprit is not None and terminated is not None:
        detail = terminated.reason or "Error"
        parts.append(f"pod {culprit.metadata.name}: {detail} (exit code {exit_code})")
    return Observation(
        ObservedState.FAILED, exit_code=exit_code, message="; ".join(parts) or "pods failed"
    )


def _first_failure(pods: Sequence[client.V1Pod]) -> client.V1Pod | None:
    """The pod that failed first (by its container's finish time, then rank)."""
    failed = [p for p in pods if _phase(p) == "Failed" and _terminated(p) is not None]
    if not failed:
        return None

    def key(pod: client.V1Pod) -> tuple[datetime, tuple[int, str]]:
        terminated = _terminated(pod)
        finished = terminated.finished_at if terminated is not None else None
        return (finished or datetime.max.replace(tzinfo=UTC), rank_order(pod))

    return min(failed, key=key)


def _by_disruption_rule(job: client.V1Job, failed: client.V1JobCondition) -> bool:
    """The Job failed by the rule of its podFailurePolicy that matches DisruptionTarget. Read
    from the Job's own policy, not an index: a Job created by an earlier version of the launcher
    may order its rules otherwise (manifests.pod_failure_policy)."""
    by_policy = failed.reason == "PodFailurePolicy"
    match = _RULE_INDEX.search(failed.message or "") if by_policy else None
    policy = job.spec.pod_failure_policy if job.spec is not None else None
    rules = (policy.rules if policy is not None else None) or []
    if match is None or int(match.group(1)) >= len(rules):
        return False
    patterns = rules[int(match.group(1))].on_pod_conditions or []
    return any(p.type == DISRUPTION_TARGET and p.status == "True" for p in patterns)


def _notice_exit(pod: client.V1Pod) -> bool:
    """The trainer exited as it does after a notice: it was stopped, by whoever it was."""
    terminated = _terminated(pod)
    return terminated is not None and terminated.exit_code in PREEMPTED_EXIT_CODES


def _disruption(pod: client.V1Pod, gone_nodes: Collection[str]) -> str | None:
    """Stopped from outside: drained, evicted through the API (Karpenter's interruption
    handling, a node drain), preempted by the scheduler, node shut down or lost."""
    if _kubelet_evicted(pod):
        return None  # its DisruptionTarget (TerminationByKubelet) is the eviction's
    for condition in (pod.status.conditions if pod.status else None) or []:
        if condition.type == DISRUPTION_TARGET and condition.status == "True":
            return f"pod {pod.metadata.name} disrupted: {condition.reason}: {condition.message}"
    if _lost(pod, gone_nodes):
        return f"pod {pod.metadata.name}: node {pod.spec.node_name} lost"
    return None


def _kubelet_evicted(pod: client.V1Pod) -> bool:
    """Node-pressure eviction: the kubelet sets the pod's reason (API evictions do not)."""
    return pod.status is not None and pod.status.reason == "Evicted"


def _cannot_start(
    pods: Sequence[client.V1Pod], now: datetime, start_timeout_s: float
) -> Observation | None:
    """A scheduled pod whose container is stuck on a reason that needs a fix, for too long."""
    for pod in _by_index(pods):
        if _phase(pod) != "Pending":
            continue
        since = _scheduled_at(pod)
        if since is None or (now - since).total_seconds() <= start_timeout_s:
            continue
        for status in (pod.status.container_statuses if pod.status else None) or []:
            waiting = status.state.waiting if status.state is not None else None
            if waiting is not None and waiting.reason in CANNOT_START_REASONS:
                detail = f": {waiting.message}" if waiting.message else ""
                return Observation(
                    ObservedState.FAILED,
                    message=f"pod {pod.metadata.name} could not start within "
                    f"{start_timeout_s:g} s: {waiting.reason}{detail}",
                )
    return None


def _scheduled_at(pod: client.V1Pod) -> datetime | None:
    for condition in (pod.status.conditions if pod.status else None) or []:
        if condition.type == "PodScheduled" and condition.status == "True":
            return condition.last_transition_time or (pod.status.start_time if pod.status else None)
    return None


def _lost(pod: client.V1Pod, gone_nodes: Collection[str]) -> bool:
    if _phase(pod) == "Unknown":
        return True
    node = pod.spec.node_name if pod.spec else None
    return node is not None and node in gone_nodes and _phase(pod) in _ACTIVE_PHASES


class Unschedulable(NamedTuple):
    pod: str
    since: datetime
    message: str


def unschedulable_pods(pods: Sequence[client.V1Pod]) -> list[Unschedulable]:
    """The pending pods the scheduler found unschedulable: since when, with its word."""
    found = []
    for pod in pods:
        if _phase(pod) != "Pending":
            continue
        for condition in (pod.status.conditions if pod.status else None) or []:
            if (
                condition.type == "PodScheduled"
                and condition.status == "False"
                and condition.reason == "Unschedulable"
                and condition.last_transition_time is not None
            ):
                message = f"unschedulable: {condition.message}"
                found.append(
                    Unschedulable(pod.metadata.name, condition.last_transition_time, message)
                )
    return found


def unschedulable(pods: Sequence[client.V1Pod]) -> Unschedulable | None:
    """The pending pod found unschedulable first."""
    return min(unschedulable_pods(pods), key=lambda stuck: stuck.since, default=None)


def scale_up_refused(events: Sequence[client.CoreV1Event], *, since: datetime) -> str | None:
    """The autoscaler's refusal to add a node for a pod unschedulable `since`: its last word
    on the pod since then, when that is a refusal. A scale-up it started is waited for (a tie
    counts as started), and without an autoscaler there is no word and the timeout decides."""
    words: list[tuple[datetime, bool, str]] = []
    for event in events:
        source = event.source.component if event.source else None
        series = event.series.last_observed_time if event.series else None
        moment = series or event.last_timestamp or event.event_time or event.first_timestamp
        if AUTOSCALER not in (source, event.reporting_component) or moment is None:
            continue
        if moment < since or event.reason not in SCALE_UP_REFUSED | {SCALE_UP_STARTED}:
            continue
        words.append((moment, event.reason == SCALE_UP_STARTED, event.message or event.reason))
    if not words:
        return None
    _, started, message = max(words, key=lambda word: word[:2])
    return None if started else message


def _waiting_reasons(pods: Sequence[client.V1Pod]) -> str:
    reasons = sorted(
        {
            status.state.waiting.reason
            for pod in pods
            for status in (pod.status.container_statuses if pod.status else None) or []
            if status.state is not None
            and status.state.waiting is not None
            and status.state.waiting.reason
        }
    )
    return f" ({', '.join(reasons)})" if reasons else ""


def _true_conditions(job: client.V1Job) -> dict[str, client.V1JobCondition]:
    conditions = (job.status.conditions if job.status else None) or []
    return {c.type: c for c in conditions if c.status == "True"}


def _phase(pod: client.V1Pod) -> str | None:
    return pod.status.phase if pod.status else None


def _terminated(pod: client.V1Pod) -> client.V1ContainerStateTerminated | None:
    for status in (pod.status.container_statuses if pod.status else None) or []:
        if status.name == CONTAINER_NAME and status.state is not None:
            return status.state.terminated
    return None


def _exit_code(pod: client.V1Pod) -> int | None:
    terminated = _terminated(pod)
    return terminated.exit_code if terminated is not None else None


def completion_index(pod: client.V1Pod) -> int | None:
    index = (pod.metadata.annotations or {}).get(COMPLETION_INDEX_ANNOTATION)
    return int(index) if index is not None and index.isdigit() else None


def rank_order(pod: client.V1Pod) -> tuple[int, str]:
    """Sort key putting rank 0 first: its exit code and log are the most telling."""
    index = completion_index(pod)
    return (index if index is not None else 1 << 30, pod.metadata.name or "")


def _by_index(pods: Sequence[client.V1Pod]) -> list[client.V1Pod]:
    return sorted(pods, key=rank_order)
