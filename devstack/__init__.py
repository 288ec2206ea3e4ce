"""Real local services for tests and benchmarks: PostgreSQL, Redis, SeaweedFS, and the whole
service (API, Celery worker and beat, local launcher) as processes on this machine; and the spot
demo sized to this machine's trainer (spot_demo.py, `make spot-demo`).

Neither server code nor the SDK imports this package; tests and benchmarks do.
"""
