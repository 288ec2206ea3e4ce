"""Kubernetes launcher: one batch/v1 Job per attempt (see launcher.py, manifests.py)."""

from worker.launchers.kubernetes.config import KubernetesLauncherConfig, Toleration
from worker.launchers.kubernetes.launcher import KubernetesLauncher, load_api_client

__all__ = ["KubernetesLauncher", "KubernetesLauncherConfig", "Toleration", "load_api_client"]
