# gpujobs trainer image: what every job runs (`python -m trainer`, alone or under torchrun).
#   docker build -f docker/trainer.Dockerfile -t gpujobs-trainer .
#   docker run --gpus all -e GPUJOBS_RUN_CONFIG_JSON='{...}' gpujobs-trainer
#   docker run --gpus all --entrypoint torchrun gpujobs-trainer --nproc_per_node=8 -m trainer
# The PyTorch CUDA runtime image brings torch, CUDA and NCCL; only the trainer's small extra
# dependencies are installed on top. Exit codes: 0 done, 75 preempted after a checkpoint,
# 76 preempted without one, 2 bad configuration, 1 failure.

ARG TORCH_IMAGE=pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime

FROM ${TORCH_IMAGE}
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /src
# 1) Dependencies (torch is already in the base image and must not be replaced by pip).
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
reqs = p['dependencies'] + p['optional-dependencies']['trainer']; \
print('\n'.join(r for r in dict.fromkeys(reqs) if not r.startswith('torch')))" \
      > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt
# 2) The contract and the trainer (the api and worker packages are not needed to train).
COPY pyproject.toml README.md* ./
COPY gpujobs ./gpujobs
COPY trainer ./trainer
RUN pip install --no-deps . \
 && groupadd --system --gid 10001 gpujobs \
 && useradd --system --uid 10001 --gid gpujobs --home-dir /app --create-home \
      --shell /usr/sbin/nologin gpujobs
WORKDIR /app
USER 10001:10001
# SIGTERM (the preemption notice) goes to PID 1: exec form, so that PID 1 is the trainer itself.
ENTRYPOINT ["python", "-m", "trainer"]
