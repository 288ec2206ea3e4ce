"""The local launcher's registration (worker.launchers.registry): built from `Settings.local`."""

from __future__ import annotations

from worker.launchers.local.configure import drainer_from_settings, launcher_from_settings
from worker.launchers.registry import LauncherPlugin

PLUGIN = LauncherPlugin("local", build=launcher_from_settings, build_to_drain=drainer_from_settings)
