"""The Kubernetes launcher's settings (worker/launchers/kubernetes; deploy/README.md per cloud)
and what they make of it for the rest (`traits`), under the GPUJOBS_ names they always had.

They are here, not in the launcher's folder, because `Settings` (api.settings) holds them and the
worker imports api, never the reverse; the launcher reads its group, `Settings.kubernetes`.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from api.launchers.traits import LauncherSettings, LauncherTraits
from api.pricing.cost_model import RESTART_HOURS

# A Kubernetes taint as `kubectl taint` writes it: key[=value]:Effect.
_TAINT = re.compile(
    r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?(=[-A-Za-z0-9_.]*)?:(NoSchedule|PreferNoSchedule|NoExecute)$"
)


class KubernetesLauncherSettings(LauncherSettings):
    """The Kubernetes launcher (worker/launchers/kubernetes; deploy/README.md per cloud)."""

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

    def traits(self) -> LauncherTraits:
        # Real cloud capacity: a restart provisions a node, GPU models run at their own speeds.
        return LauncherTraits(
            simulated=False,
            on_this_machine=False,
            restart_hours=RESTART_HOURS,
            gpu_models_alike=False,
        )
