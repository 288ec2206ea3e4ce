"""The production API entry point: `python -m worker.api_app`, the API with the launcher's log
reader, served under the limits of `Settings` (api.serving).

`api` never imports `worker`, so the pieces of the API that need launcher code (logs) are
composed here, on the worker side, like the embedded default in worker.standalone. `app` is
also an ASGI app for other servers (`uvicorn worker.api_app:app`), which then bring their own
connection limits: the header deadline and the cap per client are api.serving's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from api.app import create_app
from api.serving import serve
from api.settings import get_settings
from worker.log_reader import LazyLogReader

app = create_app(logs=LazyLogReader())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.api_app", description=__doc__)
    parser.add_argument("--host", help="default: GPUJOBS_HOST")
    parser.add_argument("--port", type=int, help="default: GPUJOBS_PORT")
    parser.add_argument("--log-level", default="info", help="uvicorn's (default: info)")
    args = parser.parse_args(argv)
    serve(app, get_settings(), host=args.host, port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
