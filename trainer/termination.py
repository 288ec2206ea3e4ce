"""The termination message: a short "why I could not run" for whoever started the trainer.

Written to the file named by GPUJOBS_TERMINATION_LOG (the Kubernetes `/dev/termination-log`
convention), so the reason reaches the job without parsing logs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from gpujobs.runtime import ENV_TERMINATION_LOG, TERMINATION_MESSAGE_MAX_BYTES


def write_termination_message(message: str, environ: Mapping[str, str] = os.environ) -> None:
    path = environ.get(ENV_TERMINATION_LOG)
    if not path:
        return
    data = message.strip().encode("utf-8", errors="replace")
    if len(data) > TERMINATION_MESSAGE_MAX_BYTES:  # keep the end: the cause is written last
        data = data[-TERMINATION_MESSAGE_MAX_BYTES:]
    try:
        with open(path, "wb") as out:
            out.write(data)
    except OSError:
        pass  # the exit code still says what kind of failure it was
