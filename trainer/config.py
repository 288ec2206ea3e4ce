"""The trainer's configuration: the attempt's RunConfig, from a file, the environment or JSON.

Every problem a user can fix is raised as a ConfigError with a message that names the field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from gpujobs import workloads
from gpujobs.runtime import ENV_RUN_CONFIG, ENV_RUN_CONFIG_JSON, RunConfig

DEFAULT_EVERY_STEPS = 200


class ConfigError(Exception):
    """A configuration the trainer cannot run; the message says what to change."""


@dataclass(frozen=True)
class CheckpointInterval:
    every_steps: int | None
    every_seconds: float | None


def parse_run_config(text: str, *, source: str) -> RunConfig:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: not valid JSON ({exc})") from exc
    try:
        config = RunConfig.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error["loc"]) or "(top level)"
            problems.append(f"  {where}: {error['msg']}")
        raise ConfigError(f"{source}: invalid run config\n" + "\n".join(problems)) from exc
    check_workload(config)
    return config


def check_workload(config: RunConfig) -> None:
    """The API's submit-time checks again, here where the trainer starts and before anything the
    spec names is imported: the run config may not have come through the API."""
    found = workloads.problems(
        config.trainer.workload, config.trainer.args, config.allowed_workload_prefixes
    )
    if found:
        lines = "\n".join(f"  {where}: {reason}" for where, reason in found)
        raise ConfigError(f"workload {config.trainer.workload!r} refused\n{lines}")


def load_run_config(config_file: str | None, environ: Mapping[str, str] = os.environ) -> RunConfig:
    """`--config FILE` first, then GPUJOBS_RUN_CONFIG (a path), then GPUJOBS_RUN_CONFIG_JSON."""
    path = config_file or environ.get(ENV_RUN_CONFIG)
    if path:
        source = "--config" if config_file else ENV_RUN_CONFIG
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read {path} ({exc.strerror})") from exc
        return parse_run_config(text, source=f"{source}={path}")
    inline = environ.get(ENV_RUN_CONFIG_JSON)
    if inline:
        return parse_run_config(inline, source=ENV_RUN_CONFIG_JSON)
    raise ConfigError(
        f"no run config: pass --config FILE or set {ENV_RUN_CONFIG} (a path) "
        f"or {ENV_RUN_CONFIG_JSON} (the JSON itself)"
    )


def checkpoint_interval(config: RunConfig) -> CheckpointInterval:
    """The scheduler's resolved interval wins over the spec's; neither set means the default."""
    if config.checkpoint_every_steps or config.checkpoint_every_seconds:
        return CheckpointInterval(config.checkpoint_every_steps, config.checkpoint_every_seconds)
    spec = config.trainer.checkpoint
    if spec.every_steps or spec.every_seconds:
        return CheckpointInterval(spec.every_steps, spec.every_seconds)
    return CheckpointInterval(DEFAULT_EVERY_STEPS, None)
