from __future__ import annotations

import time

from trainer.cadence import SaveCadence
from trainer.config import CheckpointInterval


def test_a_step_interval_is_due_on_its_multiples_only() -> None:
    cadence = SaveCadence(CheckpointInterval(every_steps=50, every_seconds=None), keeps_time=True)
    assert [step for step in range(1, 201) if cadence.step_due(step)] == [50, 100, 150, 200]
    assert not cadence.time_due()


def test_a_time_interval_is_kept_by_rank_0_and_restarts_at_each_save() -> None:
    interval = CheckpointInterval(every_steps=None, every_seconds=0.05)
    ours, theirs = SaveCadence(interval, keeps_time=True), SaveCadence(interval, keeps_time=False)
    assert not ours.time_due()
    time.sleep(0.06)
    assert ours.time_due()
    assert not theirs.time_due()  # the other ranks learn it from rank 0, at the same step
    ours.saved()
    assert not ours.time_due()
    assert not ours.step_due(7)
