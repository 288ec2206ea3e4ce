"""A hostile workload that attacks what the launcher reads of a trainer's output, then exits 1
at once (before the trainer could write a message of its own).

`HOSTILE_OUTPUT` (spec.env) names the attack on the termination log (GPUJOBS_TERMINATION_LOG):
`symlink` makes it a link to `HOSTILE_TARGET` (e.g. /proc/self/environ: the reader's own
environment), `fifo` a FIFO no one writes, `large` a file of `HOSTILE_BYTES` bytes. `log`
writes `HOSTILE_BYTES` bytes of numbered lines to the trainer's log instead, and `exit` only
exits. `artifacts` plants a checkpoint (step 7) in its own local checkpoint prefix whose manifest
lists a link to `HOSTILE_TARGET` (`secret`), a FIFO (`fifo`) and a link to /dev/zero (`zero`),
for the server's artifacts API to follow. It takes no options.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpujobs.runtime import ENV_RUN_CONFIG, ENV_TERMINATION_LOG
from trainer.workloads import Workload

LINE = 64  # bytes per line of the `log` attack: "line 000000000001 ...\n"


def line(number: int) -> bytes:
    return f"line {number:012d} ".encode().ljust(LINE - 1, b"x") + b"\n"


def _attack(attack: str, path: str, size: int) -> None:
    if attack == "symlink":
        os.symlink(os.environ["HOSTILE_TARGET"], path)
    elif attack == "fifo":
        os.mkfifo(path)
    elif attack == "large":
        with open(path, "wb") as out:
            for _ in range(size // LINE):
                out.write(b"why ".ljust(LINE - 1, b"y") + b"\n")
    elif attack == "artifacts":
        _plant_checkpoint()
    elif attack == "log":
        block = b"".join(line(n) for n in range(1024))
        for _ in range(size // len(block)):
            os.write(1, block)


def _plant_checkpoint() -> None:
    config = json.loads(Path(os.environ[ENV_RUN_CONFIG]).read_text())
    step = Path(config["checkpoint_uri"]) / "step-000000000007"
    step.mkdir(parents=True)
    os.symlink(os.environ["HOSTILE_TARGET"], step / "secret")
    os.mkfifo(step / "fifo")
    os.symlink("/dev/zero", step / "zero")
    promise = {"size": 4096, "sha256": "0" * 64}
    files = {name: promise for name in ("secret", "fifo", "zero")}
    (step / "manifest.json").write_text(json.dumps({"files": files}))


def build(args: dict[str, Any]) -> Workload:
    _attack(
        os.environ["HOSTILE_OUTPUT"],
        os.environ[ENV_TERMINATION_LOG],
        int(os.environ.get("HOSTILE_BYTES", "0")),
    )
    os._exit(1)
