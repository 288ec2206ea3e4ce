"""The control loop with the Kubernetes launcher against the API emulator, on a real database:
the scheduler places and launches a Job, the reconciler reads what the cluster says."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from sqlalchemy.orm import Session, sessionmaker

from api.models import JobAttempt
from api.settings import Settings
from gpujobs.resources import JobStatus
from tests.worker.support import Clock, attempts, job, principal, submit
from worker.control import ControlPlane
from worker.launchers.kubernetes import KubernetesLauncher
from worker.reconciler import reconcile_once
from worker.scheduler import schedule_once

if TYPE_CHECKING:
    from conftest import Cluster

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def placed(
    settings: Settings,
    factory: sessionmaker[Session],
    launcher: KubernetesLauncher,
) -> tuple[ControlPlane, str, JobAttempt]:
    cp = ControlPlane(settings=settings, factory=factory, launcher=launcher, clock=Clock())
    job_id = submit(factory, principal(factory), max_restarts=0)
    assert len(schedule_once(cp).placed) == 1
    (attempt,) = attempts(factory, job_id)
    assert attempt.launch_handle is not None  # launched as a Job
    return cp, job_id, attempt


def test_a_spot_notice_closes_the_attempt_as_preempted_and_resumes_the_job(
    cluster: Cluster, settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    cp, job_id, attempt = placed(settings, session_factory, cluster.launcher())
    handle = attempt.launch_handle
    assert handle is not None
    (pod,) = cluster.start_pods(handle)
    cluster.set_pod_status(pod, cluster.running())
    reconcile_once(cp)
    assert job(session_factory, job_id).status == JobStatus.RUNNING.value

    # The notice: DisruptionTarget, SIGTERM to the supervisor, every rank saved, exit 75.
    disruption = cluster.condition(
        "DisruptionTarget", "True", "EvictionByEvictionAPI", message="Karpenter: spot interruption"
    )
    cluster.set_pod_status(pod, {**cluster.terminated(75), "conditions": [disruption]})
    message = (
        f"Container trainer for pod x/{pod} failed with exit code 75 "
        "matching FailJob rule at index 0"
    )
    cluster.set_job_conditions(
        handle, cluster.condition("Failed", "True", "PodFailurePolicy", message=message)
    )
    reconcile_once(cp)

    (closed, *_) = attempts(session_factory, job_id)
    assert (closed.end_reason, closed.exit_code) == ("preempted", 75)
    after = job(session_factory, job_id)
    # max_restarts=0: a failure would have ended the job; a preemption goes back to the queue.
    assert after.status == JobStatus.PENDING.value
    assert after.restarts == 0


def test_an_image_that_cannot_be_pulled_ends_the_attempt_and_frees_its_job(
    cluster: Cluster, settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    launcher = cluster.launcher(start_timeout_s=300)
    cp, job_id, attempt = placed(settings, session_factory, launcher)
    handle = attempt.launch_handle
    assert handle is not None
    (pod,) = cluster.start_pods(handle)
    scheduled = cluster.condition("PodScheduled", "True", "Scheduled", ago_s=301)
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": "pull access denied"}}
    cluster.set_pod_status(
        pod,
        {
            "phase": "Pending",
            "conditions": [scheduled],
            "containerStatuses": [cluster._container_status(waiting)],
        },
    )
    reconcile_once(cp)

    (closed,) = attempts(session_factory, job_id)
    assert closed.end_reason == "failed"
    assert job(session_factory, job_id).status == JobStatus.FAILED.value  # no restarts left
    assert cluster.batch.list_namespaced_job("gpujobs-test").items == []
