"""The local launcher's settings (worker/launchers/local: trainers as processes on the worker's
machine) and what they make of it for the rest (`traits`), under the GPUJOBS_ names they always
had.

They are here, not in the launcher's folder, because `Settings` (api.settings) holds them and the
worker imports api, never the reverse; the launcher reads its group, `Settings.local`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from api.launchers.traits import LauncherSettings, LauncherTraits
from api.pricing.cost_model import LOCAL_RESTART_HOURS

# Processes and threads a job's trainer uid may hold (RLIMIT_NPROC counts threads on Linux):
# torchrun, 8 ranks with their DataLoader workers and each one's torch, CUDA, NCCL and OpenMP
# threads, a standby's as many beside them, with room to spare; a sixteenth of the kernel's
# default pid_max (32768), so one job cannot take the machine's pids.
TRAINER_MAX_PIDS = 2048


class LocalLauncherSettings(LauncherSettings):
    """The local launcher (worker/launchers/local): trainers as processes on the worker's
    machine."""

    # The simulated spot market
    spot_market: Literal["off", "rate", "trace"] = "off"
    spot_preemption_rate_per_hour: float = Field(
        0.0, description="rate market: preemptions per simulated hour of spot."
    )
    spot_trace: str = Field(
        "",
        description="trace market: a spot-traces JSON file to replay; empty = the one shipped "
        "with the worker (AWS us-east-1a p3.2xlarge, Feb 2023).",
    )
    spot_trace_start: int | None = Field(
        None,
        ge=0,
        description="trace market: the tick (index into the trace's data) the replay starts "
        "at; empty = 0, or for the shipped trace 14695, where spot is offered for 52 s of wall "
        "time at x60 and then taken back for 10 s: a preemption within a minute of start.",
    )
    spot_trace_time_scale: float = Field(
        60.0, description="Simulated seconds per wall-clock second for the spot market."
    )
    spot_notice_s: float = Field(10.0, description="Preemption notice: SIGTERM, then SIGKILL.")
    # What contains a trainer (docs/security.md)
    trainer_python: str = Field(
        "",
        description="Interpreter that runs trainers; empty = the server's. Run as root, the "
        "server starts trainers as unprivileged uids, which must be able to reach it.",
    )
    trainer_python_path: str = Field(
        "", description="PYTHONPATH of trainers: where operator-allowed workload modules live."
    )
    trainer_uid_first: int = Field(
        200_000, description="Run as root, each job's trainers get their own uid from here."
    )
    trainer_uid_count: int = Field(100_000, description="How many trainer uids (one per job).")
    trainer_max_pids: int = Field(
        TRAINER_MAX_PIDS,
        ge=16,
        description="Run as root: the processes and threads a job's trainers may hold "
        "together (RLIMIT_NPROC of its uid), so that a fork bomb fails in the job, not the "
        "machine. Count threads: a rank with DataLoader workers runs dozens.",
    )
    trainer_s3_access_key_id: str = Field(
        "", description="S3 keys for trainers (never the server's own): scope them to the prefix."
    )
    trainer_s3_secret_access_key: str = ""
    trainer_s3_region: str = ""
    drain_on_shutdown: bool = Field(
        False,
        description="A stopping worker stops its trainers (checkpoint, then resume later) "
        "instead of leaving them running; for containers, whose processes die with the worker.",
    )

    def traits(self) -> LauncherTraits:
        # Its placements are the scheduler's choice played out on this machine; a restart is a
        # process start, not a node's provisioning (the first run was quoted 17x its bill with
        # the node's figure); its simulated market runs its own clock.
        simulated_market = self.spot_market != "off"
        return LauncherTraits(
            simulated=True,
            on_this_machine=True,
            restart_hours=LOCAL_RESTART_HOURS,
            gpu_models_alike=True,
            market_time_scale=self.spot_trace_time_scale if simulated_market else 1.0,
        )
