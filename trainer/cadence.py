"""When the loop takes a checkpoint: every N steps, and every S seconds by rank 0's clock (the
ranks then agree on it, so they all save at the same step)."""

from __future__ import annotations

import time

from trainer.config import CheckpointInterval


class SaveCadence:
    def __init__(self, interval: CheckpointInterval, *, keeps_time: bool) -> None:
        self.interval = interval
        self.keeps_time = keeps_time
        self._saved_at = time.monotonic()

    def time_due(self) -> bool:
        every = self.interval.every_seconds
        return bool(every and self.keeps_time and time.monotonic() - self._saved_at >= every)

    def step_due(self, step: int) -> bool:
        every = self.interval.every_steps
        return bool(every and step % every == 0)

    def saved(self) -> None:
        self._saved_at = time.monotonic()
