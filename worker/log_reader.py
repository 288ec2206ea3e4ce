"""The launcher's logs as the API reads them, for the composition roots (worker.api_app, tests).

The launcher is built on the first log read, not at import: an API configured for Kubernetes
must start, and serve everything but logs, where no kubeconfig or in-cluster config is at hand.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

from api.settings import Settings, get_settings
from worker.control import make_launcher
from worker.launchers.base import Launcher

logger = logging.getLogger(__name__)


class LazyLogReader:
    def __init__(self, settings: Settings | None = None) -> None:
        self._settings = settings
        self._launcher: Launcher | None = None
        self._lock = threading.Lock()

    def __call__(self, handle: str, *, follow: bool = False) -> Iterator[str]:
        with self._lock:
            if self._launcher is None:
                try:
                    self._launcher = make_launcher(self._settings or get_settings())
                except Exception as error:  # no cluster config yet: retried on the next read
                    logger.warning("cannot read logs: launcher not configured: %s", error)
                    return iter([f"[logs unavailable: the launcher is not configured: {error}]\n"])
            launcher = self._launcher
        return launcher.logs(handle, follow=follow)
