"""`python -m trainer`: the image entrypoint, alone or under torchrun.

Exit codes: 0 done, 75 preempted after a checkpoint, 76 preempted without one, 78 a configuration
the user must fix (retrying cannot help; its message goes to the termination log), 1 anything
else.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from gpujobs.runtime import EXIT_CONFIG_ERROR
from trainer.preemption import PreemptionNotice
from trainer.termination import write_termination_message

EXIT_CONFIG = EXIT_CONFIG_ERROR


def main(argv: list[str] | None = None) -> int:
    # First, before the imports below (seconds on a busy machine): from here a SIGTERM is a
    # notice the trainer answers with 75/76, not an outright death.
    notice = PreemptionNotice().install()
    from trainer import scratch
    from trainer.config import ConfigError, load_run_config

    scratch.prepare()

    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__)
    parser.add_argument("--config", help="RunConfig JSON file (instead of GPUJOBS_RUN_CONFIG)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # httpx logs every progress POST at INFO: half a job's log would be its own reporting.
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        config = load_run_config(args.config)
        from trainer.loop import Trainer  # torch loads only once the config is known to be good

        return Trainer(config, notice=notice).run().exit_code
    except ConfigError as exc:
        print(f"trainer: configuration error: {exc}", file=sys.stderr)
        write_termination_message(f"configuration error: {exc}")
        return EXIT_CONFIG_ERROR


if __name__ == "__main__":
    code = main()
    # Everything that matters is durable when main() returns (the final save is waited for).
    # Skip the interpreter's teardown: gloo's threads can make it abort ("terminate called
    # without an active exception"), which would turn a finished run into a failed attempt.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
