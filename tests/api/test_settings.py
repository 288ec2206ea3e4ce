"""One Settings: defaults that depend on how the service is deployed."""

from __future__ import annotations

import pytest

from api.pricing.cost_model import LOCAL_RESTART_HOURS, RESTART_HOURS
from api.pricing.gpu_speed import DEFAULT_SPEEDS
from api.settings import Settings


def test_a_restart_is_a_process_start_locally_and_a_node_on_kubernetes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GPUJOBS_RESTART_HOURS", raising=False)
    monkeypatch.delenv("GPUJOBS_LAUNCHER", raising=False)
    local = Settings()
    assert local.restart_hours == LOCAL_RESTART_HOURS
    assert "restart_hours" not in local.model_fields_set  # a default, not the operator's
    assert Settings(launcher="kubernetes").restart_hours == RESTART_HOURS
    monkeypatch.setenv("GPUJOBS_LAUNCHER", "kubernetes")
    assert Settings().restart_hours == RESTART_HOURS


def test_the_operators_restart_time_wins_on_either_launcher(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUJOBS_RESTART_HOURS", str(RESTART_HOURS))
    assert Settings(launcher="local").restart_hours == RESTART_HOURS
    assert Settings(launcher="kubernetes", restart_hours=0.05).restart_hours == 0.05


def test_gpu_speeds_are_the_table_on_kubernetes_and_alike_locally(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Local processes run on this machine's CPU whatever offer they are placed on."""
    monkeypatch.delenv("GPUJOBS_GPU_SPEEDS", raising=False)
    assert Settings(launcher="local").gpu_speeds == {}
    assert Settings(launcher="kubernetes").gpu_speeds == DEFAULT_SPEEDS
    # What an operator sets replaces those models' figures; the rest keep the table's (an L4
    # left out must not count as fast as an A100).
    monkeypatch.setenv("GPUJOBS_GPU_SPEEDS", '{"h100": 2.6, "MI300X": 2.5}')
    assert Settings(launcher="local").gpu_speeds == DEFAULT_SPEEDS | {"H100": 2.6, "MI300X": 2.5}
    monkeypatch.setenv("GPUJOBS_GPU_SPEEDS", '{"H100": 0}')
    with pytest.raises(ValueError, match="H100"):
        Settings(launcher="kubernetes")
