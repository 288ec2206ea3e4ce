"""The trainer's configuration: the attempt's RunConfig, from a file, the environment or JSON.

Every problem a user can fix is raised as a ConfigError with a message that names the field.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpujobs import workloads
from gpujobs.runtime import ENV_RUN_CONFIG, ENV_RUN_CONFIG_JSON, RunConfig

DEFAULT_EVERY_STEPS = 200

# The settings a resumed run may change: they decide how fast, how often and where it saves,
# never what it computes. Everything else in `trainer` (workload and its args, steps or epochs,
# batch size, accumulation, learning rate, clipping, seed, precision) is part of the computation:
# a checkpoint records it, and a resume that differs is refused unless
# `trainer.checkpoint.allow_config_change` is set. The world size (torchrun's) may differ too;
# the trainer says so when it does. Gradient checkpointing recomputes the same forward pass.
FREE_ON_RESUME = (
    "trainer.dataloader",
    "trainer.checkpoint",
    "trainer.grad_checkpointing",
    "trainer.compile",
    "trainer.deterministic",
)


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


def computing_config(config: RunConfig) -> dict[str, Any]:
    """The settings that decide what training computes, flattened: {"trainer.seed": 0, ...}."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if any(prefix == free or prefix.startswith(free + ".") for free in FREE_ON_RESUME):
            return
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}.{key}", item)
        else:
            flat[prefix] = value

    walk("trainer", config.trainer.model_dump(mode="json"))
    return flat


def fingerprint(computing: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(computing, sort_keys=True).encode()).hexdigest()


def config_changes(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between a checkpoint's computing config and this run's, one line a field.

    Every TrainerSpec field is recorded (None included), so a field absent from `saved` is one
    the saving trainer did not have yet, not a change; a workload option is compared both ways.
    """
    changes = []
    for name in sorted(saved.keys() | current.keys()):
        if name not in saved and not name.startswith("trainer.args."):
            continue
        if name not in saved or name not in current or saved[name] != current[name]:
            before = _show(saved, name)
            changes.append(f"{name} changed from {before} to {_show(current, name)}")
    return changes


def _show(values: Mapping[str, Any], name: str) -> str:
    return json.dumps(values[name]) if name in values else "(unset)"
