"""Run a command and record its exit status in a file, surviving the launcher's own death.

The local launcher starts `python -m worker.launchers.supervise EXIT_FILE -- CMD...` in a new
process group. Signals for the group (the preemption notice, a cancel) reach the command
directly; the supervisor ignores SIGTERM so that it outlives the command and can write its exit
status, which the launcher reads even after a restart.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: supervise EXIT_FILE -- COMMAND...", file=sys.stderr)
        return 2
    exit_file = Path(argv[0])
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen(argv[2:], preexec_fn=_default_sigterm)
    code = child.wait()
    tmp = exit_file.with_suffix(".tmp")
    tmp.write_text(str(code))
    os.replace(tmp, exit_file)
    return 0


def _default_sigterm() -> None:
    # Ignored dispositions are inherited across exec: give the command the default back.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
