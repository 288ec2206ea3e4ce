"""Where the trainer's configuration comes from, and clear errors when it is wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpujobs.runtime import (
    ENV_RUN_CONFIG,
    ENV_RUN_CONFIG_JSON,
    ENV_TERMINATION_LOG,
    EXIT_CONFIG_ERROR,
)
from tests.trainer.trainer_runs import REPO, run_config
from trainer.config import (
    DEFAULT_EVERY_STEPS,
    CheckpointInterval,
    ConfigError,
    checkpoint_interval,
    load_run_config,
)


def test_config_from_file_argument_env_path_or_inline_json(tmp_path: Path) -> None:
    cfg = run_config("/tmp/ckpt", steps=7)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(cfg))
    assert load_run_config(str(path), {}).trainer.steps == 7
    assert load_run_config(None, {ENV_RUN_CONFIG: str(path)}).trainer.steps == 7
    assert load_run_config(None, {ENV_RUN_CONFIG_JSON: json.dumps(cfg)}).trainer.steps == 7


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({}, "no run config"),
        ({ENV_RUN_CONFIG: "/nonexistent.json"}, "cannot read /nonexistent.json"),
        ({ENV_RUN_CONFIG_JSON: "{oops"}, "not valid JSON"),
        (
            {ENV_RUN_CONFIG_JSON: json.dumps({"trainer": {"steps": 1}})},
            "checkpoint_uri: Field required",
        ),
        (
            {ENV_RUN_CONFIG_JSON: json.dumps(run_config("/c", epochs=2))},
            "set exactly one of steps and epochs",
        ),
        (
            {ENV_RUN_CONFIG_JSON: json.dumps(run_config("/c", amp="fp8"))},
            "trainer.amp:",
        ),
        (
            {ENV_RUN_CONFIG_JSON: json.dumps(run_config("/c", batchsize=4))},
            "trainer.batchsize: Extra inputs are not permitted",
        ),
    ],
)
def test_config_errors_name_the_problem(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_run_config(None, environ)
    assert message in str(info.value)


def test_checkpoint_interval_resolution() -> None:
    cfg = run_config("/c", checkpoint={"every_seconds": 60})
    from gpujobs.runtime import RunConfig

    assert checkpoint_interval(RunConfig.model_validate(cfg)) == CheckpointInterval(None, 60)
    resolved = RunConfig.model_validate({**cfg, "checkpoint_every_steps": 33})
    assert checkpoint_interval(resolved) == CheckpointInterval(33, None)
    auto = RunConfig.model_validate(run_config("/c", checkpoint="auto"))
    assert checkpoint_interval(auto) == CheckpointInterval(DEFAULT_EVERY_STEPS, None)


def test_entrypoint_exits_78_with_a_readable_message_in_its_termination_log(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(run_config("/c", steps=0)))
    termination_log = tmp_path / "termination-log"
    done = subprocess.run(
        [sys.executable, "-m", "trainer", "--config", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, ENV_TERMINATION_LOG: str(termination_log)},
    )
    assert done.returncode == EXIT_CONFIG_ERROR  # EX_CONFIG: retrying cannot help
    assert "trainer.steps: Input should be greater than or equal to 1" in done.stderr
    assert "Traceback" not in done.stderr
    message = termination_log.read_text()
    assert message.startswith("configuration error:")
    assert "trainer.steps: Input should be greater than or equal to 1" in message
