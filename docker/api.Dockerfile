# gpujobs API image: FastAPI server + alembic migrations (no torch).
#   docker build -f docker/api.Dockerfile -t gpujobs-api .
# Runs: uvicorn worker.api_app:app (default CMD); migrations: `alembic upgrade head` (WORKDIR has alembic.ini).

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# 1) Dependencies only, resolved from pyproject.toml: this layer is reused until pyproject changes.
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['server']))" > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt
# 2) The project itself (deps are already there).
COPY pyproject.toml README.md* ./
COPY gpujobs ./gpujobs
COPY api ./api
COPY worker ./worker
COPY trainer ./trainer
RUN pip install --no-deps .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    GPUJOBS_HOST=0.0.0.0 \
    GPUJOBS_PORT=8000 \
    GPUJOBS_HOME=/var/lib/gpujobs
RUN groupadd --system --gid 10001 gpujobs \
 && useradd --system --uid 10001 --gid gpujobs --home-dir /app --no-create-home \
      --shell /usr/sbin/nologin gpujobs \
 && mkdir -p /app /var/lib/gpujobs \
 && chown gpujobs:gpujobs /var/lib/gpujobs
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
# Migrations run from here: `alembic upgrade head` (the code itself comes from the installed package).
COPY alembic.ini ./
COPY migrations ./migrations
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"]
CMD ["uvicorn", "worker.api_app:app", "--host", "0.0.0.0", "--port", "8000"]
