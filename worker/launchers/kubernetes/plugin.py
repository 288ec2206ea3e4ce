"""The Kubernetes launcher's registration (worker.launchers.registry): built from
`Settings.kubernetes`. Its pods outlive a stopping worker: nothing to drain."""

from __future__ import annotations

from worker.launchers.kubernetes.launcher import KubernetesLauncher
from worker.launchers.registry import LauncherPlugin

PLUGIN = LauncherPlugin("kubernetes", build=KubernetesLauncher.from_settings)
