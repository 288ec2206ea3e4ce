# gpujobs worker image: Celery worker and Celery beat (same image, different command).
#   docker build -f docker/worker.Dockerfile -t gpujobs-worker .
#   docker build -f docker/worker.Dockerfile --build-arg INSTALL_TRAINER=1 -t gpujobs-worker:local .
# INSTALL_TRAINER=1 adds the `trainer` extra (torch, CPU wheels by default) so the *local* launcher
# can run trainers as processes inside the worker container (docker-compose). With the Kubernetes
# launcher (production) trainers run in the trainer image and the worker needs no torch.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ARG INSTALL_TRAINER=0
# Where torch comes from when INSTALL_TRAINER=1; CPU wheels keep the image small. For CUDA wheels use
# e.g. https://download.pytorch.org/whl/cu128 (or an empty value for PyPI's default).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# 1) Dependencies only, resolved from pyproject.toml: this layer is reused until pyproject changes.
COPY pyproject.toml ./
# torch first, from TORCH_INDEX_URL, in its own (large, rarely changing) layer.
RUN if [ "$INSTALL_TRAINER" = "1" ]; then \
      pip install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch>=2.3"; \
    fi
RUN EXTRAS="server"; if [ "$INSTALL_TRAINER" = "1" ]; then EXTRAS="server trainer"; fi \
 && python -c "import sys, tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
reqs = p['dependencies'] + [r for e in sys.argv[1:] for r in p['optional-dependencies'][e]]; \
print('\n'.join(dict.fromkeys(reqs)))" $EXTRAS > /tmp/requirements.txt \
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
    GPUJOBS_HOME=/var/lib/gpujobs
RUN groupadd --system --gid 10001 gpujobs \
 && useradd --system --uid 10001 --gid gpujobs --home-dir /app --no-create-home \
      --shell /usr/sbin/nologin gpujobs \
 && mkdir -p /app /var/lib/gpujobs \
 && chown gpujobs:gpujobs /var/lib/gpujobs
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
USER 10001:10001
# Celery beat keeps its schedule file in the working dir by default; pass
# `--schedule /var/lib/gpujobs/celerybeat-schedule` (writable) when running beat.
CMD ["celery", "-A", "worker.celery_app", "worker", "--loglevel=INFO"]
