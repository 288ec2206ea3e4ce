"""The cloud's preemption notice (SIGTERM): noted, acted on at the end of the current step."""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any


class PreemptionNotice:
    def __init__(self) -> None:
        self.received = False
        self._previous: Any = None

    def install(self) -> PreemptionNotice:
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _handle(self, _signum: int, _frame: FrameType | None) -> None:
        # Only a flag: the step in progress finishes, then the loop saves and exits.
        self.received = True
