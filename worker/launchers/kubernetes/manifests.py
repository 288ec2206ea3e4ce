"""The objects one attempt becomes: a batch/v1 Job, a token Secret and, for several nodes, a
headless Service. Pure functions of (LaunchRequest, config), so every manifest can be checked
against the real API schemas without a cluster.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass

from kubernetes import client

from gpujobs.runtime import (
    ENV_JOB_TOKEN,
    ENV_RUN_CONFIG_JSON,
    EXIT_PREEMPTED,
    EXIT_PREEMPTED_NO_CHECKPOINT,
)
from gpujobs.spec import CapacityType
from worker.launchers.base import LaunchRequest
from worker.launchers.environment import trainer_environment
from worker.launchers.kubernetes.config import (
    CapacityPlacement,
    KubernetesLauncherConfig,
    NodeRequirement,
    Toleration,
    TrainerS3Keys,
)

LABEL_PREFIX = "gpujobs.dev/"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpujobs"
COMPONENT_LABEL = "app.kubernetes.io/component"
JOB_ID_LABEL = f"{LABEL_PREFIX}job-id"
ATTEMPT_ID_LABEL = f"{LABEL_PREFIX}attempt-id"
ATTEMPT_NUMBER_LABEL = f"{LABEL_PREFIX}attempt-number"
TEAM_LABEL = f"{LABEL_PREFIX}team"
CAPACITY_TYPE_LABEL = f"{LABEL_PREFIX}capacity-type"
# The Job's own name, on every object of the attempt: pods and the Service select on it, and it
# works whether or not a Job controller has added its `batch.kubernetes.io/job-name` label yet.
ATTEMPT_NAME_LABEL = f"{LABEL_PREFIX}attempt-name"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

CONTAINER_NAME = "trainer"
# The attempt's own Secret: its job token and, when trainers use static keys, S3 credentials.
TOKEN_KEY = "token"
S3_ACCESS_KEY_ID_KEY = "aws-access-key-id"
S3_SECRET_ACCESS_KEY_KEY = "aws-secret-access-key"
SHM_VOLUME = "dshm"
# The trainer's HOME, TMPDIR and caches: the pod's own, writable under any runAsUser (fsGroup).
SCRATCH_VOLUME = "scratch"
SCRATCH_PATH = "/scratch"
# PID 1 of the pod: starts the ranks, forwards the notice, exits 75 when every rank saved.
SUPERVISOR_COMMAND = ["python", "-m", "trainer.supervisor"]
GPU_RESOURCE = "nvidia.com/gpu"
DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTED_EXIT_CODES = (EXIT_PREEMPTED, EXIT_PREEMPTED_NO_CHECKPOINT)

# An Indexed Job's pods are named (and get the hostname) `<job>-<index>`, which must stay a
# DNS label (63 characters) for the rendezvous address to resolve: keep room for the index.
MAX_JOB_NAME = 52
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True)
class AttemptManifests:
    job: client.V1Job
    secret: client.V1Secret
    service: client.V1Service | None  # only multi-node attempts rendezvous over the network


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:8]


def job_name(attempt_id: str) -> str:
    """A DNS-1035 label derived from the attempt id alone, so a retried launch finds its Job.

    Ids that are not already safe get a hash suffix, so `ABC` and `abc` never share a Job.
    """
    slug = re.sub(r"[^a-z0-9]+", "-", attempt_id.lower()).strip("-")
    name = f"gj-{slug}"
    if slug == attempt_id and len(name) <= MAX_JOB_NAME:
        return name
    keep = MAX_JOB_NAME - len("gj--") - 8
    return f"gj-{slug[:keep]}".rstrip("-") + f"-{_digest(attempt_id)}"


def secret_name(config: KubernetesLauncherConfig, name: str) -> str:
    return f"{config.token_secret_prefix}{name}"


def label_value(value: str) -> str:
    """A valid label value; the exact value also goes into an annotation."""
    if len(value) <= 63 and _LABEL_VALUE.match(value):
        return value
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", value)[:54].strip("-_.")
    return f"{cleaned}-{_digest(value)}" if cleaned else _digest(value)


def attempt_labels(request: LaunchRequest, name: str) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        COMPONENT_LABEL: "trainer",
        JOB_ID_LABEL: label_value(request.job_id),
        ATTEMPT_ID_LABEL: label_value(request.attempt_id),
        ATTEMPT_NUMBER_LABEL: str(request.attempt_number),
        TEAM_LABEL: label_value(request.team),
        CAPACITY_TYPE_LABEL: request.placement.capacity_type.value,
        ATTEMPT_NAME_LABEL: name,
    }


def attempt_annotations(request: LaunchRequest) -> dict[str, str]:
    where = request.placement
    return {
        JOB_ID_LABEL: request.job_id,
        ATTEMPT_ID_LABEL: request.attempt_id,
        TEAM_LABEL: request.team,
        f"{LABEL_PREFIX}job-name": request.job_name,
        f"{LABEL_PREFIX}offer": "/".join(
            [where.cloud, where.region, where.zone, where.instance_type]
        ),
    }


def build_manifests(request: LaunchRequest, config: KubernetesLauncherConfig) -> AttemptManifests:
    name = job_name(request.attempt_id)
    labels = {**config.extra_labels, **attempt_labels(request, name)}
    service = build_service(request, config, name, labels) if request.placement.nodes > 1 else None
    return AttemptManifests(
        job=build_job(request, config, name, labels),
        secret=build_secret(request, config, name, labels),
        service=service,
    )


def build_secret(
    request: LaunchRequest, config: KubernetesLauncherConfig, name: str, labels: dict[str, str]
) -> client.V1Secret:
    """Everything secret a trainer pod gets, and nothing of the control plane's own Secret."""
    data = {TOKEN_KEY: request.job_token}
    keys = trainer_keys(request, config)
    if keys is not None:
        data[S3_ACCESS_KEY_ID_KEY] = keys.access_key_id
        data[S3_SECRET_ACCESS_KEY_KEY] = keys.secret_access_key
    return client.V1Secret(
        api_version="v1",
        kind="Secret",
        metadata=client.V1ObjectMeta(
            name=secret_name(config, name), namespace=config.namespace, labels=labels
        ),
        type="Opaque",
        data={key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    )


def trainer_keys(request: LaunchRequest, config: KubernetesLauncherConfig) -> TrainerS3Keys | None:
    """The attempt's own keys where they were minted for it (worker.storage_credentials),
    else the operator's static trainer keys, else none (IRSA, workload identity)."""
    if request.storage is not None:
        return TrainerS3Keys(request.storage.access_key_id, request.storage.secret_access_key)
    return config.trainer_s3_keys


def build_service(
    request: LaunchRequest, config: KubernetesLauncherConfig, name: str, labels: dict[str, str]
) -> client.V1Service:
    return client.V1Service(
        api_version="v1",
        kind="Service",
        metadata=client.V1ObjectMeta(name=name, namespace=config.namespace, labels=labels),
        spec=client.V1ServiceSpec(
            cluster_ip="None",
            selector={ATTEMPT_NAME_LABEL: name},
            # Ranks must resolve pod 0 while it starts, before it would count as ready.
            publish_not_ready_addresses=True,
            ports=[
                client.V1ServicePort(
                    name="rendezvous",
                    port=config.master_port,
                    target_port=config.master_port,
                    protocol="TCP",
                )
            ],
        ),
    )


def pod_failure_policy() -> client.V1PodFailurePolicy:
    """End the Job on preemption instead of letting Kubernetes retry it.

    A preempted attempt goes back to the scheduler, which may move it to on-demand (deadline)
    and opens a new attempt row (cost ledger). So both rules are FailJob, like any other failure
    (backoffLimit 0); they exist so the Job's Failed condition says *why*, and it names the rule
    that fired ("... matching FailJob rule at index 0"), which survives pod cleanup (a reclaimed
    node's pods are deleted with it). Rule 0 is a pod disrupted by eviction, node drain or
    shutdown, scheduler preemption or a lost node (DisruptionTarget): the preemption. Rule 1 is
    the trainer exiting 75/76, which it does after a notice but may do without one (a team's
    code): it is a failure unless the pod was disrupted, so the disruption rule comes first
    (the first rule that matches fires). Ignore would restart the pod behind the scheduler's
    back.
    """
    return client.V1PodFailurePolicy(
        rules=[
            client.V1PodFailurePolicyRule(
                action="FailJob",
                on_pod_conditions=[
                    client.V1PodFailurePolicyOnPodConditionsPattern(
                        type=DISRUPTION_TARGET, status="True"
                    )
                ],
            ),
            client.V1PodFailurePolicyRule(
                action="FailJob",
                on_exit_codes=client.V1PodFailurePolicyOnExitCodesRequirement(
                    container_name=CONTAINER_NAME,
                    operator="In",
                    values=list(PREEMPTED_EXIT_CODES),
                ),
            ),
        ]
    )


def build_job(
    request: LaunchRequest, config: KubernetesLauncherConfig, name: str, labels: dict[str, str]
) -> client.V1Job:
    job_labels = dict(labels)
    if config.kueue_queue:
        job_labels[KUEUE_QUEUE_LABEL] = config.kueue_queue
    return client.V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=client.V1ObjectMeta(
            name=name,
            namespace=config.namespace,
            labels=job_labels,
            annotations=attempt_annotations(request),
        ),
        spec=client.V1JobSpec(
            completion_mode="Indexed",
            completions=request.placement.nodes,
            parallelism=request.placement.nodes,
            backoff_limit=0,
            pod_failure_policy=pod_failure_policy(),
            ttl_seconds_after_finished=config.ttl_seconds_after_finished,
            # Kueue admits a Job by unsuspending it; created running, it would skip the queue.
            suspend=True if config.kueue_queue else None,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=_pod_spec(request, config, name),
            ),
        ),
    )


def _pod_spec(
    request: LaunchRequest, config: KubernetesLauncherConfig, name: str
) -> client.V1PodSpec:
    placement = config.capacity_profile.placement(request.placement.capacity_type)
    tolerations = [*config.tolerations, *placement.tolerations]
    if request.placement.capacity_type is CapacityType.SPOT:
        tolerations += config.spot_tolerations
    return client.V1PodSpec(
        restart_policy="Never",
        # Pod 0 becomes `<job>-0.<service>` in DNS only with the subdomain set.
        subdomain=name if request.placement.nodes > 1 else None,
        node_selector=_node_selector(request, config, placement),
        affinity=_affinity(placement),
        tolerations=[_toleration(t) for t in dict.fromkeys(tolerations)] or None,
        termination_grace_period_seconds=config.grace_s,
        service_account_name=config.service_account,
        # The trainer never talks to the Kubernetes API; keep its token out of the container.
        automount_service_account_token=False,
        # Service env vars of a busy namespace only add noise to the trainer's environment.
        enable_service_links=False,
        priority_class_name=config.priority_class_name,
        image_pull_secrets=[
            client.V1LocalObjectReference(name=s) for s in config.image_pull_secrets
        ]
        or None,
        # The `restricted` Pod Security profile (tests check each of its rules).
        security_context=client.V1PodSecurityContext(
            run_as_non_root=True,
            run_as_user=config.run_as_user,
            run_as_group=config.run_as_user,
            fs_group=config.run_as_user,
            seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
        ),
        containers=[_container(request, config, name)],
        volumes=[
            # DataLoader workers share batches through /dev/shm; the runtime default is 64 MiB.
            # Memory-backed: bounded, or one job's shm could take the node's memory.
            client.V1Volume(
                name=SHM_VOLUME,
                empty_dir=client.V1EmptyDirVolumeSource(
                    medium="Memory", size_limit=config.resources.shm_size
                ),
            ),
            client.V1Volume(name=SCRATCH_VOLUME, empty_dir=client.V1EmptyDirVolumeSource()),
        ],
    )


def _node_selector(
    request: LaunchRequest, config: KubernetesLauncherConfig, placement: CapacityPlacement
) -> dict[str, str]:
    selector = dict(placement.labels)
    # No label: a pool whose nodes are all alike (a local cluster, one instance type per queue).
    if config.instance_type_label:
        selector[config.instance_type_label] = request.placement.instance_type
    if config.zone_label and request.placement.zone:
        selector[config.zone_label] = request.placement.zone
    return selector


def _affinity(placement: CapacityPlacement) -> client.V1Affinity | None:
    if not placement.any_of:
        return None
    terms = [
        client.V1NodeSelectorTerm(match_expressions=[_requirement(r) for r in term])
        for term in placement.any_of
    ]
    return client.V1Affinity(
        node_affinity=client.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=client.V1NodeSelector(
                node_selector_terms=terms
            )
        )
    )


def _requirement(requirement: NodeRequirement) -> client.V1NodeSelectorRequirement:
    return client.V1NodeSelectorRequirement(
        key=requirement.key,
        operator=requirement.operator,
        values=list(requirement.values) or None,
    )


def _toleration(toleration: Toleration) -> client.V1Toleration:
    return client.V1Toleration(
        key=toleration.key,
        operator=toleration.operator,
        value=toleration.value,
        effect=toleration.effect,
    )


def rank_grace_s(grace_s: int) -> int:
    """How long ranks get to checkpoint after the notice: the pod's grace period less a margin,
    so the supervisor, not the kubelet's SIGKILL, decides the pod's exit code."""
    return max(1, grace_s - min(5, max(1, grace_s // 5)))


def supervisor_args(
    request: LaunchRequest, config: KubernetesLauncherConfig, name: str
) -> list[str]:
    # Pod 0's rank 0 hosts the rendezvous store; a single node talks to itself. The node rank
    # is the pod's completion index (JOB_COMPLETION_INDEX, set by the Job controller).
    master = f"{name}-0.{name}" if request.placement.nodes > 1 else "127.0.0.1"
    return [
        f"--nnodes={request.placement.nodes}",
        f"--nproc-per-node={max(request.gpus_per_node, 1)}",
        f"--master-addr={master}",
        f"--master-port={config.master_port}",
        f"--grace-s={rank_grace_s(config.grace_s)}",
    ]


def run_config_json(request: LaunchRequest, config: KubernetesLauncherConfig) -> str:
    update: dict[str, str] = {"job_id": request.job_id, "attempt_id": request.attempt_id}
    if config.api_url:
        update["api_url"] = config.api_url
    return request.run_config.model_copy(update=update).model_dump_json()


def _container(
    request: LaunchRequest, config: KubernetesLauncherConfig, name: str
) -> client.V1Container:
    plain = trainer_environment(
        request,
        run_config={ENV_RUN_CONFIG_JSON: run_config_json(request, config)},
        home=SCRATCH_PATH,
        include_token=False,
    )
    if request.storage is not None and request.storage.region:
        plain["AWS_DEFAULT_REGION"] = request.storage.region
    # The job token (and S3 keys) come from the attempt's Secret: secret_env, below.
    env = [client.V1EnvVar(name=key, value=value) for key, value in sorted(plain.items())]
    requests = config.resources.requests(request.gpus_per_node)
    limits = dict(requests) if config.resources.guaranteed else {}
    if request.gpus_per_node:
        limits[GPU_RESOURCE] = str(request.gpus_per_node)
    return client.V1Container(
        name=CONTAINER_NAME,
        image=request.image or config.default_image,
        image_pull_policy=config.image_pull_policy,
        command=SUPERVISOR_COMMAND,
        args=supervisor_args(request, config, name),
        env=env + secret_env(request, config, name),
        resources=client.V1ResourceRequirements(requests=requests, limits=limits or None),
        volume_mounts=[
            client.V1VolumeMount(name=SHM_VOLUME, mount_path="/dev/shm"),
            client.V1VolumeMount(name=SCRATCH_VOLUME, mount_path=SCRATCH_PATH),
        ],
        security_context=client.V1SecurityContext(
            allow_privilege_escalation=False,
            capabilities=client.V1Capabilities(drop=["ALL"]),
            run_as_non_root=True,
            seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
        ),
    )


def secret_env(
    request: LaunchRequest, config: KubernetesLauncherConfig, name: str
) -> list[client.V1EnvVar]:
    """The env read from the attempt's own Secret, key by key (never a whole Secret)."""
    keys = {ENV_JOB_TOKEN: TOKEN_KEY}
    if trainer_keys(request, config) is not None:
        keys["AWS_ACCESS_KEY_ID"] = S3_ACCESS_KEY_ID_KEY
        keys["AWS_SECRET_ACCESS_KEY"] = S3_SECRET_ACCESS_KEY_KEY
    return [
        client.V1EnvVar(
            name=env_name,
            value_from=client.V1EnvVarSource(
                secret_key_ref=client.V1SecretKeySelector(name=secret_name(config, name), key=key)
            ),
        )
        for env_name, key in keys.items()
    ]


def owner_reference(job: client.V1Job) -> client.V1OwnerReference:
    """Ties the Secret and Service to the Job, so deleting the Job collects them."""
    return client.V1OwnerReference(
        api_version="batch/v1",
        kind="Job",
        name=job.metadata.name,
        uid=job.metadata.uid,
        # Blocking the owner's deletion needs update rights on jobs/finalizers; not worth it.
        block_owner_deletion=False,
    )
