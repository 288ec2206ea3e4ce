# gpujobs worker image: Celery worker and Celery beat (same image, different command).
#   docker build --network host -f docker/worker.Dockerfile -t gpujobs-worker .
#   docker build ... --build-arg INSTALL_TRAINER=1 -t gpujobs-worker:local .
# INSTALL_TRAINER=1 adds the trainer (torch==2.13.0 and the `trainer` extra) so the *local*
# launcher can run trainers as processes inside the worker container (docker-compose). With the
# Kubernetes launcher (production) trainers run in the trainer image and the worker needs no torch.
# torch comes from TORCH_INDEX_URL (the CPU build by default; TORCH_VARIANT=cu128 for CUDA), or
# from TORCH_FIND_LINKS when set (scripts/docker-images.sh serves this machine's CPU wheel there).
# One stage: copying a venv with torch between stages costs minutes and saves nothing here (no
# compilers are installed, pip keeps no cache).

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE}
ARG TORCH_VERSION=2.13.0
ARG TORCH_VARIANT=cpu
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/${TORCH_VARIANT}
ARG TORCH_FIND_LINKS=
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    GPUJOBS_HOME=/var/lib/gpujobs
RUN groupadd --system --gid 10001 gpujobs \
 && useradd --system --uid 10001 --gid gpujobs --home-dir /app --no-create-home \
      --shell /usr/sbin/nologin gpujobs \
 && mkdir -p /app /var/lib/gpujobs \
 && chown gpujobs:gpujobs /var/lib/gpujobs \
 && python -m venv /opt/venv
COPY docker/install-torch.sh /usr/local/bin/install-torch
ARG INSTALL_TRAINER=0
# torch first, pinned, in its own (large, rarely changing) layer.
RUN if [ "$INSTALL_TRAINER" = "1" ]; then install-torch; fi
WORKDIR /src
# 1) Dependencies only, resolved from pyproject.toml: this layer is reused until pyproject changes.
COPY pyproject.toml ./
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
COPY migrations ./migrations
RUN pip install --no-deps . \
 && rm -rf /src/build /src/*.egg-info \
 && if [ "$INSTALL_TRAINER" = "1" ]; then \
      python -c "import torch; assert torch.__version__.split('+')[0] == '$TORCH_VERSION', torch.__version__"; \
    fi
WORKDIR /app
USER 10001:10001
# Celery beat keeps its schedule file in the working dir by default; pass
# `--schedule /var/lib/gpujobs/celerybeat-schedule` (writable) when running beat.
CMD ["celery", "-A", "worker.celery_app", "worker", "--loglevel=INFO"]
