"""A checkpoint records the settings that decide what training computes; a resume that changes
one is refused naming it (exit 78), unless `trainer.checkpoint.allow_config_change` is set.
Settings that only decide how fast or how often it saves may change freely."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpujobs.checkpoints import step_dir
from gpujobs.runtime import RunConfig
from tests.trainer.trainer_runs import TrainerProcess, run_config, run_in_process
from trainer.__main__ import EXIT_CONFIG
from trainer.checkpoint import load_latest, open_store
from trainer.config import ConfigError, computing_config, fingerprint
from trainer.optimization import lr_factor


def first_run(uri: str) -> dict[str, Any]:
    config = run_config(uri, steps=10, checkpoint={"every_steps": 5, "keep_last": 3})
    assert run_in_process(config)[0].exit_code == 0
    return config


def changed(config: dict[str, Any], **trainer: Any) -> dict[str, Any]:
    return {**config, "trainer": {**config["trainer"], **trainer}}


def test_the_manifest_records_the_computing_config(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    config = first_run(uri)
    manifest = json.loads(open_store(uri).get(f"{step_dir(10)}/manifest.json"))
    computing = computing_config(RunConfig.model_validate(config))
    assert manifest["meta"]["config"] == computing
    assert manifest["meta"]["config_sha256"] == fingerprint(computing)
    assert computing["trainer.learning_rate"] == 3e-4
    assert "trainer.dataloader.num_workers" not in computing


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"learning_rate": 0.001}, "trainer.learning_rate changed from 0.0003 to 0.001"),
        ({"steps": 20}, "trainer.steps changed from 10 to 20"),
        ({"seed": 7}, "trainer.seed changed from 0 to 7"),
        ({"batch_size": 8}, "trainer.batch_size changed from 4 to 8"),
    ],
)
def test_a_resume_that_changes_the_computation_is_refused(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    uri = str(tmp_path / "ckpt")
    config = first_run(uri)
    store = open_store(uri)
    before = {key: store.get(key) for key in store.list()}
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        run_in_process(changed(config, **change))
    assert {key: store.get(key) for key in store.list()} == before


def test_a_workload_option_is_part_of_the_computation(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    config = first_run(uri)
    args = {**config["trainer"]["args"], "dropout": 0.2}
    with pytest.raises(ConfigError, match=r"trainer\.args\.dropout changed from \(unset\) to 0\.2"):
        run_in_process(changed(config, args=args))


def test_allow_config_change_resumes_with_the_new_values(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    config = first_run(uri)
    longer = changed(
        config,
        steps=14,
        learning_rate=0.001,
        checkpoint={"every_steps": 5, "keep_last": 3, "allow_config_change": True},
    )
    result, records = run_in_process(longer)
    assert result.exit_code == 0
    assert [r["step"] for r in records if r.get("event") == "resume"] == [10]
    notes = [r["message"] for r in records if r.get("event") == "note"]
    assert any("trainer.learning_rate changed from 0.0003 to 0.001" in n for n in notes), notes
    final = load_latest(uri)
    assert final is not None and final.step == 14
    assert final.meta["config"]["trainer.learning_rate"] == 0.001  # the new run's from now on
    assert final.shared["scheduler"]["base_lrs"] == [0.001]  # and the one it trained with
    factor = lr_factor(14, 14)
    assert [g["lr"] for g in final.shared["optimizer"]["param_groups"]] == [0.001 * factor]


def test_how_fast_and_how_often_it_saves_may_change(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    config = first_run(uri)
    config = changed(config, steps=10)
    config["trainer"]["checkpoint"] = {"every_steps": 5, "keep_last": 3}
    assert run_in_process(config)[0].exit_code == 0
    free = changed(
        config,
        dataloader={"num_workers": 1, "prefetch_factor": 4, "persistent_workers": False},
        checkpoint={"every_seconds": 60, "keep_last": 2, "on_preemption": False},
        grad_checkpointing=True,
    )
    free["progress_every_s"] = 3
    result, records = run_in_process(free)
    assert result.exit_code == 0
    assert [r["step"] for r in records if r.get("event") == "resume"] == [10]


def test_the_entrypoint_exits_with_the_config_error_code(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    config = first_run(uri)
    run = TrainerProcess(changed(config, learning_rate=0.001), tmp_path)
    assert run.wait() == EXIT_CONFIG
    assert "trainer.learning_rate changed from 0.0003 to 0.001" in run.stderr()
