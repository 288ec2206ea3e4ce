"""The production API entry point: `uvicorn worker.api_app:app`, the API with the launcher's log
reader.

`api` never imports `worker`, so the pieces of the API that need launcher code (logs) are
composed here, on the worker side, like the embedded default in worker.standalone.

The launcher is built on the first log read, not at import: an API configured for Kubernetes
must start, and serve everything but logs, where no kubeconfig or in-cluster config is at hand.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

from api.app import create_app
from api.settings import get_settings
from worker.control import make_launcher
from worker.launchers.base import Launcher

logger = logging.getLogger(__name__)


class LazyLogReader:
    def __init__(self) -> None:
        self._launcher: Launcher | None = None
        self._lock = threading.Lock()

    def __call__(self, handle: str, *, follow: bool = False) -> Iterator[str]:
        with self._lock:
            if self._launcher is None:
                try:
                    self._launcher = make_launcher(get_settings())
                except Exception as error:  # no cluster config yet: retried on the next read
                    logger.warning("cannot read logs: launcher not configured: %s", error)
                    return iter([f"[logs unavailable: the launcher is not configured: {error}]\n"])
            launcher = self._launcher
        return launcher.logs(handle, follow=follow)


app = create_app(logs=LazyLogReader())
