"""A simulated spot market for the local launcher: when spot is there, and when it is taken.

One market for the whole machine, as if every spot offer lived in it: replaying a real trace
from shared/data/spot-traces (time-scaled), or preempting at a given rate. Its clock starts when
the launcher's state directory first sees it, so restarts of the worker keep the same market.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Protocol


class SpotMarket(Protocol):
    def available(self, now: float) -> bool: ...

    def preemption_time(self, *, now: float, attempt_id: str) -> float | None:
        """Wall-clock time at which a spot instance started at `now` is taken back."""
        ...


def market_origin(state_dir: Path) -> float:
    """The market's clock origin, fixed by whichever process asks first (atomically)."""
    path = state_dir / "market.json"
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps({"t0": time.time()}))
    for _ in range(50):  # the winner may still be writing its line
        text = path.read_text()
        if text:
            return float(json.loads(text)["t0"])
        time.sleep(0.01)
    raise RuntimeError(f"{path} stays empty")


# Shipped with the package (public data, see its README) so a clone needs no reference data set.
DEFAULT_TRACE = Path(__file__).parent / "traces" / "aws-us-east-1a-p3.2xlarge.json"
# Where the replay of the shipped trace starts (worker/launchers/local/traces): spot for 16 ticks
# (52 s of wall time at x60), gone for 3 (10 s), back for 49 (2 min 39 s). Its first ticks hold
# no spot for 800 s; from here a job submitted within the first minute of `make run` is
# preempted within a minute and resumes seconds later.
SHIPPED_TRACE_START = 14695


class TraceMarket:
    """Replays a trace from tick `start`: `data[i] > 0` means spot is available during tick i."""

    def __init__(
        self, *, data: list[int], gap_seconds: float, time_scale: float, t0: float, start: int = 0
    ):
        if not data:
            raise ValueError("the spot trace is empty")
        if not 0 <= start < len(data):
            raise ValueError(f"spot_trace_start {start} is outside the trace's {len(data)} ticks")
        self.data = data
        self.tick_s = gap_seconds / time_scale  # wall-clock seconds per trace tick
        self.t0 = t0
        self.start = start

    @classmethod
    def from_file(cls, path: Path, *, time_scale: float, t0: float, start: int = 0) -> TraceMarket:
        raw = json.loads(Path(path).read_text())
        return cls(
            data=[int(v) for v in raw["data"]],
            gap_seconds=float(raw["metadata"]["gap_seconds"]),
            time_scale=time_scale,
            t0=t0,
            start=start,
        )

    def _tick(self, now: float) -> int:
        """Ticks replayed since t0 (the trace's tick is this plus `start`)."""
        return max(0, int((now - self.t0) // self.tick_s))

    def available(self, now: float) -> bool:
        return self.data[(self.start + self._tick(now)) % len(self.data)] > 0

    def preemption_time(self, *, now: float, attempt_id: str) -> float | None:
        start = self._tick(now)
        for offset in range(1, len(self.data) + 1):
            if self.data[(self.start + start + offset) % len(self.data)] <= 0:
                return self.t0 + (start + offset) * self.tick_s
        return None  # spot never goes away in this trace


class RateMarket:
    """Spot is always offered; each instance lives an exponential time (seeded by the attempt)."""

    def __init__(self, *, rate_per_hour: float, time_scale: float):
        self.rate_per_wall_second = rate_per_hour * time_scale / 3600.0

    def available(self, now: float) -> bool:
        return True

    def preemption_time(self, *, now: float, attempt_id: str) -> float | None:
        if self.rate_per_wall_second <= 0:
            return None
        digest = hashlib.sha256(attempt_id.encode()).digest()
        uniform = (int.from_bytes(digest[:8], "big") + 0.5) / 2**64
        return now - math.log(uniform) / self.rate_per_wall_second
