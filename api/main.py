"""The API alone, without launcher code (no job logs): `uvicorn api.main:app`.

For benchmarks and tools that need only the HTTP API. Production serves `worker.api_app`, which
adds the launcher's log reader.
"""

from api.app import create_app

app = create_app()
