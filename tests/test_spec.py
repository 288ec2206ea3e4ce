from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from gpujobs.runtime import RunConfig
from gpujobs.spec import CheckpointSpec, JobSpec


def _errors(**body: object) -> set[str]:
    with pytest.raises(ValidationError) as info:
        JobSpec.model_validate(body)
    return {".".join(str(p) for p in e["loc"]) for e in info.value.errors()}


def test_minimal_spec_gets_defaults() -> None:
    spec = JobSpec.model_validate({"name": "a", "trainer": {"steps": 5}})
    assert spec.trainer.amp == "bf16"
    assert spec.capacity.types == ["reserved", "spot", "on_demand"]
    assert spec.trainer.checkpoint.auto
    assert spec.deadline_at(datetime.now(UTC)) is None


def test_checkpoint_auto_shorthand_and_exclusive_intervals() -> None:
    assert CheckpointSpec.model_validate("auto").auto
    assert not CheckpointSpec(every_steps=10).auto
    with pytest.raises(ValidationError):
        CheckpointSpec(every_steps=10, every_seconds=60)


def test_constraints_name_their_fields() -> None:
    assert "trainer" in _errors(name="a", trainer={"steps": 1, "epochs": 1})
    assert "trainer.grad_accum_steps" in _errors(
        name="a", trainer={"steps": 1, "grad_accum_steps": 0}
    )
    assert "capacity.types" in _errors(name="a", trainer={"steps": 1}, capacity={"types": []})
    assert "capacity.types" in _errors(
        name="a", trainer={"steps": 1}, capacity={"types": ["spot", "spot"]}
    )
    assert "resources.gpu_models" in _errors(
        name="a", trainer={"steps": 1}, resources={"gpu_models": []}
    )
    assert "trainer.workload" in _errors(name="a", trainer={"steps": 1, "workload": "../evil"})
    naive = (datetime.now() + timedelta(hours=1)).isoformat()
    assert "deadline" in _errors(name="a", trainer={"steps": 1}, deadline=naive)
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert "" in _errors(name="a", trainer={"steps": 1}, deadline=later, deadline_hours=2)


def test_stored_spec_with_a_passed_deadline_still_loads() -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    data = JobSpec(name="a", trainer={"steps": 1}, deadline=later).model_dump(mode="json")
    data["deadline"] = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    with pytest.raises(ValidationError):
        JobSpec.model_validate(data)
    assert JobSpec.from_stored(data).deadline is not None


def test_user_workloads_and_run_config_round_trip() -> None:
    spec = JobSpec(name="a", trainer={"steps": 1, "workload": "my_pkg.models:build"})
    config = RunConfig(trainer=spec.trainer, checkpoint_uri="s3://bucket/prefix")
    assert RunConfig.model_validate_json(config.model_dump_json()) == config


def test_env_keys_follow_an_allowlist_pattern_and_refusals_name_the_key() -> None:
    from gpujobs.spec import env_key_refusal

    for key in ("LD_PRELOAD", "PYTHONPATH", "AWS_PROFILE", "GPUJOBS_X", "PATH", "RANK", "a"):
        assert env_key_refusal(key) is not None, key
        assert f"env.{key}" in _errors(name="a", trainer={"steps": 1}, env={key: "v"})
    for key in ("NCCL_DEBUG", "OMP_NUM_THREADS", "WANDB_MODE", "X"):
        assert env_key_refusal(key) is None, key
    assert env_key_refusal("X" * 129) is not None


def test_an_env_value_with_a_nul_is_refused_by_key_but_a_stored_one_still_loads() -> None:
    spec = {"name": "a", "trainer": {"steps": 1}, "env": {"OK": "x", "BAD": "a\x00b"}}
    assert _errors(**spec) == {"env.BAD"}
    # Stored under older rules: loaded, so that the launcher can fail the job with its reason.
    assert JobSpec.from_stored(spec).env["BAD"] == "a\x00b"


def test_types_are_strict_and_floats_finite_but_enums_and_times_parse_from_strings() -> None:
    assert "trainer.steps" in _errors(name="a", trainer={"steps": "10"})
    assert "trainer.steps" in _errors(name="a", trainer={"steps": True})
    assert "trainer.max_grad_norm" in _errors(
        name="a", trainer={"steps": 1, "max_grad_norm": 1e999}
    )
    assert "trainer.args.x" in _errors(name="a", trainer={"steps": 1, "args": {"x": float("nan")}})
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    spec = JobSpec.model_validate(
        {
            "name": "a",
            "trainer": {"steps": 1, "amp": "off", "learning_rate": 1},
            "capacity": {"types": ["spot"]},
            "deadline": later,
        }
    )
    assert spec.trainer.amp == "off" and spec.capacity.types == ["spot"]
    assert spec.deadline is not None and spec.trainer.learning_rate == 1.0
    # What the API stores, it loads again under the same strict rules.
    assert JobSpec.from_stored(spec.model_dump(mode="json")) == spec


def test_run_config_carries_only_well_formed_prefixes() -> None:
    config = RunConfig(
        trainer={"steps": 1}, checkpoint_uri="/c", allowed_workload_prefixes=["acme.models"]
    )
    assert RunConfig.model_validate_json(config.model_dump_json()) == config
    with pytest.raises(ValidationError):
        RunConfig(trainer={"steps": 1}, checkpoint_uri="/c", allowed_workload_prefixes=[""])


def test_a_stored_deadline_outside_todays_range_still_loads() -> None:
    data = JobSpec(name="a", trainer={"steps": 1}).model_dump(mode="json")
    data["deadline"] = "9999-12-31T00:00:00Z"  # accepted before times were bounded
    assert "deadline" in _errors(**data)
    assert JobSpec.from_stored(data).deadline is not None
