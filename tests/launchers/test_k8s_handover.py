"""Make-before-break (#25) through the control plane on Kubernetes: the real scheduler, reconciler
and API service on a real database (SQLite and PostgreSQL), the real KubernetesLauncher against
the API emulator. The test plays what the cluster would: the kubelet's pod statuses, the
autoscaler's events, and the garbage collector finishing a Foreground deletion."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from sqlalchemy.orm import Session, sessionmaker

from api.auth import Principal, authenticate
from api.database import transaction
from api.errors import Unauthorized
from api.jobs import service as jobs
from api.models import CapacityOutage, JobAttempt, utcnow
from api.pricing.catalog import Catalog, default_catalog
from api.settings import Settings
from gpujobs.resources import JobStatus
from gpujobs.runtime import (
    ENV_JOB_TOKEN,
    ENV_RUN_CONFIG_JSON,
    RunConfig,
    StandbyAnswer,
    StandbyCall,
)
from tests.launchers.conftest import NAMESPACE as NS
from tests.worker.support import Clock, attempts, events, job, principal, submit, trainer_report
from worker.control import ControlPlane
from worker.launchers.kubernetes import KubernetesLauncher
from worker.launchers.kubernetes.manifests import ATTEMPT_NAME_LABEL
from worker.reconciler import reconcile_once
from worker.scheduler import schedule_once

if TYPE_CHECKING:
    from tests.launchers.conftest import Cluster

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

S = JobStatus
# What the API server adds to an object deleted with propagationPolicy=Foreground: the object
# stays, marked for deletion, until the garbage collector has deleted its dependents (the pods).
FOREGROUND = "foregroundDeletion"


@dataclass
class Stage:
    cp: ControlPlane
    cluster: Cluster
    factory: sessionmaker[Session]
    clock: Clock
    who: Principal
    tokens: dict[str, str] = field(default_factory=dict)  # attempt id: its pods' job token

    # -- The control plane ------------------------------------------------------------------

    def running_on_demand(self) -> tuple[str, str]:
        """A job under a deadline on on-demand, its pod running: (job id, attempt id).

        Estimated at 1 h with 3 minutes of slack, it goes on spot first, whose pod the cluster
        autoscaler will not find a node for; with spot out for a while it goes on on-demand.
        Then its trainer measures a rate that leaves 0.125 h of work: slack is back."""
        job_id = submit(
            self.factory,
            self.who,
            capacity={"types": ["spot", "on_demand"]},
            estimated_hours=1.0,
            deadline_hours=1.05,
        )
        (refused,) = schedule_once(self.cp).placed
        assert self.attempt(refused).capacity_type == "spot"
        self.no_node_for(refused)
        reconcile_once(self.cp)
        assert self.attempt(refused).end_reason == "no_capacity"
        self.collect(refused)
        placed = schedule_once(self.cp).placed
        for _ in range(3):  # it may wait for spot while the slack allows
            if placed:
                break
            self.clock.advance(60)
            placed = schedule_once(self.cp).placed
        (attempt_id,) = placed
        running = self.attempt(attempt_id)
        assert running.capacity_type == "on_demand" and not running.standby
        self.start(attempt_id)
        reconcile_once(self.cp)
        assert job(self.factory, job_id).status == S.RUNNING.value
        # 100 steps of 8 samples at 0.89 samples/s: 50 steps left are 0.125 h of work.
        self.report(job_id, attempt_id, step=50, checkpoint=50, samples_per_s=0.89)
        return job_id, attempt_id

    def hold_standby(self, job_id: str) -> str:
        """Spot is back (the pool's outage has run out): a standby is held on it."""
        self.clock.advance(self.cp.settings.no_capacity_backoff_s)
        result = schedule_once(self.cp)
        assert result.standbys == 1 and result.migrated == 0, result
        standby = attempts(self.factory, job_id)[-1]
        assert standby.standby and standby.capacity_type == "spot"
        assert standby.launch_handle is not None
        return standby.id

    def ask(self, job_id: str, attempt_id: str) -> StandbyAnswer:
        """The standby's trainer's call, with the token its pod reads from its attempt's Secret."""
        with transaction(self.factory) as session:
            who = authenticate(
                session, authorization=f"Bearer {self.token(attempt_id)}", admin_token=""
            )
            answer, _ = jobs.standby_answer(
                session,
                principal=who,
                job_id=job_id,
                call=StandbyCall(attempt_id=attempt_id),
                now=utcnow(),
            )
        return answer

    def report(
        self,
        job_id: str,
        attempt_id: str,
        *,
        step: int,
        checkpoint: int,
        samples_per_s: float | None = None,
    ) -> None:
        trainer_report(
            self.factory,
            job_token=self.token(attempt_id),
            job_id=job_id,
            attempt_id=attempt_id,
            step=step,
            checkpoint=checkpoint,
            samples_per_s=samples_per_s,
        )

    def attempt(self, attempt_id: str) -> JobAttempt:
        with self.factory() as session:
            row = session.get(JobAttempt, attempt_id)
            assert row is not None
            return row

    def notes(self, job_id: str) -> list[str]:
        return [
            e.reason or "" for e in events(self.factory, job_id) if e.from_status == e.to_status
        ]

    def statuses(self, job_id: str) -> list[str]:
        return [e.to_status for e in events(self.factory, job_id) if e.from_status != e.to_status]

    # -- The cluster ------------------------------------------------------------------------

    def name(self, attempt_id: str) -> str:
        handle = self.attempt(attempt_id).launch_handle
        assert handle is not None
        return handle.split("/")[1]

    def job_object(self, attempt_id: str) -> client.V1Job | None:
        try:
            return self.cluster.batch.read_namespaced_job(self.name(attempt_id), NS)
        except ApiException as exc:
            assert exc.status == 404
            return None

    def pods(self, attempt_id: str) -> list[str]:
        name = self.name(attempt_id)
        listed = self.cluster.core.list_namespaced_pod(NS).items
        return [p.metadata.name for p in listed if p.metadata.labels[ATTEMPT_NAME_LABEL] == name]

    def start(self, attempt_id: str) -> list[str]:
        """The Job controller creates the pods; the kubelet runs them."""
        pods = self.pods_created(attempt_id)
        for pod in pods:
            self.cluster.set_pod_status(pod, self.cluster.running())
        return pods

    def no_node_for(self, attempt_id: str) -> None:
        """The scheduler finds no node for the attempt's pod, and the autoscaler adds none."""
        unschedulable = self.cluster.condition(
            "PodScheduled", "False", "Unschedulable", ago_s=5, message="0/3 nodes are available"
        )
        for pod in self.pods_created(attempt_id):
            self.cluster.set_pod_status(pod, {"phase": "Pending", "conditions": [unschedulable]})
            self.cluster.pod_event(
                pod,
                "NotTriggerScaleUp",
                "pod didn't trigger scale-up: 1 max node group size reached",
            )

    def pods_created(self, attempt_id: str) -> list[str]:
        """The Job controller creates the attempt's pods, which resolve their env (the token).

        The emulator deletes an object at once whatever the propagation policy, while the API
        server keeps a Job deleted in the Foreground until the garbage collector has deleted its
        pods (`collect`). The finalizer the API server would add, put there ahead, makes the
        emulator do the same; the tests check that the launcher's DELETE asks for Foreground."""
        name = self.name(attempt_id)
        self.cluster.batch.patch_namespaced_job(
            name, NS, {"metadata": {"finalizers": [FOREGROUND]}}
        )
        pods = self.cluster.start_pods(f"{NS}/{name}")
        self.token(attempt_id)
        return pods

    def collect(self, attempt_id: str) -> None:
        """The garbage collector ends a Foreground deletion: the pods, then the Job."""
        for pod in self.pods(attempt_id):
            self.cluster.core.delete_namespaced_pod(pod, NS)
        self.cluster.batch.patch_namespaced_job(
            self.name(attempt_id), NS, {"metadata": {"finalizers": []}}
        )

    def token(self, attempt_id: str) -> str:
        """GPUJOBS_JOB_TOKEN as the pod resolved it when it started: a key of its attempt's
        Secret (deleted with the attempt's Job; the trainer keeps what it read)."""
        if attempt_id in self.tokens:
            return self.tokens[attempt_id]
        job_object = self.job_object(attempt_id)
        assert job_object is not None
        (container,) = job_object.spec.template.spec.containers
        (ref,) = [e.value_from.secret_key_ref for e in container.env if e.name == ENV_JOB_TOKEN]
        secret = self.cluster.core.read_namespaced_secret(ref.name, NS)
        self.tokens[attempt_id] = base64.b64decode(secret.data[ref.key]).decode()
        return self.tokens[attempt_id]

    def run_config(self, attempt_id: str) -> RunConfig:
        job_object = self.job_object(attempt_id)
        assert job_object is not None
        (container,) = job_object.spec.template.spec.containers
        (value,) = [e.value for e in container.env if e.name == ENV_RUN_CONFIG_JSON]
        return RunConfig.model_validate_json(value)

    def deletes(self, attempt_id: str) -> list[str]:
        """The paths of the launcher's DELETE requests for this attempt's Job, Service and
        Secret (the garbage collector's of its pods are not among them)."""
        name = self.name(attempt_id)
        return [
            r.url.path
            for r in self.cluster.requests("DELETE")
            if r.url.path.rsplit("/", 1)[1].endswith(name) and "/pods/" not in r.url.path
        ]

    def deleted_in_the_foreground(self, attempt_id: str) -> bool:
        """The launcher asked for the Job's deletion in the Foreground, and it is under way."""
        name = self.name(attempt_id)
        (delete,) = [
            r for r in self.cluster.requests("DELETE") if r.url.path.endswith(f"/jobs/{name}")
        ]
        job_object = self.job_object(attempt_id)
        return (
            delete.data["propagationPolicy"] == "Foreground"
            and job_object is not None
            and job_object.metadata.deletion_timestamp is not None
        )


@pytest.fixture
def stage(cluster: Cluster, settings: Settings, session_factory: sessionmaker[Session]) -> Stage:
    clock = Clock()
    # One offer, spot and on-demand: spot out means this pool out.
    catalog = Catalog(
        offers=tuple(
            o
            for o in default_catalog().offers
            if (o.zone, o.instance_type) == ("ape1-az3", "g4dn.xlarge")
        )
    )
    launcher: KubernetesLauncher = cluster.launcher(clock=clock)
    return Stage(
        cp=ControlPlane(
            settings=settings,
            factory=session_factory,
            launcher=launcher,
            catalog=catalog,
            clock=clock,
        ),
        cluster=cluster,
        factory=session_factory,
        clock=clock,
        who=principal(session_factory),
    )


def test_a_job_on_demand_is_handed_over_to_a_standby_job_on_spot(stage: Stage) -> None:
    job_id, running_id = stage.running_on_demand()
    standby_id = stage.hold_standby(job_id)

    # Held: a second Job beside the running one, on spot, its trainer told it is the standby.
    standby_job = stage.job_object(standby_id)
    assert standby_job is not None and stage.name(standby_id) != stage.name(running_id)
    assert standby_job.metadata.labels["gpujobs.dev/capacity-type"] == "spot"
    config = stage.run_config(standby_id)
    assert config.standby is True and config.attempt_id == standby_id
    assert stage.run_config(running_id).standby is False
    # Its pod runs: it holds a spot node, so it is billed; nothing is asked of the running one.
    stage.start(standby_id)
    stage.clock.advance(60)
    reconcile_once(stage.cp)
    assert stage.attempt(standby_id).started_at is not None
    assert stage.deletes(running_id) == []
    # Its trainer has built everything and asks: wait. Ready, so the next pass releases the
    # running attempt with the stop a cancel uses: its Job deleted in the Foreground, which
    # keeps it until its pods (SIGTERM, then the grace period to checkpoint) are gone.
    assert stage.ask(job_id, standby_id).action == "wait"
    assert stage.attempt(standby_id).ready_at is not None
    stage.report(job_id, running_id, step=60, checkpoint=55)
    reconcile_once(stage.cp)
    assert stage.attempt(running_id).stop_reason == "handover"
    assert stage.deleted_in_the_foreground(running_id)
    released = stage.job_object(running_id)
    assert released is not None
    assert released.spec.template.spec.termination_grace_period_seconds > 0
    assert stage.deletes(standby_id) == []
    # Its trainer checkpoints on the notice, says so, and exits 75; the Job is still there.
    stage.report(job_id, running_id, step=61, checkpoint=61)
    (old_pod,) = stage.pods(running_id)
    stage.cluster.set_pod_status(old_pod, stage.cluster.terminated(75))
    stage.clock.advance(30)
    reconcile_once(stage.cp)

    old, new = stage.attempt(running_id), stage.attempt(standby_id)
    assert old.end_reason == "handed_over" and old.steps_lost == 0 and old.end_step == 61
    assert not new.standby and new.ended_at is None and new.resume_from_step == 61
    assert stage.ask(job_id, standby_id) == StandbyAnswer(action="go", resume_from_step=61)
    assert job(stage.factory, job_id).status == S.RUNNING.value
    handed = stage.notes(job_id)[-1]
    assert handed.startswith(f"handed over at step 61 from attempt {old.number} (on-demand")
    assert f"to attempt {new.number} (spot" in handed and "0 steps lost" in handed
    stage.collect(running_id)  # the garbage collector ends the deletion
    assert stage.job_object(running_id) is None
    # The promoted attempt trains, and finishes.
    stage.report(job_id, standby_id, step=100, checkpoint=100)
    stage.clock.advance(300)
    (new_pod,) = stage.pods(standby_id)
    stage.cluster.set_pod_status(new_pod, stage.cluster.terminated(0, reason="Completed"))
    reconcile_once(stage.cp)

    the_job = job(stage.factory, job_id)
    assert the_job.status == S.SUCCEEDED.value
    assert the_job.preemptions == 0 and the_job.restarts == 0
    # RUNNING from the on-demand attempt's start to the end: the handover is no status change.
    statuses = stage.statuses(job_id)
    assert statuses[statuses.index("RUNNING") :] == ["RUNNING", "SUCCEEDED"]
    old, new = stage.attempt(running_id), stage.attempt(standby_id)
    assert new.end_reason == "succeeded"
    assert old.cost_microusd and new.cost_microusd  # both billed, the overlap on both
    with stage.factory() as session:
        spent = jobs.spends(session, jobs=[the_job])[job_id].cost_microusd
    assert spent == old.cost_microusd + new.cost_microusd  # the refused spot attempt cost 0
    assert stage.deletes(standby_id) == []  # nothing stopped the attempt that took over


def test_the_standby_is_not_promoted_while_the_released_pod_still_runs(stage: Stage) -> None:
    """Between the release and the released trainer's exit, its pod runs through its grace
    period (the checkpoint on the notice). A pass then must leave both as they are: exactly one
    attempt trains at any moment, and the step it hands over at is the one it saves now.

    The launcher reads a Job under Foreground deletion as still running while a pod of it runs
    (observe._being_deleted); it read CANCELLED before, and the first pass after the release
    closed it handed_over at step 55 with 5 steps lost and told the standby go from 55 while the
    released pod still trained and saved step 61."""
    job_id, running_id = stage.running_on_demand()
    standby_id = stage.hold_standby(job_id)
    stage.start(standby_id)
    reconcile_once(stage.cp)
    stage.ask(job_id, standby_id)
    stage.report(job_id, running_id, step=60, checkpoint=55)
    reconcile_once(stage.cp)  # released: its Job is being deleted, its pod runs on
    assert stage.attempt(running_id).stop_reason == "handover"

    reconcile_once(stage.cp)

    assert stage.attempt(running_id).ended_at is None
    assert stage.ask(job_id, standby_id).action == "wait"
    # It saves on the notice and exits: only now is the job handed over, from that step.
    stage.report(job_id, running_id, step=61, checkpoint=61)
    (old_pod,) = stage.pods(running_id)
    stage.cluster.set_pod_status(old_pod, stage.cluster.terminated(75))
    reconcile_once(stage.cp)
    assert stage.attempt(running_id).steps_lost == 0
    assert stage.ask(job_id, standby_id) == StandbyAnswer(action="go", resume_from_step=61)


def test_a_standby_the_autoscaler_finds_no_node_for_leaves_the_running_job(stage: Stage) -> None:
    job_id, running_id = stage.running_on_demand()
    standby_id = stage.hold_standby(job_id)
    stage.no_node_for(standby_id)

    reconcile_once(stage.cp)

    standby = stage.attempt(standby_id)
    assert standby.end_reason == "no_capacity" and standby.cost_microusd == 0
    with stage.factory() as session:  # that pool is out again for a while
        outage = session.get(CapacityOutage, (standby.zone, standby.instance_type, "spot"))
    assert outage is not None and outage.until > stage.clock()
    assert "ended before the handover (no capacity: unschedulable" in stage.notes(job_id)[-1]
    # Its token died with it: its trainer, still asking, is refused, which it reads as "stop".
    with pytest.raises(Unauthorized, match="revoked"):
        stage.ask(job_id, standby_id)
    # The launcher gave the standby up: its objects are deleted...
    assert stage.deleted_in_the_foreground(standby_id)
    assert len(set(stage.deletes(standby_id))) == 3  # Job, Service, Secret
    # ...and the running attempt's are untouched: it trains on, the job RUNNING.
    assert stage.deletes(running_id) == []
    running_job = stage.job_object(running_id)
    assert running_job is not None and running_job.metadata.deletion_timestamp is None
    running = stage.attempt(running_id)
    assert running.ended_at is None and running.stop_reason is None
    assert job(stage.factory, job_id).status == S.RUNNING.value
    stage.collect(standby_id)
    reconcile_once(stage.cp)
    assert stage.attempt(running_id).ended_at is None
    assert job(stage.factory, job_id).status == S.RUNNING.value


def test_a_cancel_deletes_both_jobs_and_closes_both_attempts(stage: Stage) -> None:
    job_id, running_id = stage.running_on_demand()
    standby_id = stage.hold_standby(job_id)
    stage.start(standby_id)
    reconcile_once(stage.cp)
    stage.clock.advance(60)
    with transaction(stage.factory) as session:
        jobs.cancel(session, principal=stage.who, job_id=job_id)

    reconcile_once(stage.cp)  # both stopped: SIGTERM to each pod, the grace to end
    assert all(stage.deleted_in_the_foreground(a) for a in (running_id, standby_id))
    for attempt_id in (running_id, standby_id):  # the kubelet, then the garbage collector
        for pod in stage.pods(attempt_id):
            stage.cluster.set_pod_status(pod, stage.cluster.terminated(75))
        stage.collect(attempt_id)
    reconcile_once(stage.cp)

    for attempt_id in (running_id, standby_id):
        # Its Job, Service and Secret, by name (a stop sent again on a later pass is harmless).
        assert len(set(stage.deletes(attempt_id))) == 3
        assert stage.job_object(attempt_id) is None
        attempt = stage.attempt(attempt_id)
        assert attempt.end_reason == "cancelled" and attempt.cost_microusd
    assert job(stage.factory, job_id).status == S.CANCELLED.value
    with pytest.raises(Unauthorized, match="revoked"):  # the job's tokens ended with it
        stage.ask(job_id, standby_id)
