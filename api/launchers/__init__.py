"""The launchers every process knows by name: each one's settings group, a field of `Settings`
named after it, which says what the launcher is to the rest (`LauncherSettings.traits`).

This is the API's one list of launchers. A launcher's code is the worker's
(worker/launchers/<name>/, registered under the same name in worker/launchers/registry.py); its
settings live here, in api/launchers/<name>.py, because `Settings` is built here and the worker
imports api, never the reverse. Nothing else names a launcher: callers ask a trait.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pydantic import Field
from pydantic_settings import BaseSettings

from api.launchers.kubernetes import KubernetesLauncherSettings
from api.launchers.local import LocalLauncherSettings
from api.launchers.traits import GROUP_CONFIG, LauncherSettings, LauncherTraits

__all__ = ["DEFAULT_LAUNCHER", "LAUNCHER_GROUPS", "LauncherGroups", "LauncherTraits"]


class LauncherGroups(BaseSettings):
    """The launchers' groups of `Settings`, one field per launcher, named as GPUJOBS_LAUNCHER
    names it; each reads its members' own GPUJOBS_ names."""

    model_config = GROUP_CONFIG

    local: LocalLauncherSettings = Field(default_factory=LocalLauncherSettings)
    kubernetes: KubernetesLauncherSettings = Field(default_factory=KubernetesLauncherSettings)


def _groups() -> dict[str, type[LauncherSettings]]:
    groups = {}
    for name, field in LauncherGroups.model_fields.items():
        model = field.annotation
        assert isinstance(model, type) and issubclass(model, LauncherSettings), name
        groups[name] = model
    return groups


# Each launcher's name and the model of its group.
LAUNCHER_GROUPS: Mapping[str, type[LauncherSettings]] = MappingProxyType(_groups())
# What GPUJOBS_LAUNCHER is when unset: trainers as processes on this machine, nothing to set up.
DEFAULT_LAUNCHER = "local"
