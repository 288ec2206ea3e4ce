"""What the API and the control loop ask of the configured launcher, whichever it is.

A launcher's settings group (api/launchers/<name>.py) answers `traits()`; callers ask a trait
(`Settings.launcher_traits()`), never the launcher's name, so a new launcher changes no caller.
What a launcher does besides (drain, a spot probe, a standby) is the worker's to ask of the
launcher itself (worker.launchers.base.Capability).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

from pydantic_settings import BaseSettings, SettingsConfigDict

# The same prefix as Settings': each field's name is its environment variable's.
GROUP_CONFIG = SettingsConfigDict(env_prefix="GPUJOBS_", env_file=None, extra="ignore")


@dataclass(frozen=True)
class LauncherTraits:
    # Placements and costs are the scheduler's choice played out elsewhere than on the cloud
    # capacity they name, never billed: every client shows them as simulated.
    simulated: bool
    # Every rank of a job runs as a process on the worker's own machine: submit and estimate
    # refuse what that machine cannot hold (Settings.local_max_ranks), and trainers' directories
    # are on it.
    on_this_machine: bool
    # Provisioning + restore time of a new attempt, as the policy sees it, when
    # GPUJOBS_RESTART_HOURS is unset.
    restart_hours: float
    # GPU models run at one speed when GPUJOBS_GPU_SPEEDS is unset: the same processes on the
    # same machine, whatever offer they are placed on.
    gpu_models_alike: bool
    # Simulated seconds per wall-clock second of the spot market the placement weighs; 1 for
    # a real market.
    market_time_scale: float = 1.0


class LauncherSettings(BaseSettings):
    """A launcher's own group of settings (a field of Settings named after the launcher)."""

    model_config = GROUP_CONFIG

    @abstractmethod
    def traits(self) -> LauncherTraits:
        """What the rest of the system may know of the launcher, as these settings make it."""
