# gpujobs trainer image: what every job runs (`python -m trainer`, alone or under torchrun).
#   docker build --network host -f docker/trainer.Dockerfile -t gpujobs-trainer:cpu .
#   docker build --network host -f docker/trainer.Dockerfile --build-arg TORCH_VARIANT=cu128 \
#     -t gpujobs-trainer:cu128 .
#   docker run --gpus all -e GPUJOBS_RUN_CONFIG_JSON='{...}' gpujobs-trainer:cu128
#   docker run --gpus all --entrypoint torchrun gpujobs-trainer:cu128 --nproc_per_node=8 -m trainer
# TORCH_VARIANT picks the torch==2.13.0 build: `cpu` (default) or a CUDA one such as `cu128`, from
# https://download.pytorch.org/whl/${TORCH_VARIANT}: those CUDA wheels bring the CUDA runtime,
# cuDNN and NCCL as pip packages, so the base stays a plain Python image and only the host's NVIDIA
# driver (and the NVIDIA container runtime) is needed. TORCH_FIND_LINKS, when set, is where a
# local torch-2.13.0+<variant> wheel is served (scripts/docker-images.sh, no PyTorch index).
# Exit codes: 0 done, 75 preempted after a checkpoint, 76 preempted without one, 2 bad
# configuration, 1 failure.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE}
ARG TORCH_VERSION=2.13.0
ARG TORCH_VARIANT=cpu
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/${TORCH_VARIANT}
ARG TORCH_FIND_LINKS=
LABEL org.gpujobs.torch-variant=${TORCH_VARIANT}
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH
RUN groupadd --system --gid 10001 gpujobs \
 && useradd --system --uid 10001 --gid gpujobs --home-dir /app --create-home \
      --shell /usr/sbin/nologin gpujobs \
 && python -m venv /opt/venv
COPY docker/install-torch.sh /usr/local/bin/install-torch
RUN install-torch
WORKDIR /src
# 1) The trainer's other dependencies (torch is installed and must not be replaced by pip).
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
reqs = p['dependencies'] + p['optional-dependencies']['trainer']; \
print('\n'.join(r for r in dict.fromkeys(reqs) if not r.startswith('torch')))" \
      > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt
# 2) The contract and the trainer.
COPY pyproject.toml README.md* ./
COPY gpujobs ./gpujobs
COPY api ./api
COPY worker ./worker
COPY trainer ./trainer
COPY migrations ./migrations
RUN pip install --no-deps . \
 && rm -rf /src/build /src/*.egg-info \
 && python -c "import torch; assert torch.__version__.split('+')[0] == '$TORCH_VERSION', torch.__version__"
WORKDIR /app
USER 10001:10001
# SIGTERM (the preemption notice) goes to PID 1: exec form, so that PID 1 is the trainer itself.
ENTRYPOINT ["python", "-m", "trainer"]
