"""The Kubernetes launcher on a real cluster: API server, scheduler, Job controller, kubelet,
containerd and runc decide what happens to the trainer's pods, not an emulator.

Each test launches the trainer image as the worker would (the launcher's own manifests, Pod
Security "restricted" enforced on the namespace) and reads back what the cluster did.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch

from api.placement import Placement
from devstack.cluster import NODE, TRAINER_IMAGE, RealCluster, events_of
from devstack.s3server import S3Server
from gpujobs.runtime import RunConfig
from gpujobs.spec import CapacityType, TrainerSpec
from trainer.checkpoint.reader import load_latest
from worker.launchers.base import LaunchRequest, ObservedState
from worker.launchers.kubernetes import KubernetesLauncher

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]

# Files of the image (the api package of this checkout, copied to /src by
# docker/trainer.Dockerfile): the reference run, in the same image, reads the same corpus.
IMAGE_CORPUS = "/src/api"
TINY: dict[str, Any] = {"n_layer": 2, "n_embd": 32, "n_head": 4, "block_size": 32,
                        "corpus_bytes": 200_000}  # fmt: skip
# One intra-op thread: a CPU run is then bitwise repeatable, so a resumed run can be compared
# tensor by tensor with an uninterrupted one.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def trainer_spec(steps: int, *, corpus: str = IMAGE_CORPUS, **extra: Any) -> dict[str, Any]:
    return {
        "workload": "gpt",
        "steps": steps,
        "batch_size": 8,
        "amp": "bf16",
        "seed": 7,
        "dataloader": {"num_workers": 0},
        "checkpoint": {"every_steps": 100},
        "args": {**TINY, "corpus": corpus},
        **extra,
    }


def request(
    *,
    trainer: dict[str, Any],
    checkpoint_uri: str,
    s3_url: str,
    attempt: int = 1,
    nodes: int = 1,
    job_id: str | None = None,
    image: str | None = None,
    env: dict[str, str] | None = None,
) -> LaunchRequest:
    job_id = job_id or f"job-{uuid.uuid4().hex[:8]}"
    return LaunchRequest(
        job_id=job_id,
        attempt_id=f"{job_id}-{attempt}",
        attempt_number=attempt,
        job_name="real-cluster",
        team="research",
        placement=Placement(
            cloud="local",
            region="local",
            zone="local",
            instance_type="local-cpu",
            gpu_model="A100",
            gpu_count=nodes,
            nodes=nodes,
            capacity_type=CapacityType.SPOT,
            price_per_hour=1.0,
            on_demand_price_per_hour=3.0,
        ),  # fmt: skip
        gpus_per_node=1,
        run_config=RunConfig(
            trainer=TrainerSpec.model_validate(trainer),
            checkpoint_uri=checkpoint_uri,
            s3_endpoint_url=s3_url,
            # Nothing answers here: the trainer's reports are best effort.
            api_url="http://127.0.0.1:9",
        ),
        job_token="tok-real-cluster",
        image=image,
        env={**ONE_THREAD, **(env or {})},
    )


def wait_state(
    cluster: RealCluster,
    launcher: KubernetesLauncher,
    handle: str,
    states: set[ObservedState],
    *,
    timeout: float,
) -> Any:
    def reached() -> Any:
        observation = launcher.status(handle)
        return observation if observation.state in states else None

    return cluster.wait(reached, timeout=timeout, what=f"{handle} to reach {states}")


def log_of(launcher: KubernetesLauncher, handle: str) -> list[str]:
    return list(launcher.logs(handle))


def steps_in(lines: list[str]) -> list[int]:
    steps = []
    for line in lines:
        # The API's log prefixes each line (its attempt, the time); the record is what follows.
        if "{" in line:
            try:
                record = json.loads(line[line.index("{") :])
            except json.JSONDecodeError:
                continue
            if "event" not in record and isinstance(record.get("step"), int):
                steps.append(record["step"])
    return steps


def reference_weights(trainer: dict[str, Any], tmp_path: Path, *, nproc: int = 1) -> Any:
    """The same training, uninterrupted, in the same image (its torch, its corpus) run by
    Docker without a network: its last checkpoint."""
    directory = tmp_path / "reference"
    directory.mkdir()
    directory.chmod(0o777)  # the image's uid writes here
    config = {"job_id": "reference", "trainer": trainer, "checkpoint_uri": "/out/checkpoints"}
    (directory / "reference.json").write_text(json.dumps(config))
    done = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{directory}:/out",
         *[f"--env={k}={v}" for k, v in ONE_THREAD.items()], "--entrypoint", "python",
         TRAINER_IMAGE, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={nproc}",
         "--master_addr=127.0.0.1", "--master_port=29600", "-m", "trainer",
         "--config", "/out/reference.json"],
        capture_output=True, text=True, timeout=500,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return load_latest(str(directory / "checkpoints"))


def assert_same_weights(ours: Any, theirs: Any) -> None:
    assert ours is not None and theirs is not None
    assert ours.step == theirs.step
    for name, tensor in theirs.shared["model"].items():
        assert torch.equal(ours.shared["model"][name], tensor), name


def checkpoint_of(s3: S3Server, uri: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    return load_latest(uri)


# -- a trainer pod, start to finish ---------------------------------------------------------------


def test_a_trainer_pod_runs_to_success_and_its_log_follows_line_by_line(
    real_cluster: RealCluster, namespace: str, pod_s3: str, store: str,
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    launcher = real_cluster.launcher(namespace)
    handle = launcher.launch(
        request(trainer=trainer_spec(300), checkpoint_uri=store, s3_url=pod_s3)
    )
    wait_state(real_cluster, launcher, handle, {ObservedState.RUNNING, ObservedState.SUCCEEDED},
               timeout=180)  # fmt: skip
    # Followed from the start: lines arrive while it runs and the stream ends with the pod.
    followed = list(launcher.logs(handle, follow=True))
    observation = wait_state(
        real_cluster, launcher, handle,
        {ObservedState.SUCCEEDED, ObservedState.FAILED}, timeout=120,
    )  # fmt: skip
    assert observation.state is ObservedState.SUCCEEDED, (observation, followed[-20:])
    assert steps_in(followed)[-1] == 300, followed[-20:]
    assert followed == log_of(launcher, handle)  # nothing cut off, nothing repeated
    saved = checkpoint_of(s3_server, store, monkeypatch)
    assert saved is not None and saved.step == 300


# -- preemption as a cloud does it ----------------------------------------------------------------


def _preempt_and_resume(
    real_cluster: RealCluster,
    namespace: str,
    pod_s3: str,
    store: str,
    *,
    take_away: Any,
    nodes: int = 1,
) -> tuple[list[Any], list[str]]:
    """Run a job, take its capacity away once it trained, resume it in a new attempt."""
    launcher = real_cluster.launcher(namespace)
    steps = 1500
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    first = launcher.launch(
        request(trainer=trainer_spec(steps), checkpoint_uri=store, s3_url=pod_s3,
                job_id=job_id, nodes=nodes)
    )  # fmt: skip
    wait_state(real_cluster, launcher, first, {ObservedState.RUNNING}, timeout=180)
    real_cluster.wait(lambda: steps_in(log_of(launcher, first)), timeout=180,
                      what="the first attempt's first steps")  # fmt: skip
    name = first.split("/")[1]
    pods = [p.metadata.name for p in real_cluster.pods(namespace, name)]
    # Followed from before the notice: once the Job controller has counted an evicted pod, the
    # pod (and its log) may be gone before anyone reads it afterwards.
    followed: list[str] = []
    follower = threading.Thread(
        target=lambda: followed.extend(launcher.logs(first, follow=True)), daemon=True
    )
    follower.start()
    take_away(pods)
    ended = wait_state(
        real_cluster, launcher, first,
        {ObservedState.PREEMPTED, ObservedState.FAILED, ObservedState.SUCCEEDED}, timeout=120,
    )  # fmt: skip
    follower.join(timeout=60)
    first_log = list(followed)
    second = launcher.launch(
        request(trainer=trainer_spec(steps), checkpoint_uri=store, s3_url=pod_s3,
                job_id=job_id, attempt=2, nodes=nodes)
    )  # fmt: skip
    done = wait_state(
        real_cluster, launcher, second,
        {ObservedState.SUCCEEDED, ObservedState.FAILED}, timeout=400,
    )  # fmt: skip
    return [ended, done], first_log


def test_an_evicted_pod_is_a_preemption_and_resumes_to_the_same_weights(
    real_cluster: RealCluster, namespace: str, pod_s3: str, store: str,
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    conditions: list[Any] = []

    def evict(pods: list[str]) -> None:
        for pod in pods:
            real_cluster.evict(namespace, pod)

        # What the cloud's reclaim leaves on the pod: the DisruptionTarget condition.
        def disrupted() -> Any:
            pod = real_cluster.core.read_namespaced_pod(pods[0], namespace)
            found = [c for c in pod.status.conditions or [] if c.type == "DisruptionTarget"]
            return found or None

        conditions.extend(real_cluster.wait(disrupted, timeout=30, what="DisruptionTarget"))

    (ended, done), first_log = _preempt_and_resume(
        real_cluster, namespace, pod_s3, store, take_away=evict
    )
    assert conditions[0].status == "True" and conditions[0].reason == "EvictionByEvictionAPI"
    assert ended.state is ObservedState.PREEMPTED, ended
    # The trainer's exit code while its pod is there to tell it; none once the Job controller
    # has collected the pod (its log, followed, says how the trainer ended).
    assert ended.exit_code in (75, 76, None), ended
    assert done.state is ObservedState.SUCCEEDED, done
    # SIGTERM reached the trainer (no shell in between): it saved on the notice.
    events = [json.loads(line) for line in first_log if line.startswith('{"event"')]
    assert [e["saved"] for e in events if e["event"] == "preempted"] == [True], first_log[-10:]
    ours = checkpoint_of(s3_server, store, monkeypatch)
    assert_same_weights(ours, reference_weights(trainer_spec(1500), tmp_path))


def test_a_noexecute_taint_is_a_preemption_and_resumes_to_the_same_weights(
    real_cluster: RealCluster, namespace: str, pod_s3: str, store: str,
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    taint = "gpujobs.dev/reclaimed=now:NoExecute"

    def taint_node(pods: list[str]) -> None:
        real_cluster.kubectl("taint", "node", NODE, taint)
        try:

            def gone() -> bool:
                return all(
                    (p.status.phase in ("Failed", "Succeeded"))
                    for p in real_cluster.core.list_namespaced_pod(namespace).items
                )

            real_cluster.wait(gone, timeout=90, what="the tainted node's pods to stop")
        finally:
            real_cluster.kubectl("taint", "node", NODE, f"{taint}-")

    (ended, done), _ = _preempt_and_resume(
        real_cluster, namespace, pod_s3, store, take_away=taint_node
    )
    assert ended.state is ObservedState.PREEMPTED, ended
    assert done.state is ObservedState.SUCCEEDED, done
    ours = checkpoint_of(s3_server, store, monkeypatch)
    assert_same_weights(ours, reference_weights(trainer_spec(1500), tmp_path))


def test_a_two_pod_gang_is_preempted_and_resumes_to_the_same_weights(
    real_cluster: RealCluster, namespace: str, pod_s3: str, store: str,
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    def evict_one(pods: list[str]) -> None:
        assert len(pods) == 2
        real_cluster.evict(namespace, sorted(pods)[-1])

    (ended, done), _ = _preempt_and_resume(
        real_cluster, namespace, pod_s3, store, take_away=evict_one, nodes=2
    )
    assert ended.state is ObservedState.PREEMPTED, ended
    assert done.state is ObservedState.SUCCEEDED, done
    ours = checkpoint_of(s3_server, store, monkeypatch)
    assert_same_weights(ours, reference_weights(trainer_spec(1500), tmp_path, nproc=2))


# -- what users hit -------------------------------------------------------------------------------


def test_a_missing_image_ends_the_attempt_with_a_reason_not_a_silent_wait(
    real_cluster: RealCluster, namespace: str, pod_s3: str, store: str
) -> None:
    launcher = real_cluster.launcher(namespace, start_timeout_s=20.0)
    handle = launcher.launch(
        request(trainer=trainer_spec(10), checkpoint_uri=store, s3_url=pod_s3,
                image="gpujobs-no-such-image:never")
    )  # fmt: skip
    ended = wait_state(
        real_cluster, launcher, handle,
        {ObservedState.FAILED, ObservedState.NO_CAPACITY}, timeout=120,
    )  # fmt: skip
    assert ended.state is ObservedState.FAILED, ended
    assert "image" in (ended.message or "").lower(), ended
    # Given up: its pods are deleted, not left pulling forever.
    name = handle.split("/")[1]
    real_cluster.wait(lambda: not real_cluster.pods(namespace, name), timeout=60,
                      what="the pods to be deleted")  # fmt: skip


def test_an_unschedulable_request_says_why_and_ends_as_no_capacity(
    real_cluster: RealCluster, namespace: str, pod_s3: str, store: str
) -> None:
    launcher = real_cluster.launcher(namespace, unschedulable_timeout_s=15.0)
    # More GPUs than the node has.
    too_big = dataclasses.replace(
        request(trainer=trainer_spec(10), checkpoint_uri=store, s3_url=pod_s3), gpus_per_node=16
    )
    handle = launcher.launch(too_big)
    pending = launcher.status(handle)
    assert pending.state in (ObservedState.PENDING, ObservedState.NO_CAPACITY)
    ended = wait_state(real_cluster, launcher, handle, {ObservedState.NO_CAPACITY}, timeout=90)
    assert "nvidia.com/gpu" in (ended.message or "") or "schedul" in (ended.message or ""), ended


def test_a_crashing_trainer_ends_failed_with_its_exit_code_and_log(
    real_cluster: RealCluster, namespace: str, pod_s3: str, store: str
) -> None:
    launcher = real_cluster.launcher(namespace)
    # A workload option the trainer refuses: it exits non-zero at start, every time.
    bad = trainer_spec(10, corpus="/no/such/corpus")
    handle = launcher.launch(request(trainer=bad, checkpoint_uri=store, s3_url=pod_s3))
    ended = wait_state(
        real_cluster, launcher, handle,
        {ObservedState.FAILED, ObservedState.SUCCEEDED, ObservedState.PREEMPTED}, timeout=180,
    )  # fmt: skip
    assert ended.state is ObservedState.FAILED, ended
    assert ended.exit_code not in (None, 0, 75, 76), ended
    assert any("corpus" in line for line in log_of(launcher, handle))
    # backoffLimit 0, restartPolicy Never: one pod, never restarted behind the scheduler's back.
    name = handle.split("/")[1]
    (pod,) = real_cluster.pods(namespace, name)
    assert pod.status.container_statuses[0].restart_count == 0


def test_a_finished_job_is_collected_by_its_ttl_and_not_recreated(
    real_cluster: RealCluster, namespace: str, pod_s3: str, store: str
) -> None:
    launcher = real_cluster.launcher(namespace, ttl_seconds_after_finished=5)
    handle = launcher.launch(request(trainer=trainer_spec(20), checkpoint_uri=store, s3_url=pod_s3))
    wait_state(real_cluster, launcher, handle, {ObservedState.SUCCEEDED}, timeout=240)
    name = handle.split("/")[1]

    def collected() -> bool:
        return not real_cluster.batch.list_namespaced_job(namespace).items

    real_cluster.wait(collected, timeout=60, what="the TTL controller to delete the Job")
    assert launcher.status(handle).state is ObservedState.LOST
    assert not real_cluster.pods(namespace, name)
    assert not events_of(real_cluster, namespace, f"{name}-recreated")
