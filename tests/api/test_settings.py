"""One Settings: defaults that depend on how the service is deployed."""

from __future__ import annotations

import pytest

from api.launchers import LAUNCHER_GROUPS
from api.launchers.local import LocalLauncherSettings
from api.pricing.cost_model import LOCAL_RESTART_HOURS, RESTART_HOURS
from api.pricing.gpu_speed import DEFAULT_SPEEDS
from api.settings import Settings, setting_names


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


def test_launcher_settings_are_grouped_per_launcher_under_their_old_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUJOBS_SPOT_MARKET", "rate")
    monkeypatch.setenv("GPUJOBS_SPOT_NOTICE_S", "3")
    monkeypatch.setenv("GPUJOBS_K8S_NAMESPACE", "ml-jobs")
    monkeypatch.setenv("GPUJOBS_TRAINER_IMAGE", "registry.local/trainer:1")
    settings = Settings()
    assert (settings.local.spot_market, settings.local.spot_notice_s) == ("rate", 3.0)
    assert settings.kubernetes.k8s_namespace == "ml-jobs"
    assert settings.kubernetes.trainer_image == "registry.local/trainer:1"
    # Given by name, a setting goes to its group; the group's others still come from the env.
    given = Settings(spot_market="trace", k8s_kueue_queue="gpu")
    assert (given.local.spot_market, given.local.spot_notice_s) == ("trace", 3.0)
    assert (given.kubernetes.k8s_kueue_queue, given.kubernetes.k8s_namespace) == ("gpu", "ml-jobs")
    with pytest.raises(ValueError, match="spot_market"):
        Settings(spot_market="auction")
    with pytest.raises(ValueError, match="given twice"):
        Settings(spot_market="trace", local=LocalLauncherSettings())


def test_every_setting_keeps_one_name_of_its_own() -> None:
    names = setting_names()
    assert len(names) == len(set(names))
    assert not set(LAUNCHER_GROUPS) & set(names)  # GPUJOBS_LOCAL is no setting
    assert {"spot_market", "drain_on_shutdown", "k8s_namespace", "trainer_image"} <= set(names)
    assert {"home", "launcher", "trainer_home", "local_max_ranks"} <= set(names)


def test_a_groups_name_in_the_environment_is_no_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    # Read as a whole group's JSON it would override the members' own names, or (not JSON)
    # stop every process at start.
    monkeypatch.setenv("GPUJOBS_K8S_NAMESPACE", "from-its-name")
    monkeypatch.setenv("GPUJOBS_KUBERNETES", '{"k8s_namespace": "from-the-group"}')
    monkeypatch.setenv("GPUJOBS_LOCAL", "not json")
    settings = Settings()
    assert settings.kubernetes.k8s_namespace == "from-its-name"
    assert settings.local.spot_market == "off"
    assert Settings(k8s_kueue_queue="gpu").kubernetes.k8s_namespace == "from-its-name"


@pytest.mark.parametrize(
    ("root", "error"),
    [
        ("gs://bucket/ckpt", "use a directory, file:///dir or s3://bucket/prefix"),
        ("s3://", "has no bucket"),
        ("checkpoints", "must be an absolute path"),
    ],
)
def test_a_checkpoint_root_no_trainer_could_use_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, root: str, error: str
) -> None:
    # A job keeps the prefix of its first launch: a bad root would stay with every such job.
    monkeypatch.setenv("GPUJOBS_CHECKPOINT_URI", root)
    with pytest.raises(ValueError, match=error):
        Settings()


@pytest.mark.parametrize("root", ["", "/srv/checkpoints", "file:///srv/ckpt", "s3://b/ckpt"])
def test_the_checkpoint_roots_trainers_use_are_taken(
    monkeypatch: pytest.MonkeyPatch, root: str
) -> None:
    monkeypatch.setenv("GPUJOBS_CHECKPOINT_URI", root)
    assert Settings().checkpoint_uri == root
