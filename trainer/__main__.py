"""`python -m trainer`: the image entrypoint, alone or under torchrun.

Exit codes: 0 done, 75 preempted after a checkpoint, 76 preempted without one, 2 a configuration
the user must fix, 1 anything else.
"""

from __future__ import annotations

import argparse
import logging
import sys

from trainer.preemption import PreemptionNotice

EXIT_CONFIG = 2


def main(argv: list[str] | None = None) -> int:
    # First, before the imports below (seconds on a busy machine): from here a SIGTERM is a
    # notice the trainer answers with 75/76, not an outright death.
    notice = PreemptionNotice().install()
    from trainer.config import ConfigError, load_run_config

    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__)
    parser.add_argument("--config", help="RunConfig JSON file (instead of GPUJOBS_RUN_CONFIG)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = load_run_config(args.config)
        from trainer.loop import Trainer  # torch loads only once the config is known to be good

        return Trainer(config, notice=notice).run().exit_code
    except ConfigError as exc:
        print(f"trainer: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(main())
