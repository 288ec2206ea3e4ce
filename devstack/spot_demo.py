"""The spot demo (docs/spot-demo.md) sized to this machine: `make spot-demo`.

The trace market replays a stretch of the shipped trace where spot is there for 52 s, gone for
10 s, then back for 2 min 39 s (worker/launchers/local/spot_market.py, SHIPPED_TRACE_START). A job
sized in steps outruns that stretch on a slow machine (first-run's 6,000 steps at 7-10 steps a
second: 26 minutes and 14 preemptions on a loaded 2-core machine) and is never preempted on a fast
one. Sized in seconds of training from the trainer's rate measured here, it is taken back once in
the first run of spot and finishes in the second, within a few minutes, anywhere.

    python -m devstack.spot_demo [--out PATH]

measures the rate of examples/first-run.yaml's trainer and writes that example, sized, to
`home`/spot-demo.yaml; the CLI submits it.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from api.pricing.cost_model import LOCAL_RESTART_HOURS
from api.settings import Settings
from devstack.confinement import ROOT
from devstack.workloads import trainer_steps_per_second
from worker.launchers.local.spot_market import DEFAULT_TRACE, SHIPPED_TRACE_START

EXAMPLE = ROOT / "examples" / "first-run.yaml"
# When the job starts training, counted from the replay's start (`make run`): submitted within
# half a minute, as the demo says, its trainer's start included.
LATE_S = 30.0
# From the preemption to training again: the local launcher's changeover (a process start and a
# restore from the checkpoint, up to about 35 s measured on a busy 2-core machine).
RESTART_S = LOCAL_RESTART_HOURS * 3600.0
# Steps the measurement trains: seconds on a slow machine, enough figures on a fast one.
MEASURED_STEPS = 150


@dataclass(frozen=True, slots=True)
class Stretch:
    """The replay from its start, in wall-clock seconds: spot for `up_s`, gone for `out_s`, back
    for `back_s`."""

    up_s: float
    out_s: float
    back_s: float


def stretch_at(data: Sequence[int], *, start: int, tick_s: float) -> Stretch:
    """The stretch a trace replays from tick `start`, `tick_s` wall-clock seconds a tick (the
    trace's gap over the market's time scale); `data[i] > 0`: spot at tick i."""
    runs: list[int] = []
    at = start
    for spot in (True, False, True):
        length = 0
        while length < len(data) and (data[(at + length) % len(data)] > 0) == spot:
            length += 1
        runs.append(length)
        at += length
    if not all(runs):
        raise ValueError(f"the trace from tick {start} is not spot, then none, then spot again")
    up, out, back = (n * tick_s for n in runs)
    return Stretch(up_s=up, out_s=out, back_s=back)


def training_s(stretch: Stretch, *, late_s: float = LATE_S, restart_s: float = RESTART_S) -> float:
    """Seconds of training the demo job is sized for. More than the first run of spot, so that
    even a job training from the replay's first second is preempted; no more than what a job
    that began `late_s` in can finish in the second run after its restart. Their geometric
    mean, so the rate may be off by the same factor either way (the shipped stretch's: 1.7)
    and the job still does both: measured on a quiet moment, a trainer runs slower once the
    service and other work share its cores, or faster once they are gone."""
    least = stretch.up_s
    most = stretch.up_s - late_s + stretch.back_s - restart_s
    if most <= least:
        raise ValueError(
            f"spot comes back for {stretch.back_s:.0f} s: too short to finish after a restart "
            f"of {restart_s:.0f} s"
        )
    return math.sqrt(least * most)


def demo_steps(steps_per_s: float, stretch: Stretch) -> int:
    """Steps of a trainer running `steps_per_s` that train for training_s(stretch)."""
    if not (steps_per_s > 0 and math.isfinite(steps_per_s)):
        raise ValueError(f"a measured rate is a positive number of steps a second: {steps_per_s}")
    return max(1, math.ceil(steps_per_s * training_s(stretch)))


def sized_spec(example: dict[str, Any], *, steps: int, seconds: float) -> dict[str, Any]:
    """The example renamed and sized: its steps, ten checkpoints, its estimate."""
    trainer = dict(example["trainer"])
    trainer["steps"] = steps
    trainer["checkpoint"] = {**trainer.get("checkpoint", {}), "every_steps": max(1, steps // 10)}
    return {
        **example,
        "name": "spot-demo",
        "trainer": trainer,
        "estimated_hours": round(seconds / 3600.0, 3),
    }


def shipped_stretch(settings: Settings) -> Stretch:
    raw = json.loads(DEFAULT_TRACE.read_text())
    tick_s = float(raw["metadata"]["gap_seconds"]) / settings.local.spot_trace_time_scale
    return stretch_at([int(v) for v in raw["data"]], start=SHIPPED_TRACE_START, tick_s=tick_s)


def _measured_rate(trainer: dict[str, Any]) -> float:
    scratch = Path(tempfile.mkdtemp(prefix="gpujobs-spot-demo-"))
    try:
        return trainer_steps_per_second(trainer, scratch=scratch, steps=MEASURED_STEPS)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _stale_market(settings: Settings) -> str:
    """A note where this home's market began long enough ago that its replay is past the
    stretch: the market keeps its clock across restarts (spot_market.market_origin)."""
    path = settings.home / "market.json"
    if not path.exists():
        return ""
    ago = time.time() - float(json.loads(path.read_text())["t0"])
    if ago < LATE_S:
        return ""
    return (
        f"\nThis home's spot market began replaying {ago / 60:.0f} min ago and keeps its clock "
        f"across restarts: stop `make run`, remove {path} and start it again to replay the "
        "stretch from its start."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.spot_demo", description=__doc__)
    parser.add_argument("--out", type=Path, help="where to write the spec (`home`/spot-demo.yaml)")
    args = parser.parse_args(argv)
    settings = Settings()
    stretch = shipped_stretch(settings)
    example = yaml.safe_load(EXAMPLE.read_text())
    print(f"measuring this machine's trainer ({MEASURED_STEPS} steps of {EXAMPLE.name})...")
    rate = _measured_rate(example["trainer"])
    steps = demo_steps(rate, stretch)
    seconds = training_s(stretch)
    out = args.out or settings.home / "spot-demo.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"# {EXAMPLE.name} sized for the spot demo (docs/spot-demo.md) by `make spot-demo`: "
        f"{rate:.1f} steps/s measured here,\n# {steps} steps, about {seconds:.0f} s of "
        f"training: preempted in the replay's first {stretch.up_s:.0f} s of spot, finished "
        f"in the {stretch.back_s:.0f} s after.\n"
    )
    spec = sized_spec(example, steps=steps, seconds=seconds)
    out.write_text(header + yaml.safe_dump(spec, sort_keys=False))
    print(
        f"{rate:.1f} steps/s: {out} trains {steps} steps (about {seconds:.0f} s).\n"
        "Now start the service with the trace market, and submit within half a minute:\n"
        "  GPUJOBS_SPOT_MARKET=trace make run\n"
        f"  .venv/bin/gpujobs submit {_shown(out)} --wait" + _stale_market(settings)
    )
    return 0


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
