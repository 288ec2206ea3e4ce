"""The tiny `gpt` job the stack's end-to-end tests and the chaos benchmark train: seconds on a CPU.

Its corpus is named: the default (the running interpreter's stdlib) differs between the stack's
trainers (the runtime's interpreter under a root server, worker/launchers/runtime.py) and a
reference run in the test's own interpreter, which would then read other text. It is the
trainers' own view of the `api` package: the same bytes where the runtime had to copy them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from devstack.confinement import ROOT, reachable_package

TINY_GPT: dict[str, Any] = {
    "n_layer": 2,
    "n_embd": 32,
    "n_head": 4,
    "block_size": 32,
    "corpus": str(reachable_package("api")),
    "corpus_bytes": 200_000,
}


def trainer_steps_per_second(
    trainer: dict[str, Any],
    *,
    scratch: Path,
    steps: int = 200,
    env: dict[str, str] | None = None,
) -> float:
    """How many steps a second this machine's trainer makes of `trainer` now: measured.

    A test whose deadline must be feasible sizes its job from this. CI machines differ several
    times over (200 steps/s of the tiny model on one, 13 on another), and a job sized for the
    fastest one cannot meet its deadline on the slowest, whatever the scheduler decides. The rate
    is taken between the first and the last progress lines, so the process start is left out.
    """
    config = {
        "job_id": "calibration",
        "checkpoint_uri": str(scratch / "checkpoints"),
        "trainer": {**trainer, "steps": steps, "checkpoint": {"every_steps": steps}},
        # Figures every 50 ms, so even a fast machine's 200 steps give many to time between.
        "progress_every_s": 0.05,
    }
    path = scratch / "calibration.json"
    path.write_text(json.dumps(config))
    done = subprocess.run(
        [sys.executable, "-m", "trainer", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=ROOT,
        env=None if env is None else {**os.environ, **env},
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    progress = [line for line in lines if "event" not in line and "step" in line]
    # the last step's figures are sent again once its checkpoint is saved: time the first
    first, last = progress[0], next(p for p in progress if p["step"] == progress[-1]["step"])
    if last["step"] <= first["step"] or last["time"] <= first["time"]:
        raise AssertionError(f"too few progress lines to time: {progress}")
    return float(last["step"] - first["step"]) / (last["time"] - first["time"])
