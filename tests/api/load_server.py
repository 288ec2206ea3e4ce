"""A real server for the load and crash tests: the embedded composition (API and control loops
in one process, on SQLite or PostgreSQL) with a stand-in trainer chosen by GPUJOBS_TEST_TRAINER:
`silent` (default) is a `sleep` that prints nothing; `stubborn` also ignores SIGTERM, so only
the stop's escalation (SIGKILL after the notice) ends it.

    python -m tests.api.load_server      (GPUJOBS_* settings from the environment)

Each finished control-loop pass appends a line to `<home>/passes`, so a test can tell that the
loops kept working while it loaded the API.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path

from api.app import create_app
from api.database import make_engine, make_session_factory
from api.migrate import upgrade_to_head
from api.serving import serve
from api.settings import Settings
from worker.control import build_control_plane
from worker.launchers.base import LaunchRequest
from worker.launchers.local import LocalLauncher
from worker.log_reader import log_reader
from worker.loops import InProcessLoops
from worker.reconciler import reconcile_once
from worker.scheduler import schedule_once
from worker.standalone import ensure_default_team

STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ignoring SIGTERM', flush=True); time.sleep(600)"
)


class StandInLauncher(LocalLauncher):
    def _trainer_command(self, request: LaunchRequest) -> list[str]:
        if os.environ.get("GPUJOBS_TEST_TRAINER") == "stubborn":
            return [self.trainer_python, "-c", STUBBORN]
        return [shutil.which("sleep") or "/bin/sleep", "600"]


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    settings = Settings()
    engine = make_engine(settings)
    upgrade_to_head(engine)
    factory = make_session_factory(engine)
    ensure_default_team(settings, factory)
    control = build_control_plane(settings, factory=factory)
    control.launcher = StandInLauncher(
        root=settings.make_home() / "attempts",
        notice_s=settings.local.spot_notice_s,
        trainer_python=settings.local.trainer_python or None,
    )
    settings.home.mkdir(parents=True, exist_ok=True)
    passes = Path(settings.home) / "passes"

    def counted(name: str, step):  # type: ignore[no-untyped-def]
        def run() -> None:
            step(control)
            with open(passes, "a") as out:
                out.write(name + "\n")

        return run

    loops = InProcessLoops(control)
    loops.schedule.step = counted("schedule", schedule_once)
    loops.reconcile.step = counted("reconcile", reconcile_once)
    app = create_app(
        settings, session_factory=factory, nudge=loops.nudge, logs=log_reader(control.launcher)
    )
    loops.start()
    try:
        log_level = os.environ.get("GPUJOBS_TEST_LOG_LEVEL", "warning")  # info: the access log
        serve(app, settings, log_level=log_level)
    finally:
        loops.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
