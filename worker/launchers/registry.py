"""The launchers, by the name GPUJOBS_LAUNCHER gives (gpujobs.resources.Launcher).

Each is a plug-in: how to build it from the settings, and what it can do besides the protocol's
calls (its `capabilities`, worker.launchers.base). A launcher's module is imported when it is
built, not here: the local launcher needs no Kubernetes client, and a Kubernetes API process
no trainer runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from api.settings import Settings
from worker.launchers.base import Launcher


@dataclass(frozen=True)
class LauncherPlugin:
    name: str
    build: Callable[[Settings], Launcher]
    # The launcher a stopping worker drains (Capability.DRAIN), built from the settings alone,
    # without what a launch needs; None when there is nothing to do on the way out.
    build_to_drain: Callable[[Settings], Launcher | None] | None = None


class UnknownLauncher(ValueError):
    pass


def _local(settings: Settings) -> Launcher:
    from worker.launchers.local.configure import launcher_from_settings

    return launcher_from_settings(settings)


def _local_to_drain(settings: Settings) -> Launcher | None:
    from worker.launchers.local.configure import drainer_from_settings

    return drainer_from_settings(settings)


def _kubernetes(settings: Settings) -> Launcher:
    from worker.launchers.kubernetes import KubernetesLauncher

    return KubernetesLauncher.from_settings(settings)


PLUGINS: Mapping[str, LauncherPlugin] = MappingProxyType(
    {
        "local": LauncherPlugin("local", build=_local, build_to_drain=_local_to_drain),
        "kubernetes": LauncherPlugin("kubernetes", build=_kubernetes),
    }
)


def plugin(name: str) -> LauncherPlugin:
    try:
        return PLUGINS[name]
    except KeyError:
        known = ", ".join(sorted(PLUGINS))
        raise UnknownLauncher(f"no launcher named {name!r} (known: {known})") from None


def make_launcher(settings: Settings) -> Launcher:
    return plugin(settings.launcher).build(settings)
