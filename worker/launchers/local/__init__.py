"""Local launcher: each attempt is a process group on this machine (see launcher.py).

launcher.py     the Launcher: launch, status, cancel, drain, logs
record.py       the attempt's record on disk, one directory per attempt
lock.py         the launch lock: one launch per attempt
processes.py    the attempt's process group, its signals, and its stray processes
observe.py      how an attempt ended, and the trainer's output, read as hostile
containment.py  who owns which directory: the trainer's uid and what it may write
spot_market.py  the simulated spot market
configure.py    the launcher as Settings.local describes it (api/launchers/local.py)
plugin.py       its registration (worker/launchers/registry.py)
"""

from worker.launchers.local.containment import UID_REGISTRY, local_checkpoint_dir
from worker.launchers.local.launcher import PREFIX, LocalLauncher
from worker.launchers.local.lock import LAUNCH_GRACE_S
from worker.launchers.local.spot_market import RateMarket, SpotMarket, TraceMarket

__all__ = [
    "LAUNCH_GRACE_S",
    "PREFIX",
    "UID_REGISTRY",
    "LocalLauncher",
    "RateMarket",
    "SpotMarket",
    "TraceMarket",
    "local_checkpoint_dir",
]
