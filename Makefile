# Two commands: `make run` (the embedded single-machine service) and `make test`.
# Both install what they need, idempotently, starting from a bare Debian machine with python3.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The CPU build of torch: a wheel on local disk (shared/wheels beside the clone, or /opt/wheels on
# older machines); without it pip would take a multi-GB CUDA build from the registry.
WHEELS ?= $(firstword $(wildcard $(abspath ../shared/wheels) /opt/wheels))
PIP_FIND := $(if $(WHEELS),--find-links $(WHEELS))
export TORCH_WHEEL_DIR := $(WHEELS)

.PHONY: run spot-demo test test-clock install system-deps services docker docker-engine \
	docker-base-images docker-images cluster cluster-deps cluster-images cluster-down kueue lint \
	format bench clean

run: install
	$(BIN)/python -m worker.standalone

# The spot demo sized to this machine's trainer (docs/spot-demo.md): writes .gpujobs/spot-demo.yaml.
spot-demo: install
	$(BIN)/python -m devstack.spot_demo

# The real cluster and the trainer image in it come first: tests/k8s run beside the rest
# (scripts/run-tests.sh).
test: test-clock install system-deps services docker cluster-images
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	@BIN=$(BIN) bash scripts/run-tests.sh

# The clock of the whole run, installs and builds included (benchmarks/make_test.py).
test-clock:
	@bash scripts/test-clock.sh start

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, pinned: torch==2.13.0 resolves to the CPU wheel in $(WHEELS), while a bare `torch`
# requirement would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(PIP_FIND) torch==2.13.0 numpy
	$(BIN)/pip install -q $(PIP_FIND) -e '.[server,trainer,dev]'
	touch $@

install: $(STAMP)

system-deps:
	@bash scripts/system-deps.sh

services:
	@bash scripts/services.sh

# The compose deployment test (tests/deploy/test_compose_stack.py) needs a Docker engine and base
# images; no registry is assumed: the Debian base is bootstrapped from the apt mirror, once.
docker: docker-engine docker-base-images

docker-engine: system-deps
	@bash scripts/docker-engine.sh

docker-base-images: docker-engine
	@bash scripts/docker-base-images.sh

# api, worker and trainer images (+ benchmarks/results/images.json); the test builds them too.
docker-images: docker-base-images
	@bash scripts/docker-images.sh

# A single-node Kubernetes cluster of the upstream components, run as processes (scripts/cluster/:
# built from the Go module proxy into ~/.cache/gpujobs, state under /var/lib/gpujobs-cluster).
cluster: cluster-deps docker-engine
	@bash scripts/cluster/up.sh

cluster-deps:
	@bash scripts/cluster/deps.sh

# The trainer image, built with Docker and imported into the cluster's containerd. Its sizes are
# not the published ones (`make docker-images` writes those, and the README is made from them).
cluster-images: cluster docker-base-images
	@IMAGE_SIZES_JSON=/dev/null bash scripts/docker-images.sh
	@bash scripts/cluster/images.sh $${TRAINER_IMAGE:-gpujobs-trainer:cpu}

# Kueue on the local cluster: built from the Go module proxy, its manager run as a process
# (scripts/cluster/kueue.sh); the queues tests/k8s/test_real_kueue.py submits to.
kueue: cluster
	@bash scripts/cluster/kueue.sh

cluster-down:
	@bash scripts/cluster/down.sh

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

format:
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: install services
	$(BIN)/python -m benchmarks.api_load

clean:
	rm -rf .gpujobs .pytest_cache .ruff_cache
