"""The production API entry point: `uvicorn worker.api_app:app`, the API with the launcher's log
reader.

`api` never imports `worker`, so the pieces of the API that need launcher code (logs) are
composed here, on the worker side, like the embedded default in worker.standalone.
"""

from api.app import create_app
from api.settings import get_settings
from worker.control import make_launcher

app = create_app(logs=make_launcher(get_settings()).logs)
