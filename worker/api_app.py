"""The production API entry point: `uvicorn worker.api_app:app`, the API with the launcher's log
reader.

`api` never imports `worker`, so the pieces of the API that need launcher code (logs) are
composed here, on the worker side, like the embedded default in worker.standalone.
"""

from __future__ import annotations

from api.app import create_app
from worker.log_reader import LazyLogReader

app = create_app(logs=LazyLogReader())
