"""The control loop with the Kubernetes launcher against the API emulator, on a real database:
the scheduler places and launches a Job, the reconciler reads what the cluster says."""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.orm import Session, sessionmaker

from api.models import JobAttempt
from api.placement.world import pool_histories
from api.settings import Settings
from gpujobs.cli import main
from gpujobs.client import Client
from gpujobs.resources import JobStatus
from gpujobs.runtime import ENV_RUN_CONFIG_JSON, RunConfig
from tests.conftest import make_team
from tests.sdk.server import ADMIN_TOKEN, live_api
from tests.trainer.trainer_runs import REPO, run_config
from tests.worker.support import Clock, attempts, job, principal, submit
from trainer.checkpoint import load_latest
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
    *,
    spot: bool = False,
) -> tuple[ControlPlane, str, JobAttempt]:
    cp = ControlPlane(settings=settings, factory=factory, launcher=launcher, clock=Clock())
    capacity = {"capacity": {"types": ["spot"]}} if spot else {}
    job_id = submit(factory, principal(factory), max_restarts=0, **capacity)
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
    cluster.fail_by_policy(handle, pod, exit_code=75, disrupted=True)
    reconcile_once(cp)

    (closed, *_) = attempts(session_factory, job_id)
    assert (closed.end_reason, closed.exit_code) == ("preempted", 75)
    after = job(session_factory, job_id)
    # max_restarts=0: a failure would have ended the job; a preemption goes back to the queue.
    assert after.status == JobStatus.PENDING.value
    assert after.restarts == 0


def test_a_pod_that_exits_75_without_a_disruption_spends_a_restart_and_teaches_no_pool(
    cluster: Cluster, settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    """A team's trainer exits 75 on spot with no notice from anyone: no DisruptionTarget, no
    stop of ours. A failure: max_restarts=0 ends the job, and no pool learns a preemption."""
    cp, job_id, attempt = placed(settings, session_factory, cluster.launcher(), spot=True)
    handle = attempt.launch_handle
    assert handle is not None
    (pod,) = cluster.start_pods(handle)
    cluster.set_pod_status(pod, cluster.running())
    reconcile_once(cp)
    cluster.set_pod_status(pod, cluster.terminated(75))
    cluster.fail_by_policy(handle, pod, exit_code=75, disrupted=False)

    reconcile_once(cp)

    (closed,) = attempts(session_factory, job_id)
    assert (closed.capacity_type, closed.end_reason, closed.exit_code) == ("spot", "failed", 75)
    after = job(session_factory, job_id)
    assert after.status == JobStatus.FAILED.value
    assert after.preemptions == 0
    with session_factory() as session:
        _, learned = pool_histories(session, now=cp.clock())
    assert learned[(closed.zone, closed.instance_type)].preemptions == 0


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


def run_container_here(
    cluster: Cluster, handle: str, index: int, stderr: Path
) -> subprocess.Popen[str]:
    """What the kubelet would do with pod `index`: the container's command, with its env
    resolved (values, and keys of the attempt's Secret), on this machine."""
    namespace, name = handle.split("/")
    pod = cluster.batch.read_namespaced_job(name, namespace).spec.template.spec
    (container,) = pod.containers
    env = {"PATH": os.environ["PATH"], "JOB_COMPLETION_INDEX": str(index)}
    for var in container.env:
        if var.value_from is None:
            env[var.name] = var.value
            continue
        ref = var.value_from.secret_key_ref
        secret = cluster.core.read_namespaced_secret(ref.name, namespace)
        env[var.name] = base64.b64decode(secret.data[ref.key]).decode()
    command = [sys.executable if part == "python" else part for part in container.command]
    return subprocess.Popen(
        [*command, *container.args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr.open("wb"),
        text=True,
        start_new_session=True,
    )


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_the_pod_s_own_exit_after_sigterm_closes_the_attempt_as_preempted(
    cluster: Cluster, settings: Settings, session_factory: sessionmaker[Session], tmp_path: Path
) -> None:
    """End to end but for the kubelet: the launcher's Job, its container run here as the kubelet
    would (two gloo ranks of the real trainer under the supervisor), SIGTERM to PID 1, and the
    pod's real exit code fed back through the API to the reconciler."""
    # Long enough that only the notice ends it, however fast this machine trains.
    trainer = run_config(
        "unused", steps=1_000_000, checkpoint={"every_steps": 1000, "keep_last": 2}
    )
    trainer = trainer["trainer"]
    cp = ControlPlane(
        settings=settings, factory=session_factory, launcher=cluster.launcher(), clock=Clock()
    )
    job_id = submit(
        session_factory,
        principal(session_factory),
        trainer=trainer,
        resources={"gpus_per_node": 2},
        max_restarts=0,
    )
    assert len(schedule_once(cp).placed) == 1
    (attempt,) = attempts(session_factory, job_id)
    handle = attempt.launch_handle
    assert handle is not None
    (pod,) = cluster.start_pods(handle)
    process = run_container_here(cluster, handle, 0, tmp_path / "stderr.log")
    try:
        assert process.stdout is not None
        for line in process.stdout:  # rank 0's JSON lines
            record = json.loads(line) if line.startswith("{") else {}
            if record.get("step", 0) >= 3 and "event" not in record:
                break
        else:
            pytest.fail(f"no progress: {(tmp_path / 'stderr.log').read_text()[-3000:]}")
        cluster.set_pod_status(pod, cluster.running())
        reconcile_once(cp)
        os.kill(process.pid, signal.SIGTERM)  # the kubelet's notice of an eviction, to PID 1
        records = [json.loads(line) for line in process.stdout if line.startswith("{")]
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)

    assert code == 75
    (preempted,) = [r for r in records if r.get("event") == "preempted"]
    assert preempted["saved"] is True  # agreed by both ranks: each wrote its part
    namespace, name = handle.split("/")
    (container,) = cluster.batch.read_namespaced_job(name, namespace).spec.template.spec.containers
    (run_json,) = [var.value for var in container.env if var.name == ENV_RUN_CONFIG_JSON]
    config = RunConfig.model_validate_json(run_json)
    state = load_latest(config.checkpoint_uri)
    assert state is not None and sorted(state.ranks) == [0, 1]

    # What the eviction, the kubelet and the Job controller write for that exit.
    disruption = cluster.condition(
        "DisruptionTarget", "True", "EvictionByEvictionAPI", message="Karpenter: spot interruption"
    )
    cluster.set_pod_status(pod, {**cluster.terminated(code), "conditions": [disruption]})
    cluster.fail_by_policy(handle, pod, exit_code=code, disrupted=True)
    reconcile_once(cp)
    (closed,) = attempts(session_factory, job_id)
    assert (closed.end_reason, closed.exit_code) == ("preempted", 75)
    after = job(session_factory, job_id)
    assert after.status == JobStatus.PENDING.value and after.restarts == 0


def gpujobs(*argv: str) -> str:
    out = io.StringIO()
    assert main(list(argv), out=out) == 0, out.getvalue()
    return out.getvalue()


def test_a_job_kueue_holds_says_so_in_show_and_once_in_its_events_and_runs_once_admitted(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the service: the API, the control loop with the launcher's queue setting, and
    the `gpujobs` command; Kueue's part (its Workload, suspending and unsuspending the Job)
    played through the emulator."""
    home = tmp_path / "home"
    with live_api(home) as api:
        token = make_team(api.session_factory, "team-a")
        for name, value in (("GPUJOBS_URL", api.url), ("GPUJOBS_TOKEN", token)):
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("GPUJOBS_CREDENTIALS_FILE", str(tmp_path / "no-credentials.json"))
        monkeypatch.delenv("COLUMNS", raising=False)
        settings = Settings(home=home, credentials_file=home / "credentials.json",
                            admin_token=ADMIN_TOKEN)  # fmt: skip
        launcher = cluster.launcher(kueue_queue="gpu")
        cp = ControlPlane(settings=settings, factory=api.session_factory, launcher=launcher,
                          clock=Clock())  # fmt: skip
        with Client(api.url, token, retry=None) as gj:
            job_id = gj.submit({"name": "queued", "trainer": {"steps": 100}, "max_restarts": 0}).id
        assert len(schedule_once(cp).placed) == 1
        (attempt,) = attempts(api.session_factory, job_id)
        handle = attempt.launch_handle
        assert handle is not None

        # Kueue has not reserved quota: the Job stays suspended, and the job says why.
        reconcile_once(cp)
        waits = "suspended: waiting for Kueue quota in queue gpu (asks 1 pod(s), each {"
        shown = gpujobs("show", job_id)
        assert f"SCHEDULED ({waits}" in shown, shown
        assert "nvidia.com/gpu: 1" in shown, shown
        # Kueue's word on the quota, once it has one, is a new reason: said once more.
        full = "couldn't assign flavors to pod set main: insufficient unused quota for "
        full += "nvidia.com/gpu in flavor on-demand, 1 more needed"
        quota = cluster.condition("QuotaReserved", "False", "Pending", message=full)
        cluster.kueue_workload(handle, quota)
        for _ in range(3):  # every pass sees the same wait: no event more
            reconcile_once(cp)
        shown = gpujobs("show", job_id)
        assert f"SCHEDULED ({waits}" in shown and f"{full})" in shown, shown
        told = gpujobs("events", job_id)
        assert told.count(waits) == 2 and told.count(full) == 1, told
        held = [e for e in json.loads(gpujobs("events", job_id, "--json")) if e["data"].get("held")]
        assert [(e["from_status"], e["to_status"]) for e in held] == [("SCHEDULED",) * 2] * 2
        assert held[1]["reason"].endswith(full), held

        # Quota frees: Kueue admits the Workload and unsuspends the Job, and its pod runs.
        admitted = cluster.condition("QuotaReserved", "True", "QuotaReserved")
        cluster.kueue_workload(handle, admitted)
        cluster.suspend(handle, False)
        (pod,) = cluster.start_pods(handle)
        cluster.set_pod_status(pod, cluster.running())
        reconcile_once(cp)
        shown = gpujobs("show", job_id)
        assert "status:           RUNNING" in shown and waits in shown, shown  # the note stays
        assert gpujobs("events", job_id).count(waits) == 2

        # A higher priority takes the quota back: Kueue evicts the Workload and suspends the
        # Job, whose trainer checkpoints and exits 75. A preemption: no restart is spent
        # (max_restarts is 0) and the job is placed again, to resume from its checkpoint.
        why = "Preempted to accommodate a workload (UID: 1234) due to prioritization in the queue"
        evicted = cluster.condition("Evicted", "True", "Preempted", message=why)
        cluster.kueue_workload(handle, admitted, evicted)
        cluster.suspend(handle, True)
        cluster.set_pod_status(pod, cluster.terminated(75))
        cluster.fail_by_policy(handle, pod, exit_code=75, disrupted=False)
        reconcile_once(cp)
        (closed,) = attempts(api.session_factory, job_id)
        assert (closed.end_reason, closed.exit_code) == ("preempted", 75)
        after = job(api.session_factory, job_id)
        assert (after.status, after.preemptions, after.restarts) == ("PENDING", 1, 0)
        assert after.status_reason is not None and why in after.status_reason
        assert len(schedule_once(cp).placed) == 1
        assert [a.number for a in attempts(api.session_factory, job_id)] == [1, 2]
