"""Each launcher's own settings, a group per launcher, under the GPUJOBS_ names they always had.

api/ reads none of them but the simulated spot market's clock (Settings.market_time_scale, which
the placement's words follow): they are here because `Settings` (api.settings) is built here, and
the worker imports api, never the reverse. `Settings.local` and `Settings.kubernetes` hold them; the
launcher of that name reads its group (worker/launchers/registry.py).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# A Kubernetes taint as `kubectl taint` writes it: key[=value]:Effect.
_TAINT = re.compile(
    r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?(=[-A-Za-z0-9_.]*)?:(NoSchedule|PreferNoSchedule|NoExecute)$"
)
# The same prefix as Settings': each field's name is its environment variable's.
_CONFIG = SettingsConfigDict(env_prefix="GPUJOBS_", env_file=None, extra="ignore")
# Processes and threads a job's trainer uid may hold (RLIMIT_NPROC counts threads on Linux):
# torchrun, 8 ranks with their DataLoader workers and each one's torch, CUDA, NCCL and OpenMP
# threads, a standby's as many beside them, with room to spare; a sixteenth of the kernel's
# default pid_max (32768), so one job cannot take the machine's pids.
TRAINER_MAX_PIDS = 2048


class LocalLauncherSettings(BaseSettings):
    """The local launcher (worker/launchers/local): trainers as processes on the worker's
    machine."""

    model_config = _CONFIG

    # The simulated spot market
    spot_market: Literal["off", "rate", "trace"] = "off"
    spot_preemption_rate_per_hour: float = Field(
        0.0, description="rate market: preemptions per simulated hour of spot."
    )
    spot_trace: str = Field(
        "",
        description="trace market: a spot-traces JSON file to replay; empty = the one shipped "
        "with the worker (AWS us-east-1a p3.2xlarge, Feb 2023).",
    )
    spot_trace_start: int | None = Field(
        None,
        ge=0,
        description="trace market: the tick (index into the trace's data) the replay starts "
        "at; empty = 0, or for the shipped trace 14695, where spot is offered for 52 s of wall "
        "time at x60 and then taken back for 10 s: a preemption within a minute of start.",
    )
    spot_trace_time_scale: float = Field(
        60.0, description="Simulated seconds per wall-clock second for the spot market."
    )
    spot_notice_s: float = Field(10.0, description="Preemption notice: SIGTERM, then SIGKILL.")
    # What contains a trainer (docs/security.md)
    trainer_python: str = Field(
        "",
        description="Interpreter that runs trainers; empty = the server's. Run as root, the "
        "server starts trainers as unprivileged uids, which must be able to reach it.",
    )
    trainer_python_path: str = Field(
        "", description="PYTHONPATH of trainers: where operator-allowed workload modules live."
    )
    trainer_uid_first: int = Field(
        200_000, description="Run as root, each job's trainers get their own uid from here."
    )
    trainer_uid_count: int = Field(100_000, description="How many trainer uids (one per job).")
    trainer_max_pids: int = Field(
        TRAINER_MAX_PIDS,
        ge=16,
        description="Run as root: the processes and threads a job's trainers may hold "
        "together (RLIMIT_NPROC of its uid), so that a fork bomb fails in the job, not the "
        "machine. Count threads: a rank with DataLoader workers runs dozens.",
    )
    trainer_s3_access_key_id: str = Field(
        "", description="S3 keys for trainers (never the server's own): scope them to the prefix."
    )
    trainer_s3_secret_access_key: str = ""
    trainer_s3_region: str = ""
    drain_on_shutdown: bool = Field(
        False,
        description="A stopping worker stops its trainers (checkpoint, then resume later) "
        "instead of leaving them running; for containers, whose processes die with the worker.",
    )


class KubernetesLauncherSettings(BaseSettings):
    """The Kubernetes launcher (worker/launchers/kubernetes; deploy/README.md per cloud)."""

    model_config = _CONFIG

    trainer_image: str = "ghcr.io/gpujobs/trainer:latest"
    k8s_namespace: str = "gpujobs"
    k8s_instance_type_label: str = Field(
        "node.kubernetes.io/instance-type",
        description="Node label that pins a pod to its offer's instance type; empty for a pool "
        "whose nodes are all alike (a local cluster).",
    )
    k8s_capacity_profile: Literal["karpenter", "eks", "gke", "aks", "custom"] = Field(
        "karpenter",
        description="How nodes say spot or on-demand: Karpenter, EKS managed node groups, GKE, "
        "AKS, or `custom` (k8s_capacity_type_label and _values).",
    )
    k8s_capacity_type_label: str = Field(
        "", description="custom profile only: the node label carrying the capacity type."
    )
    k8s_capacity_type_values: dict[Literal["spot", "on_demand", "reserved"], str] = Field(
        default_factory=dict,
        description="custom profile only: that label's value per capacity type; default "
        "Karpenter's (spot, on-demand, reserved).",
    )
    k8s_spot_taints: list[str] = Field(
        default_factory=list,
        description="Taints of spot nodes that spot attempts tolerate besides the profile's, "
        "as key[=value]:Effect.",
    )
    k8s_termination_grace_s: int = Field(
        0,
        ge=0,
        description="Seconds from the spot notice (SIGTERM) to SIGKILL; 0 = the profile's "
        "(120 on AWS, 25 on GKE and AKS, whose notice is 30 s).",
    )
    k8s_unschedulable_timeout_s: float = 600.0
    k8s_autoscaler_verdict: bool = Field(
        True,
        description="Give an unschedulable attempt up as soon as the cluster autoscaler says it "
        "will add no node for it (NotTriggerScaleUp, FailedScaleUp on the pod), not only after "
        "k8s_unschedulable_timeout_s. Turn off on fixed-size pools where a pod should queue "
        "for a busy GPU.",
    )
    k8s_start_timeout_s: float = Field(
        300.0,
        gt=0,
        description="A scheduled pod whose container has not started after this long "
        "(ImagePullBackOff, CreateContainerConfigError, ...) ends the attempt; its Job is deleted.",
    )
    k8s_kueue_queue: str = ""
    k8s_service_account: str = ""
    k8s_image_pull_secrets: list[str] = Field(
        default_factory=list, description="Secrets in k8s_namespace for pulling trainer images."
    )
    k8s_cpu_per_gpu: float = Field(
        4.0, gt=0, description="Trainer pod CPU request per GPU (per pod for CPU-only attempts)."
    )
    k8s_memory_gib_per_gpu: float = Field(
        16.0, gt=0, description="Trainer pod memory request per GPU, GiB."
    )
    k8s_trainer_qos: Literal["burstable", "guaranteed"] = Field(
        "burstable",
        description="guaranteed: limits equal requests, so the kubelet evicts the pod last.",
    )
    k8s_shm_size_gib: float = Field(8.0, gt=0, description="Size limit of the pod's /dev/shm.")
    k8s_run_as_user: int = Field(10001, ge=1, description="The trainer image's non-root uid.")
    k8s_trainer_s3_access_key_id: str = Field(
        "",
        description="Static S3 key for trainer pods only (not the control plane's); empty = "
        "the pods get S3 access another way (IRSA, workload identity).",
    )
    k8s_trainer_s3_secret_access_key: str = ""

    @model_validator(mode="after")
    def _check_k8s_capacity(self) -> KubernetesLauncherSettings:
        custom = self.k8s_capacity_profile == "custom"
        if custom and not self.k8s_capacity_type_label:
            raise ValueError("k8s_capacity_type_label is required with k8s_capacity_profile=custom")
        if not custom and (self.k8s_capacity_type_label or self.k8s_capacity_type_values):
            raise ValueError(
                "k8s_capacity_type_label and k8s_capacity_type_values apply to "
                f"k8s_capacity_profile=custom only, not {self.k8s_capacity_profile!r}"
            )
        for taint in self.k8s_spot_taints:
            if not _TAINT.match(taint):
                raise ValueError(f"k8s_spot_taints: {taint!r} is not key[=value]:Effect")
        if bool(self.k8s_trainer_s3_access_key_id) != bool(self.k8s_trainer_s3_secret_access_key):
            raise ValueError(
                "k8s_trainer_s3_access_key_id and k8s_trainer_s3_secret_access_key go together"
            )
        return self
