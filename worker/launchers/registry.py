"""The launchers, by the name GPUJOBS_LAUNCHER gives (api.launchers.LAUNCHER_GROUPS).

Each is a plug-in that registers itself in its own folder: worker/launchers/<name>/plugin.py
holds its `PLUGIN`, how to build it from the settings; what it can do besides the protocol's
calls is its `capabilities` (worker.launchers.base). A launcher's package is imported when it is
asked for, not here: the local launcher needs no Kubernetes client, and a Kubernetes API process
no trainer runtime.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache

from api.launchers import LAUNCHER_GROUPS
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


@cache
def plugin(name: str) -> LauncherPlugin:
    if name not in LAUNCHER_GROUPS:
        known = ", ".join(sorted(LAUNCHER_GROUPS))
        raise UnknownLauncher(f"no launcher named {name!r} (known: {known})")
    found = importlib.import_module(f"{__package__}.{name}.plugin").PLUGIN
    if not isinstance(found, LauncherPlugin) or found.name != name:
        raise UnknownLauncher(f"worker/launchers/{name}/plugin.py: PLUGIN is not the {name!r} one")
    return found


def plugins() -> Mapping[str, LauncherPlugin]:
    """Every launcher's plug-in, each package imported: for checks, not for a running process."""
    return {name: plugin(name) for name in LAUNCHER_GROUPS}


def make_launcher(settings: Settings) -> Launcher:
    return plugin(settings.launcher).build(settings)
