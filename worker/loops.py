"""The control loops in-process (embedded mode): schedule and reconcile on ticks or nudges."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from worker.control import ControlPlane
from worker.reconciler import reconcile_once
from worker.scheduler import schedule_once

log = logging.getLogger(__name__)


class Loop:
    """Runs `step` every `interval` seconds, or at once when nudged; one run at a time."""

    def __init__(self, name: str, step: Callable[[], object], interval: float) -> None:
        self.name = name
        self.step = step
        self.interval = interval
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"gpujobs-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def nudge(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:  # a failing pass must not end the loop; the next one retries
                log.exception("%s pass failed", self.name)
            self._wake.wait(self.interval)
            self._wake.clear()


class InProcessLoops:
    def __init__(self, cp: ControlPlane) -> None:
        self.schedule = Loop("schedule", lambda: schedule_once(cp), cp.settings.schedule_interval_s)
        self.reconcile = Loop(
            "reconcile", lambda: reconcile_once(cp), cp.settings.reconcile_interval_s
        )

    def start(self) -> None:
        self.schedule.start()
        self.reconcile.start()

    def stop(self) -> None:
        self.schedule.stop()
        self.reconcile.stop()

    def nudge(self, task: str, job_id: str) -> None:
        (self.reconcile if task == "reconcile" else self.schedule).nudge()
