# gpujobs API image: FastAPI server + migrations + the admin CLI (no torch).
#   docker build --network host -f docker/api.Dockerfile -t gpujobs-api .
#   docker build ... --build-arg PYTHON_IMAGE=local/python:3.11-bookworm   (no registry: see
#   scripts/docker-base-images.sh)
# Runs: python -m worker.api_app (default CMD: uvicorn under Settings' connection limits). Migrations: `python -m api.admin migrate` (they
# ship inside the installed package); first team: `python -m api.admin create-team NAME`.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE}
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    GPUJOBS_HOST=0.0.0.0 \
    GPUJOBS_PORT=8000 \
    GPUJOBS_HOME=/var/lib/gpujobs
RUN groupadd --system --gid 10001 gpujobs \
 && useradd --system --uid 10001 --gid gpujobs --home-dir /app --no-create-home \
      --shell /usr/sbin/nologin gpujobs \
 && mkdir -p /app /var/lib/gpujobs /var/lib/gpujobs-secrets \
 && chown gpujobs:gpujobs /var/lib/gpujobs /var/lib/gpujobs-secrets \
 && chmod 700 /var/lib/gpujobs-secrets \
 && python -m venv /opt/venv
WORKDIR /src
# 1) Dependencies only, resolved from pyproject.toml: this layer is reused until pyproject changes.
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['server']))" > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt
# 2) The project itself (deps are already there), migrations included.
COPY pyproject.toml README.md* ./
COPY gpujobs ./gpujobs
COPY api ./api
COPY worker ./worker
COPY trainer ./trainer
COPY migrations ./migrations
RUN pip install --no-deps . \
 && rm -rf /src/build /src/*.egg-info \
 && python -c "import api.migrate as m; m.migrations_dir()"
COPY docker/entrypoint.sh /usr/local/bin/gpujobs-entrypoint
WORKDIR /app
# For `alembic upgrade head` run by hand (or by a chart) from WORKDIR; the admin CLI does not
# need these.
COPY alembic.ini ./
COPY migrations ./migrations
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"]
# The entrypoint only fills GPUJOBS_ADMIN_TOKEN from ADMIN_TOKEN_FILE when asked to; then it
# execs the command, which stays PID 1 (signals reach uvicorn directly).
ENTRYPOINT ["gpujobs-entrypoint"]
CMD ["python", "-m", "worker.api_app", "--host", "0.0.0.0", "--port", "8000"]
