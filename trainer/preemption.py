"""The cloud's preemption notice (SIGTERM): noted, acted on at the end of the current step.

The entrypoint installs it first thing, before importing pydantic, torch and the rest (over a
second on a busy machine): a notice that arrives meanwhile is kept, not fatal.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any


class PreemptionNotice:
    def __init__(self) -> None:
        self.received = False
        self.installed = False
        self._previous: Any = None

    def install(self) -> PreemptionNotice:
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        self.installed = True
        return self

    def uninstall(self) -> None:
        if self.installed:
            signal.signal(signal.SIGTERM, self._previous or signal.SIG_DFL)
            self.installed = False
            self._previous = None

    def _handle(self, _signum: int, _frame: FrameType | None) -> None:
        # Only a flag: the step in progress finishes, then the loop saves and exits.
        self.received = True
