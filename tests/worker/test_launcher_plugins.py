"""Launchers are plug-ins: found by name, and asked for what they declare they can do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.launchers import LAUNCHER_GROUPS
from api.settings import Settings
from worker.control import drain_on_shutdown
from worker.launchers.base import (
    Capability,
    CapabilityMissing,
    Launcher,
    LaunchRequest,
    Observation,
    ObservedState,
    drains,
    holds_standby,
    offset_logs,
    spot_probe,
)
from worker.launchers.kubernetes import KubernetesLauncher, KubernetesLauncherConfig
from worker.launchers.local import LocalLauncher
from worker.launchers.registry import UnknownLauncher, plugin, plugins


def test_every_launcher_the_api_names_registers_itself_in_its_folder() -> None:
    assert set(plugins()) == set(LAUNCHER_GROUPS)
    assert all(name == entry.name for name, entry in plugins().items())
    with pytest.raises(UnknownLauncher, match="slurm"):
        plugin("slurm")


def shipped(tmp_path: Path) -> list[Launcher]:
    return [LocalLauncher(root=tmp_path), KubernetesLauncher(KubernetesLauncherConfig())]


def test_each_shipped_launcher_has_what_it_declares(tmp_path: Path) -> None:
    for launcher in shipped(tmp_path):
        declared = launcher.capabilities
        assert (drains(launcher) is not None) == (Capability.DRAIN in declared)
        assert (spot_probe(launcher) is not None) == (Capability.SPOT_AVAILABILITY in declared)
        assert (offset_logs(launcher) is not None) == (Capability.LOG_OFFSET in declared)
        assert holds_standby(launcher) == (Capability.STANDBY in declared)


def test_both_shipped_launchers_run_a_standby_beside_the_running_attempt(tmp_path: Path) -> None:
    """Make-before-break (#25) needs it of both; what it means is tested on each, with real
    processes (tests/worker/test_local_launcher_standby.py) and on the API
    (tests/launchers/test_k8s_standby.py)."""
    assert [holds_standby(launcher) for launcher in shipped(tmp_path)] == [True, True]


def test_standby_is_answered_by_what_a_launcher_declares() -> None:
    assert holds_standby(Boasting())
    assert not holds_standby(Modest())


class Boasting:
    """Declares every capability and implements none of them."""

    name = "boasting"
    capabilities = frozenset(Capability)

    def launch(self, request: LaunchRequest) -> str:
        return request.attempt_id

    def status(self, handle: str) -> Observation:
        return Observation(ObservedState.LOST)

    def cancel(self, handle: str) -> None:
        pass

    def logs(self, handle: str, *, follow: bool = False) -> Iterator[str]:
        return iter(())


class Modest(Boasting):
    """Declares nothing beyond the protocol's four calls."""

    name = "modest"
    capabilities: frozenset[Capability] = frozenset()


def test_a_capability_declared_but_missing_is_an_error_not_a_silent_no() -> None:
    for ask in (drains, spot_probe, offset_logs):
        with pytest.raises(CapabilityMissing, match="boasting"):
            ask(Boasting())


@pytest.mark.parametrize(
    ("overrides", "asked"),
    [
        ({"launcher": "local", "drain_on_shutdown": False}, False),
        ({"launcher": "local", "drain_on_shutdown": True}, True),
        ({"launcher": "kubernetes", "drain_on_shutdown": True}, False),  # pods outlive it
    ],
)
def test_a_stopping_worker_drains_only_a_launcher_that_can_and_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overrides: dict[str, Any], asked: bool
) -> None:
    drained: list[Path] = []

    def drain(self: LocalLauncher, *, timeout_s: float | None = None) -> list[str]:
        drained.append(self.root)
        return []

    monkeypatch.setattr(LocalLauncher, "drain", drain)
    settings = Settings(home=tmp_path, **overrides)
    assert drain_on_shutdown(settings) == []
    assert drained == ([(settings.trainer_home_dir() / "attempts").absolute()] if asked else [])
