"""A workload that never gets to its first step: its build says what it waits for, once, and
waits forever (an import behind a lock, a dataset that never arrives, a deadlock). A SIGTERM
does not end it: the trainer only notes the notice while a workload builds. It takes no options.
"""

from __future__ import annotations

import time
from typing import Any

from trainer.workloads import Workload

WAITING = "silent: waiting for a dataset that never arrives"


def build(args: dict[str, Any]) -> Workload:
    print(WAITING, flush=True)
    while True:
        time.sleep(3600)
